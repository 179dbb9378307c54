"""Measured memory of each phase of the global MinHash stage, per row / band row / edge / candidate row.

    .venv/bin/python benchmarks/bench_minhash_memory.py                      # 100k, 300k, 1M, 3M rows (~3 min)
    .venv/bin/python benchmarks/bench_minhash_memory.py --sizes 100000 --id-width 24

The phases of `MinHashDedup.run_dataset` (shuffle "tasks") are called directly, in this one
process, with the stage's own functions and no Ray: the map task `_band_partitions` on every block
(signatures -> band keys -> K partitions of (key, ref) pairs), the K reducers `_reduce_buckets` (the rows of
shared buckets), `_candidates` (the sorted candidate refs, 8 bytes a candidate), `_candidate_rows` per block
(ref, id, signature of those rows), the single clustering task `_cluster` (also split into its steps: candidate
views, id ranks, star edges, verification, union-find), the marking workers' `DuplicateLookup(duplicate map)` and
`mark` on one batch.

Input: benchmarks/common.build_crawl (real Korean questions, 10% near-duplicates, 3% exact copies),
exact copies removed first (keep the smallest id per text) because exact dedup runs before MinHash
in the job, and ids rewritten to a fixed width (`crawl-000000123`, 15 characters by default: what
build_crawl gives at 100M rows) so that per-unit costs are comparable across sizes.

Memory of a phase = peak above the baseline taken just before it (after gc, Arrow's
release_unused and malloc_trim): a thread samples this process's RSS and
`pyarrow.total_allocated_bytes()` every 5 ms; `peak` is the larger of the two deltas. Outputs are
sized with Arrow `nbytes` (what goes to the object store). In Ray the inputs of a task (blocks, band
rows, bucket rows, candidate rows) sit in the object store, mapped into the worker, so a task's footprint is
input nbytes + its peak. Per-unit figures are printed side by side for each size to check that they
are linear; the JSON (benchmarks/results/minhash-memory.json) also has the 100M extrapolation.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import build_crawl  # noqa: E402
from transforms.dedup.minhash import MinHashDedup  # noqa: E402
from transforms.dedup.minhash_cluster import (  # noqa: E402
    CandidateRows,
    DuplicateLookup,
    RefLookup,
    id_ranks,
    star_pairs,
    union_find_min,
    unpack_pairs,
    verify_edges,
)
from transforms.dedup.minhash_tasks import (  # noqa: E402
    Buckets,
    _band_partitions,
    _candidate_rows,
    _candidates,
    _cluster,
    _reduce_buckets,
    band_part,
)

MiB = 2**20
_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL("libc.so.6")
    # A fixed mmap threshold (no dynamic raise): large numpy buffers are mmapped and really freed.
    _LIBC.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
except OSError:  # pragma: no cover - not glibc
    _LIBC = None


def settle() -> None:
    gc.collect()
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class Peak:
    """Peak RSS and Arrow allocation above the baseline at entry, sampled every `every` seconds."""

    def __init__(self, every: float = 0.005):
        import psutil

        self.proc, self.every = psutil.Process(), every
        self._stop = threading.Event()
        self.base_rss = self.base_arrow = self.peak_rss = self.peak_arrow = 0

    def _sample(self) -> None:
        self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
        self.peak_arrow = max(self.peak_arrow, pa.total_allocated_bytes())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def __enter__(self) -> Peak:
        settle()
        self.base_rss, self.base_arrow = self.proc.memory_info().rss, pa.total_allocated_bytes()
        self.peak_rss, self.peak_arrow = self.base_rss, self.base_arrow
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self._sample()
        self._stop.set()
        self._thread.join()
        self.retained_rss = self.proc.memory_info().rss - self.base_rss
        self.retained_arrow = pa.total_allocated_bytes() - self.base_arrow

    @property
    def rss(self) -> int:
        return self.peak_rss - self.base_rss

    @property
    def arrow(self) -> int:
        return self.peak_arrow - self.base_arrow

    @property
    def peak(self) -> int:
        return max(self.rss, self.arrow)


def measure(fn: Callable[..., Any], *args: Any) -> tuple[Any, Peak]:
    """`fn(*args)` and the memory it took."""
    with Peak() as p:
        out = fn(*args)
    return out, p


def crawl_after_exact_dedup(n: int, id_width: int) -> pa.Table:
    """build_crawl(n) with exact copies removed (smallest id per text kept) and ids of a fixed width."""
    t = build_crawl(n).table.select(["id", "text"])
    digits = id_width - len("crawl-")
    if digits < len(str(n)):
        raise ValueError(f"--id-width {id_width} too small for {n} rows")
    t = t.set_column(0, "id", pa.array([f"crawl-{i:0{digits}d}" for i in range(n)], pa.string()))
    keep = t.group_by("text", use_threads=False).aggregate([("id", "min")]).column("id_min")
    t = t.filter(pc.is_in(t.column("id"), value_set=keep))
    return t.combine_chunks()


def run_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    table = crawl_after_exact_dedup(n, args.id_width)
    rows = table.num_rows
    stage = MinHashDedup(shuffle_partitions=args.partitions, rows_per_block=args.rows_per_block, local_max_rows=0)
    bands, band_rows_per = stage.lsh_bands()
    k = args.partitions
    text_chars = pc.utf8_length(table.column("text")).to_numpy()
    print(f"\n== {n:,} crawl rows -> {rows:,} after exact dedup (built in {time.perf_counter() - t0:.0f}s); "
          f"text mean {text_chars.mean():.0f} chars, id {args.id_width} chars; {bands}x{band_rows_per} bands, "
          f"K = {k}, blocks of {args.rows_per_block:,} rows ==", flush=True)
    # What the map tasks read from the object store: the (id, text) blocks of the repartition.
    blocks = [table.slice(i, args.rows_per_block) for i in range(0, rows, args.rows_per_block)]
    stage.signatures(blocks[0].column("text").slice(0, 100))  # numba JIT / warm-up outside the measurements
    out: dict[str, Any] = {"crawl_rows": n, "rows": rows, "bands": bands, "partitions": k,
                           "rows_per_block": args.rows_per_block, "blocks": len(blocks),
                           "text_chars_mean": float(text_chars.mean()),
                           "text_utf8_bytes_mean": float(pc.binary_length(table.column("text")).to_numpy().mean()),
                           "id_chars": args.id_width, "input_nbytes": table.nbytes}

    # 1. signatures of one block (the map task computes them per batch of resources.batch_size rows).
    sig, p = measure(stage.signatures, blocks[0].column("text"))
    out["signatures_block"] = {"rows": blocks[0].num_rows, "peak": p.peak, "rss": p.rss, "arrow": p.arrow,
                               "output_nbytes": sig.nbytes, "seconds": p.seconds}
    del sig

    # 2. map tasks: band rows (key, row) of each block, split into K partitions (one object per map task).
    def nbytes(b: Any) -> int:
        return int(b[0].nbytes + b[1].nbytes)

    parts: list[Any] = []
    map_peaks, map_secs = [], 0.0
    for i, block in enumerate(blocks):
        res, p = measure(_band_partitions, block, stage, i)
        parts.append(res)
        map_peaks.append((p.peak / block.num_rows, p.peak, block.num_rows))
        map_secs += p.seconds
    band_nbytes = sum(nbytes(t) for t in parts)
    band_count = sum(len(t[0]) for t in parts)
    # Per block row over the full-size blocks (the last, short block carries the fixed costs alone).
    full = [m for m in map_peaks if m[2] == args.rows_per_block] or map_peaks
    out["map"] = {"band_rows": band_count, "band_nbytes": band_nbytes, "peak_max": max(m[1] for m in map_peaks),
                  "peak_per_block_row_max": max(full)[0],
                  "peak_per_block_row_median": float(np.median([m[0] for m in full])), "seconds": map_secs}
    print(f"  map: {band_count:,} band rows, {band_nbytes / MiB:,.0f} MiB, {map_secs:.0f}s", flush=True)

    # 3. reducers: slice i of every map output -> the rows of its shared buckets, each bucket contiguous.
    buckets, reducers = [], []
    for i in range(k):
        inputs = [band_part(b, i) for b in parts]
        res, p = measure(_reduce_buckets, i, *parts)
        buckets.append(res)
        reducers.append({"band_rows": sum(len(t[0]) for t in inputs), "input_nbytes": sum(nbytes(t) for t in inputs),
                         "peak": p.peak, "rss": p.rss, "arrow": p.arrow, "bucket_rows": len(res[0]),
                         "output_nbytes": nbytes(res), "seconds": p.seconds})
    del parts
    out["reducers"] = reducers
    bucket_rows = sum(r["bucket_rows"] for r in reducers)
    print(f"  reduce: {bucket_rows:,} rows of shared buckets, {sum(r['seconds'] for r in reducers):.0f}s", flush=True)

    # 4. the candidate refs (every ref in a shared bucket, sorted), one task for all.
    cand_refs, p = measure(_candidates, *buckets)
    cands = len(cand_refs)
    out["candidates"] = {"candidates": cands, "peak": p.peak, "output_nbytes": int(cand_refs.nbytes),
                         "seconds": p.seconds}

    # 5. ref, id and signature of each block's candidates, one task per block (it reads its range of the refs).
    cand_tables, cand_peaks = [], []
    for i, block in enumerate(blocks):
        res, p = measure(_candidate_rows, block, stage, i, cand_refs)
        cand_tables.append(res)
        cand_peaks.append((p.peak / block.num_rows, p.peak, block.num_rows))
    out["candidate_rows"] = {"rows": cands, "output_nbytes": sum(t.nbytes for t in cand_tables),
                             "peak_per_block_row_max": max(cand_peaks)[0], "peak_max": max(cand_peaks)[1]}

    # 6. the clustering task: ranks, stars, verification and union-find (inputs: K bucket parts, B candidate tables).
    (dup_map, _), p = measure(_cluster, stage, len(buckets), True, *buckets, *cand_tables)
    out["cluster"] = {"bucket_rows": bucket_rows, "buckets_nbytes": sum(nbytes(b) for b in buckets),
                      "candidates": cands, "candidate_rows_nbytes": out["candidate_rows"]["output_nbytes"],
                      "peak": p.peak, "rss": p.rss, "arrow": p.arrow, "dropped": dup_map.num_rows,
                      "output_nbytes": dup_map.nbytes, "seconds": p.seconds}
    print(f"  cluster: {dup_map.num_rows:,} near-duplicates, {p.seconds:.1f}s", flush=True)
    # ... and its steps, each measured on its own (the same code as minhash_cluster.cluster_buckets).
    candidates, p1 = measure(CandidateRows.of_tables, cand_tables, stage.num_perm, True)
    (rank, row_of_rank), p2 = measure(id_ranks, candidates.ids)

    def stars(buckets: list[Buckets], cand_refs: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # as cluster_buckets: one reducer's bucket rows at a time, refs -> ranks through one lookup
        rank_of = RefLookup(cand_refs, rank, sum(len(b[0]) for b in buckets))
        return unpack_pairs(np.unique(np.concatenate([star_pairs(k, rank_of(r)) for k, r in buckets])))

    (u, v), p3 = measure(stars, buckets, candidates.refs, rank)
    assert candidates.signatures is not None
    keep, p4 = measure(verify_edges, row_of_rank[u], row_of_rank[v], candidates.signatures, stage.threshold)
    u, v = u[keep], v[keep]

    def union_find(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        nodes = np.unique(np.concatenate([u, v]))
        root = union_find_min(np.searchsorted(nodes, u), np.searchsorted(nodes, v), len(nodes))
        return np.flatnonzero(root != np.arange(len(nodes)))

    dropped, p5 = measure(union_find, u, v)
    assert len(dropped) == dup_map.num_rows
    out["cluster_steps"] = {
        "candidate_views": {"candidates": len(candidates), "peak": p1.peak},
        "id_ranks": {"candidates": len(candidates), "peak": p2.peak},
        "star_edges": {"bucket_rows": bucket_rows, "edges_out": len(keep), "peak": p3.peak},
        "verify": {"edges_in": len(keep), "edges_out": int(keep.sum()), "peak": p4.peak},
        "union_find": {"edges_in": int(keep.sum()), "dropped": len(dropped), "peak": p5.peak},
    }
    del candidates, rank, row_of_rank, u, v, keep, buckets, cand_tables

    # 7. marking: each worker builds the lookup of the duplicate map once, then marks batches.
    lookup, p = measure(DuplicateLookup, dup_map)
    out["dup_lookup"] = {"dropped": len(lookup), "peak": p.peak, "retained": p.retained_rss,
                         "numpy_nbytes": int(lookup.ids.nbytes + lookup.reps.nbytes), "seconds": p.seconds}
    batch = stage.resources.batch_size or 8192
    mark_peaks = []
    for block in blocks[:4]:
        b = block.slice(0, batch)
        _, p = measure(stage.mark, b, lookup)
        mark_peaks.append(p.peak / b.num_rows)
    out["mark_batch"] = {"batch_rows": batch, "peak_per_row_max": max(mark_peaks)}
    if args.check and rows <= args.check:
        expected = stage.find_duplicates(table)
        out["same_as_find_duplicates"] = expected.sort_by("id").equals(dup_map.sort_by("id"))
    out["seconds"] = time.perf_counter() - t0
    return out


def per_unit(r: dict[str, Any]) -> dict[str, float]:
    """The per-unit costs (bytes) of one size's measurements."""
    red = max(r["reducers"], key=lambda x: x["peak"] / x["band_rows"])
    c, steps, dropped = r["cluster"], r["cluster_steps"], r["cluster"]["dropped"]
    return {
        "input_per_row": r["input_nbytes"] / r["rows"],
        "signature_out_per_row": r["signatures_block"]["output_nbytes"] / r["signatures_block"]["rows"],
        "signature_peak_per_row": r["signatures_block"]["peak"] / r["signatures_block"]["rows"],
        "map_peak_per_block_row": r["map"]["peak_per_block_row_max"],
        "band_row_nbytes": r["map"]["band_nbytes"] / r["map"]["band_rows"],
        "reducer_input_per_band_row": red["input_nbytes"] / red["band_rows"],
        "reducer_peak_per_band_row": red["peak"] / red["band_rows"],
        "bucket_rows_per_row": c["bucket_rows"] / r["rows"],
        "bucket_rows_per_dropped": c["bucket_rows"] / dropped,
        "bucket_row_nbytes": c["buckets_nbytes"] / c["bucket_rows"],
        "candidates_per_dropped": c["candidates"] / dropped,
        "dropped_per_row": dropped / r["rows"],
        "candidate_refs_nbytes_per_candidate": r["candidates"]["output_nbytes"] / r["candidates"]["candidates"],
        "candidates_task_peak_per_bucket_row": r["candidates"]["peak"] / c["bucket_rows"],
        "candidate_row_nbytes": c["candidate_rows_nbytes"] / c["candidates"],
        "candidate_rows_peak_per_block_row": r["candidate_rows"]["peak_per_block_row_max"],
        "unique_edges_per_dropped": steps["star_edges"]["edges_out"] / dropped,
        "verified_edges_per_dropped": steps["verify"]["edges_out"] / dropped,
        "cluster_peak_per_dropped": c["peak"] / dropped,
        "cluster_peak_per_bucket_row": c["peak"] / c["bucket_rows"],
        "cluster_total_per_dropped": (c["peak"] + c["buckets_nbytes"] + c["candidate_rows_nbytes"]) / dropped,
        "candidate_views_peak_per_candidate": steps["candidate_views"]["peak"] / steps["candidate_views"]["candidates"],
        "id_ranks_peak_per_candidate": steps["id_ranks"]["peak"] / steps["id_ranks"]["candidates"],
        "star_edges_peak_per_bucket_row": steps["star_edges"]["peak"] / steps["star_edges"]["bucket_rows"],
        "verify_peak_per_unique_edge": steps["verify"]["peak"] / steps["verify"]["edges_in"],
        "union_find_peak_per_verified_edge": steps["union_find"]["peak"] / steps["union_find"]["edges_in"],
        "dup_map_nbytes_per_dropped": c["output_nbytes"] / dropped,
        "dup_lookup_peak_per_dropped": r["dup_lookup"]["peak"] / dropped,
        "dup_lookup_retained_per_dropped": r["dup_lookup"]["retained"] / dropped,
        "mark_peak_per_batch_row": r["mark_batch"]["peak_per_row_max"],
    }


def extrapolate(u: dict[str, float], rows: float, bands: int, rows_per_block: int,
                partitions: list[int]) -> dict[str, Any]:
    """Memory at `rows` rows (after exact dedup) from the measured per-unit costs, same duplicate rate."""
    dropped = rows * u["dropped_per_row"]
    bucket_rows = dropped * u["bucket_rows_per_dropped"]
    cands = dropped * u["candidates_per_dropped"]
    band_rows = rows * bands
    blocks = int(np.ceil(rows / rows_per_block))
    return {
        "rows": rows, "dropped": dropped, "bucket_rows": bucket_rows, "candidates": cands, "band_rows": band_rows,
        "blocks": blocks,
        "input_bytes": rows * u["input_per_row"],
        "map_task_bytes": rows_per_block * (u["input_per_row"] + u["map_peak_per_block_row"]),
        "band_rows_bytes": band_rows * u["band_row_nbytes"],
        "reducer_bytes": {str(k): band_rows / k * (u["reducer_input_per_band_row"] + u["reducer_peak_per_band_row"])
                          for k in partitions},
        "candidate_refs_bytes": cands * u["candidate_refs_nbytes_per_candidate"],
        "candidates_task_bytes": bucket_rows * (u["bucket_row_nbytes"] + u["candidates_task_peak_per_bucket_row"]),
        "bucket_rows_bytes": bucket_rows * u["bucket_row_nbytes"],
        "candidate_rows_bytes": cands * u["candidate_row_nbytes"],
        "cluster_task_bytes": dropped * u["cluster_total_per_dropped"],
        "dup_lookup_bytes": dropped * u["dup_lookup_retained_per_dropped"],
        "dup_lookup_peak_bytes": dropped * u["dup_lookup_peak_per_dropped"],
        "driver_refs": {str(k): blocks * k for k in partitions},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,300000,1000000,3000000", help="crawl rows, comma-separated")
    p.add_argument("--partitions", type=int, default=16, help="K, shuffle_partitions (the job's value)")
    p.add_argument("--rows-per-block", type=int, default=65_536, help="the stage's rows_per_block")
    p.add_argument("--id-width", type=int, default=15, help="characters per id (crawl-000000123 = 15)")
    p.add_argument("--target", type=float, default=1e8, help="rows for the extrapolation")
    p.add_argument("--check", type=int, default=300_000,
                   help="compare the duplicate map with find_duplicates up to this many rows (0: never)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "minhash-memory.json")
    args = p.parse_args(argv)

    import psutil

    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"pyarrow {pa.__version__} ({pa.default_memory_pool().backend_name}), numpy {np.__version__}; "
          f"process RSS at start {psutil.Process().memory_info().rss / MiB:.0f} MiB; load {os.getloadavg()[0]:.1f}")
    results = [run_size(n, args) for n in sizes]
    units = [per_unit(r) for r in results]

    print("\n== per-unit memory (bytes), one column per size: linear if the columns agree ==")
    print(f"{'measure':<44}" + "".join(f"{r['rows']:>13,}" for r in results) + f"{'max/min':>9}")
    for key in units[0]:
        vals = [u[key] for u in units]
        lo = min(vals)
        ratio = max(vals) / lo if lo > 0 else float("nan")
        fmt = "{:>13.3f}" if max(vals) < 10 else "{:>13,.0f}"
        print(f"{key:<44}" + "".join(fmt.format(v) for v in vals) + f"{ratio:>9.2f}")
    for r in results:
        red = r["reducers"]
        line = (f"  {r['rows']:,} rows: largest reducer {max(x['band_rows'] for x in red):,} band rows, "
                f"input {max(x['input_nbytes'] for x in red) / MiB:.0f} MiB + peak {max(x['peak'] for x in red) / MiB:.0f} MiB; "
                f"map task peak {r['map']['peak_max'] / MiB:.0f} MiB; cluster task peak {r['cluster']['peak'] / MiB:.0f} MiB "
                f"over {r['cluster']['buckets_nbytes'] / MiB:.0f} MiB bucket rows + "
                f"{r['cluster']['candidate_rows_nbytes'] / MiB:.0f} MiB candidate rows; {r['cluster']['dropped']:,} dropped; "
                f"{r['seconds']:.0f}s")
        if "same_as_find_duplicates" in r:
            line += f"; same duplicate map as find_duplicates: {r['same_as_find_duplicates']}"
        print(line)

    ks = [16, 64, 256, 512, 1024]
    ext = extrapolate(units[-1], args.target, results[-1]["bands"], args.rows_per_block, ks)
    print(f"\n== extrapolated to {args.target:,.0f} rows from the {results[-1]['rows']:,}-row costs "
          f"(same duplicate rate, id {args.id_width} chars, text {results[-1]['text_chars_mean']:.0f} chars) ==")
    gb = 1e9
    print(f"  input blocks {ext['input_bytes'] / gb:.1f} GB; band rows {ext['band_rows']:.2e} = "
          f"{ext['band_rows_bytes'] / gb:.1f} GB shuffled; map task {ext['map_task_bytes'] / MiB:.0f} MiB")
    print("  reducer (input + peak): " + ", ".join(f"K={k}: {v / MiB:,.0f} MiB" for k, v in ext["reducer_bytes"].items()))
    print(f"  {ext['dropped']:,.0f} dropped, {ext['bucket_rows']:,.0f} bucket rows, {ext['candidates']:,.0f} candidates: "
          f"bucket rows {ext['bucket_rows_bytes'] / gb:.2f} GB + candidate rows {ext['candidate_rows_bytes'] / gb:.2f} GB; "
          f"cluster task total {ext['cluster_task_bytes'] / gb:.1f} GB")
    print(f"  candidate refs (all sources) {ext['candidate_refs_bytes'] / gb:.2f} GB, the task that builds them "
          f"{ext['candidates_task_bytes'] / gb:.2f} GB; duplicate lookup per marking worker "
          f"{ext['dup_lookup_bytes'] / gb:.2f} GB (peak {ext['dup_lookup_peak_bytes'] / gb:.2f})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "benchmarks/bench_minhash_memory.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "memory_gib": psutil.virtual_memory().total / 2**30,
                    "python": platform.python_version(), "pyarrow": pa.__version__,
                    "arrow_pool": pa.default_memory_pool().backend_name, "numpy": np.__version__},
        "args": {k: str(v) for k, v in vars(args).items()},
        "sizes": results, "per_unit": units, "extrapolation": ext,
    }, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
