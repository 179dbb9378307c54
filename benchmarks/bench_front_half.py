"""The Ko-PIQA front half end to end on a synthetic crawl: read -> normalize -> length -> langid ->
exact dedup -> MinHash near-dup, with the ko-piqa job's configuration and the real runner
(`run_pipeline`: Ray Data, per-stage Parquet checkpoints) into a temporary lake.

    .venv/bin/python benchmarks/bench_front_half.py                  # 100k rows
    .venv/bin/python benchmarks/bench_front_half.py --rows 1000000   # the 1M-row target (< 5 min)
    .venv/bin/python benchmarks/bench_front_half.py --rows 1000000 --io-only lake/bench/crawl-1000000.jsonl

Prints per-stage rows in / kept / dropped and seconds from the run manifest, total rows/s, the peak
resident memory of the driver and of driver + Ray workers (sampled), and the near-duplicate
precision/recall of the minhash stage against the injected copies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_minhash import RssSampler, machine  # noqa: E402
from benchmarks.common import build_crawl, score_clusters  # noqa: E402

FRONT_HALF = ("normalize", "length_filter", "langid", "exact_dedup", "minhash_dedup")


def bench_checkpoint_io(crawl_jsonl: Path, rows: int, repeat: int = 2) -> None:
    """CPU and wall seconds to write and read one stage's output the way the runner does (Parquet,
    100k-row files, 16,384-row groups) per compression codec, on the normalised crawl with the
    columns the lake holds after langid; codecs interleaved, best of `repeat`."""
    import numpy as np
    import polars as pl

    from transforms.text.normalize import NormalizeText

    t = NormalizeText()(pl.read_ndjson(crawl_jsonl, n_rows=rows).select("id", "text", "source").to_arrow())
    t = t.append_column("lang", pa.array(["ko"] * t.num_rows)).append_column(
        "lang_score", pa.array(np.full(t.num_rows, 0.99, np.float32)))
    out = Path(tempfile.mkdtemp(prefix="piqaforge-io-"))
    codecs = ("snappy", "none", "lz4", "zstd")

    def write(codec: str) -> None:
        for i in range(0, t.num_rows, 100_000):
            pq.write_table(t.slice(i, 100_000), out / f"{codec}-{i}.parquet", row_group_size=16_384, compression=codec)

    def read(codec: str) -> None:
        for i in range(0, t.num_rows, 100_000):
            pq.read_table(out / f"{codec}-{i}.parquet")

    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeat):
        for what, fn in (("write", write), ("read", read)):
            for codec in codecs:
                c0, w0 = time.process_time(), time.perf_counter()
                fn(codec)
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
                old = best.get(f"{what} {codec}", (float("inf"), float("inf")))
                best[f"{what} {codec}"] = (min(old[0], cpu), min(old[1], wall))
    print(f"{machine()}\n{t.num_rows:,} rows, columns {t.schema.names}")
    for key, (cpu, wall) in best.items():
        size = sum(f.stat().st_size for f in out.glob(f"{key.split()[1]}-*.parquet"))
        print(f"{key:<14}{cpu:8.2f} CPU-s{wall:8.2f} wall-s  {size / 2**20:6.0f} MiB")
    shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--workdir", default=None, help="where to write the crawl and the lake (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--set", action="append", default=[], help="config override key=value (as piqaforge --set)")
    p.add_argument("--io-only", metavar="CRAWL_JSONL", type=Path, default=None,
                   help="only time writing/reading one stage's Parquet output per codec, on --rows rows of this crawl "
                   "(e.g. lake/bench/crawl-1000000.jsonl from bench_scale.py)")
    args = p.parse_args(argv)
    if args.io_only:
        bench_checkpoint_io(args.io_only, args.rows)
        return 0

    work = Path(args.workdir or tempfile.mkdtemp(prefix="piqaforge-front-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    crawl = build_crawl(args.rows)
    crawl_path = work / "crawl.jsonl"
    with open(crawl_path, "w", encoding="utf-8") as f:
        for row in crawl.table.select(["id", "text", "source"]).to_pylist():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"synthetic crawl: {crawl.num_rows:,} rows -> {crawl_path} ({crawl_path.stat().st_size / 2**20:.0f} MiB) "
          f"in {time.perf_counter() - t0:.1f}s")

    from jobs.config import parse_set
    from transforms.core.lake import Lake
    from transforms.core.runner import init_ray, run_pipeline
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    overrides = {"input.paths": [str(crawl_path)], "input.format": "jsonl", "num_cpus": args.num_cpus}
    for item in args.set:
        key, value = parse_set(item)
        overrides[key] = value
    recipe = load_recipe("ko-piqa", overrides)
    source, stages = run_stages(recipe, "crawl", lake=work / "lake")
    # The front half only, whatever the recipe's crawl run appends after it (the LLM back half).
    front = [s for s in stages if s.name in FRONT_HALF]
    with RssSampler() as rss:
        w0 = time.perf_counter()
        init_ray(None, args.num_cpus)
        result = run_pipeline(job="ko-piqa", dataset="ko-piqa-bench", source=source, stages=front,
                              lake=Lake(str(work / "lake")), config={"recipe": "ko-piqa", "params": recipe.params})
        total = time.perf_counter() - w0
    manifest = json.loads(Path(result.outputs["manifest"]).read_text())
    print(f"\n{machine()}")
    print(f"{'stage':<16}{'in':>10}{'kept':>10}{'dropped':>10}{'seconds':>9}{'rows/s':>10}  reasons")
    for s in manifest["stages"]:
        dropped = sum(s["rows_dropped"].values())
        rate = f"{s['rows_in'] / s['seconds']:,.0f}" if s["seconds"] else "-"
        print(f"{s['name']:<16}{s['rows_in']:>10,}{s['rows_kept']:>10,}{dropped:>10,}{s['seconds']:>9.1f}{rate:>10}  "
              f"{s['rows_dropped']}")
    print(f"\nfront half ({' -> '.join(FRONT_HALF)}): {crawl.num_rows:,} rows in {total:.1f}s = {crawl.num_rows / total:,.0f} rows/s "
          f"(wall, {args.num_cpus} CPUs, including Ray start-up)")
    print(f"CPU: {rss.cpu_seconds:.0f} s over driver + Ray processes = {crawl.num_rows / rss.cpu_seconds:,.0f} rows "
          f"per CPU-second -> {rss.cpu_seconds / args.num_cpus:.0f}s on {args.num_cpus} idle cores "
          f"(load average now {os.getloadavg()[0]:.1f}: other processes share this machine)")
    print(f"peak RSS: driver {rss.peak_self / 2**20:.0f} MiB, driver + Ray workers {rss.peak_total / 2**20:.0f} MiB")

    # Score the two dedup stages together against the injected families: exact copies should go in
    # exact_dedup, near copies in minhash_dedup; a drop is right when its kept row is in the family.
    dup: dict[str, str] = {}
    filtered: set[str] = set()
    for s in manifest["stages"]:
        files = sorted(Path(s["outputs"]["rejected"]).rglob("*.parquet"))
        if not files:
            continue
        if "dedup" in s["name"]:
            t = pa.concat_tables([pq.read_table(f, columns=["id", "duplicate_of"]) for f in files])
            dup.update(zip(t.column("id").to_pylist(), t.column("duplicate_of").to_pylist(), strict=True))
        else:
            for path in files:
                filtered.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
    # Rows the filters removed, and their families, are out of the comparison.
    ids, fams = crawl.table.column("id").to_pylist(), crawl.table.column("family").to_pylist()
    gone = {f for i, f in zip(ids, fams, strict=True) if i in filtered}
    keep = pa.array([f not in gone for f in fams])
    scored = type(crawl)(crawl.table.filter(keep))
    family_of = dict(zip(ids, fams, strict=True))
    dup = {d: r for d, r in dup.items() if family_of[d] not in gone}
    threshold = next(s for s in front if s.name == "minhash_dedup").threshold
    score = score_clusters(scored, dup, threshold)
    print(f"dedup (exact + near) vs injected copies ({len(gone):,} families touched by filters excluded): "
          f"precision {score['precision']:.4f} (with true-Jaccard drops {score['precision_jaccard']:.4f}), "
          f"recall {score['recall']:.4f} (near {score['recall_near']:.4f}, exact {score['recall_exact']:.4f}, "
          f"pairs with J >= threshold {score['recall_above_threshold']:.4f})")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
