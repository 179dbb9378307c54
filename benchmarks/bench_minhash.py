"""MinHash LSH near-duplicate benchmark: signature speed vs datasketch and rensa, precision/recall, Ray run.

    .venv/bin/python benchmarks/bench_minhash.py                      # 100k rows, a few minutes
    .venv/bin/python benchmarks/bench_minhash.py --rows 1000000 --sweep 0.7
    .venv/bin/python benchmarks/bench_minhash.py --speed-only           # the speed table alone (~1 min)

Speed is measured in one process (one core: numpy, numba, datasketch and rensa here are
single-threaded, and rensa is pinned with RAYON_NUM_THREADS=1) on the same texts, the same character
5-gram shingles and the same number of permutations. Every method runs once per round and the
rounds are interleaved (best of `--repeat`), so load from other processes hits all of them alike.
Rates are rows per CPU-second (process time), which is what "per core" means and is robust to
other processes sharing the machine; wall rates are printed beside them, with the CPU model and the
load average. Baselines get their shingles pre-built (Python lists of str / bytes, as their APIs
take, or our shingle hashes for rensa's flat-hash API); ours starts from the raw Arrow text column,
shingling included.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # rensa per core; must be set before rensa loads

import argparse
import contextlib
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import build_crawl, score_clusters  # noqa: E402
from transforms.dedup.minhash import MinHashDedup  # noqa: E402
from transforms.dedup.minhash_signature import minhash_signatures, permutations, shingle_hashes  # noqa: E402


def machine() -> str:
    """The CPU model (`lscpu`'s "Model name"), LLVM's name for it, cores and the load average now."""
    model = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    llvm = "?"
    with contextlib.suppress(ImportError):
        import llvmlite.binding as llvm_binding

        llvm = llvm_binding.get_host_cpu_name()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"CPU {model!r} (LLVM: {llvm}), {os.cpu_count()} cores, load average {load}"


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[float, float]]:
    """Best (cpu seconds, wall seconds) of `repeat` rounds; each round runs every function once, in
    turn, so a burst of load from other processes hits all of them rather than one."""
    best = {name: (float("inf"), float("inf")) for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            best[name] = (min(best[name][0], cpu), min(best[name][1], wall))
    return best


def shingle_lists(texts: list[str], n: int) -> list[list[str]]:
    return [[t[i:i + n] for i in range(len(t) - n + 1)] if len(t) >= n else [t] for t in texts]


def bench_signatures(texts: list[str], baseline_rows: int, num_perm: int, ngram: int,
                     repeat: int = 5) -> list[dict[str, Any]]:
    import rensa
    from datasketch import MinHash

    from transforms.dedup.minhash_numba import signatures_numba

    arrow = pa.array(texts, pa.string())
    small = texts[:baseline_rows]
    sh = shingle_lists(texts, ngram)
    sh_small = sh[:baseline_rows]
    sh_bytes = [[s.encode("utf-8") for s in doc] for doc in sh_small]
    hashes, counts = shingle_hashes(arrow, ngram)
    offsets = np.zeros(len(counts) + 1, np.uint64)
    np.cumsum(counts, out=offsets[1:])
    hashes64 = hashes.astype(np.uint64)
    a, b = permutations(num_perm, 42)
    minhash_signatures(arrow[:10], num_perm=num_perm, ngram=ngram, backend="numba")  # JIT outside the timing
    signatures_numba(hashes[:10], np.array([10]), a, b)

    def datasketch_per_doc() -> None:
        for doc in sh_bytes:
            m = MinHash(num_perm=num_perm, seed=1)
            m.update_batch(doc)
            m.digest()

    def rensa_per_doc() -> None:
        for doc in sh:
            m = rensa.RMinHash(num_perm, 1)
            m.update(doc)
            m.digest()

    fns: dict[str, Callable[[], Any]] = {
        "piqaforge numba (raw text -> signature)":
            lambda: minhash_signatures(arrow, num_perm=num_perm, ngram=ngram, backend="numba"),
        "piqaforge numpy (raw text -> signature)":
            lambda: minhash_signatures(arrow, num_perm=num_perm, ngram=ngram, backend="numpy"),
        "piqaforge shingle hashing only (numpy)": lambda: shingle_hashes(arrow, ngram),
        "piqaforge numba on pre-hashed shingles": lambda: signatures_numba(hashes, counts, a, b),
        "rensa digest_matrix_from_token_sets (bulk)":
            lambda: rensa.RMinHash.digest_matrix_from_token_sets(sh, num_perm, 1),
        "rensa digest_matrix_from_flat_token_hashes":
            lambda: rensa.RMinHash.digest_matrix_from_flat_token_hashes(hashes64, offsets, num_perm, 1),
        "rensa RMinHash.update per doc": rensa_per_doc,
        "python shingling only (baselines' input)": lambda: shingle_lists(texts, ngram),
    }
    best = interleaved(fns, repeat)
    best["datasketch MinHash.update_batch per doc"] = interleaved({"d": datasketch_per_doc}, 1)["d"]
    rows = []
    for name, (cpu, wall) in best.items():
        n = len(small) if "datasketch" in name else len(texts)
        rows.append({"method": name, "rows": n, "rows_per_cpu_s": n / cpu, "rows_per_wall_s": n / wall})
    return rows


class RssSampler:
    """Peak resident memory and CPU time of this process and all its children (the Ray instance), sampled.

    CPU seconds are robust to other processes sharing the machine, which wall time is not:
    `cpu_seconds / cores` is what the wall time would be on an otherwise idle machine.
    """

    def __init__(self, every: float = 0.5):
        import psutil

        self.proc, self.every, self.peak_total, self.peak_self = psutil.Process(), every, 0, 0
        self._cpu: dict[int, float] = {}
        self._cpu_start = self._cpu_now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cpu_now(self) -> dict[int, float]:
        from benchmarks.common import tree_cpu_seconds

        return tree_cpu_seconds(self.proc)

    @property
    def cpu_seconds(self) -> float:
        return sum(v - self._cpu_start.get(pid, 0.0) for pid, v in self._cpu.items())

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                me = self.proc.memory_info().rss
                kids = 0
                for child in self.proc.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        kids += child.memory_info().rss
                for pid, cpu in self._cpu_now().items():
                    self._cpu[pid] = max(cpu, self._cpu.get(pid, 0.0))
                self.peak_self = max(self.peak_self, me)
                self.peak_total = max(self.peak_total, me + kids)
            except psutil.Error:
                pass
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for pid, cpu in self._cpu_now().items():
            self._cpu[pid] = max(cpu, self._cpu.get(pid, 0.0))


def as_map(table: pa.Table) -> dict[str, str]:
    return dict(zip(table.column("id").to_pylist(), table.column("duplicate_of").to_pylist(), strict=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000, help="rows in the synthetic crawl")
    p.add_argument("--speed-rows", type=int, default=50_000, help="rows for the signature speed test")
    p.add_argument("--baseline-rows", type=int, default=3_000, help="rows for datasketch (slow)")
    p.add_argument("--num-perm", type=int, default=128)
    p.add_argument("--ngram", type=int, default=5)
    p.add_argument("--sweep", default="0.6,0.7,0.8", help="thresholds for the precision/recall table")
    p.add_argument("--no-ray", action="store_true", help="skip the distributed run")
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5, help="interleaved rounds of the speed table (best of)")
    p.add_argument("--speed-only", action="store_true", help="only the signature speed table")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    crawl = build_crawl(args.rows)
    texts = crawl.texts()
    lengths = np.array([len(t) for t in texts])
    print(f"synthetic crawl: {crawl.num_rows:,} rows in {time.perf_counter() - t0:.1f}s; text length mean "
          f"{lengths.mean():.0f}, p50 {np.median(lengths):.0f}, p90 {np.percentile(lengths, 90):.0f} chars; "
          f"injected {sum(k != 'original' for k in crawl.table.column('kind').to_pylist()):,}")

    print(f"\n== signatures: {args.num_perm} permutations, character {args.ngram}-grams, one core ==")
    print(f"   {machine()}")
    speed = bench_signatures(texts[: args.speed_rows], args.baseline_rows, args.num_perm, args.ngram, args.repeat)
    by = {r["method"]: r["rows_per_cpu_s"] for r in speed}
    ours_nb, ours_np = by["piqaforge numba (raw text -> signature)"], by["piqaforge numpy (raw text -> signature)"]
    print(f"   best of {args.repeat} interleaved rounds; rates per CPU-second (process time) and per wall-second")
    print(f"{'method':<46}{'rows':>9}{'rows/cpu-s':>13}{'rows/wall-s':>13}{'numba/it':>10}{'numpy/it':>10}")
    for r in speed:
        print(f"{r['method']:<46}{r['rows']:>9,}{r['rows_per_cpu_s']:>13,.0f}{r['rows_per_wall_s']:>13,.0f}"
              f"{ours_nb / r['rows_per_cpu_s']:>9.2f}x{ours_np / r['rows_per_cpu_s']:>9.2f}x")
    shingling = by["python shingling only (baselines' input)"]
    for name in ("rensa digest_matrix_from_token_sets (bulk)", "rensa RMinHash.update per doc",
                 "datasketch MinHash.update_batch per doc"):
        with_sh = 1 / (1 / by[name] + 1 / shingling)
        print(f"  {name} incl. python shingling: {with_sh:,.0f} rows/cpu-s -> ours numba "
              f"{ours_nb / with_sh:.1f}x, numpy {ours_np / with_sh:.1f}x")
    print(f"   load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    if args.speed_only:
        return 0
    print(f"\n== near-duplicates, {crawl.num_rows:,} rows, in-process path (process_table) ==")
    print(f"{'threshold':>9} {'fn_w':>5} {'b x r':>7} {'verify':>6} {'dropped':>8} {'precision':>9} {'prec(J)':>8} "
          f"{'recall':>7} {'rec(J>=t)':>9} {'rec near':>8} {'rec exact':>9} {'rows/s':>9}")
    for threshold in [float(x) for x in args.sweep.split(",") if x]:
        for fnw, verify in ((0.5, True), (0.9, True), (0.9, False)):
            stage = MinHashDedup(threshold=threshold, false_negative_weight=fnw, verify=verify,
                                 num_perm=args.num_perm, ngram=args.ngram)
            w0 = time.perf_counter()
            found = as_map(stage.find_duplicates(crawl.table))
            secs = time.perf_counter() - w0
            s = score_clusters(crawl, found, threshold, args.ngram)
            b, r = stage.lsh_bands()
            print(f"{threshold:>9.2f} {fnw:>5.1f} {f'{b}x{r}':>7} {str(verify):>6} {s['dropped']:>8,} "
                  f"{s['precision']:>9.4f} {s['precision_jaccard']:>8.4f} {s['recall']:>7.4f} "
                  f"{s['recall_above_threshold']:>9.4f} {s['recall_near']:>8.4f} {s['recall_exact']:>9.4f} "
                  f"{crawl.num_rows / secs:>9,.0f}")
    print("  precision: dropped rows whose kept row is in the same injected family; prec(J): also counting "
          "drops whose exact Jaccard >= threshold\n  recall: injected (copy, original) pairs in one cluster; "
          "rec(J>=t): only pairs whose exact Jaccard >= threshold")

    if args.no_ray:
        return 0
    import ray

    from transforms.core.runner import init_ray

    stage = MinHashDedup(num_perm=args.num_perm, ngram=args.ngram, local_max_rows=0)
    expected = as_map(stage.find_duplicates(crawl.table))
    init_ray(num_cpus=args.num_cpus)
    ray.data.DataContext.get_current().enable_progress_bars = False
    blocks = max(4, crawl.num_rows // 50_000)
    ds = ray.data.from_arrow(crawl.table.select(["id", "text", "source"])).repartition(blocks).materialize()
    tracemalloc.start()
    with RssSampler() as rss:
        w0 = time.perf_counter()
        refs = stage.run_dataset(ds).select_columns(["id", "duplicate_of"]).to_arrow_refs()
        secs = time.perf_counter() - w0
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    got = pa.concat_tables(ray.get(refs))
    got = got.filter(got.column("duplicate_of").is_valid())
    same = as_map(got) == expected
    print(f"\n== Ray Data path: {crawl.num_rows:,} rows, {blocks} blocks, {args.num_cpus} CPUs ==")
    print(f"  stage (threshold {stage.threshold}, {stage.lsh_bands()[0]}x{stage.lsh_bands()[1]} bands): "
          f"{secs:.1f}s = {crawl.num_rows / secs:,.0f} rows/s wall; {got.num_rows:,} rows marked near_duplicate")
    print(f"  CPU: {rss.cpu_seconds:.1f} s over driver + Ray processes = {crawl.num_rows / rss.cpu_seconds:,.0f} "
          f"rows per CPU-second (wall {secs:.1f}s; machine load {os.getloadavg()[0]:.1f})")
    print(f"  same duplicate map as process_table: {same}")
    print(f"  driver: python allocations peak {traced_peak / 2**20:.1f} MiB (tracemalloc), RSS peak "
          f"{rss.peak_self / 2**20:.0f} MiB; driver + Ray workers RSS peak {rss.peak_total / 2**20:.0f} MiB; "
          f"ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    ray.shutdown()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
