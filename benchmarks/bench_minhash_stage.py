"""The MinHash stage per row against its signature kernel per row, before and after (issue 34 §4).

    .venv/bin/python benchmarks/bench_minhash_stage.py                        # 300k rows, in process + Ray
    .venv/bin/python benchmarks/bench_minhash_stage.py --rows 3000000 --repeat 3
    .venv/bin/python benchmarks/bench_minhash_stage.py --rows 50000 --repeat 1 --no-ray   # smoke run
    .venv/bin/python benchmarks/bench_minhash_stage.py --staged DIR --before REV --repeat 2   # the runner's step

`--staged DIR` runs the stage the way the runner runs a global step (`run_global` on the lake's partitions of
DIR's Parquet files, then `write_dataset` of kept and rejected rows, uncompressed kept rows as in `staged/`) on
a folder of real rows, e.g. the exact-dedup step's kept rows of a `bench_scale.py --rows 3000000` run
(lake/bench/staged/ko-piqa/<run>/04_exact_dedup); before and after interleaved, CPU-seconds of the driver and
every Ray process per row, and the rows written compared (same ids kept, same `duplicate_of` for every row).

"Before" is the stage as it was at `--before` (a git revision): its four modules are read with
`git show` into a temporary package and imported beside the current ones, so both run in one
process on the same rows, interleaved (each round runs every method once; best of `--repeat`).
Rates are CPU-seconds of this process (in process) or of the driver and every Ray process (the Ray
path), per row. The kernel line is the signatures alone (raw Arrow text to `uint32[n, 128]`, numba
when the `fast` extra is installed); the stage lines are everything the stage does: band keys,
the shuffle, bucket edges, verification, clustering and marking. Both versions' duplicate maps
are compared; the script exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_minhash import RssSampler, interleaved, machine  # noqa: E402
from benchmarks.common import build_crawl  # noqa: E402
from transforms.core import columns as C  # noqa: E402
from transforms.dedup import minhash as after  # noqa: E402

MODULES = ("minhash", "minhash_cluster", "minhash_signature", "minhash_numba", "minhash_tasks")
BEFORE_PACKAGE = "_piqaforge_minhash_before"
# The last commit before the issue-34 changes to the stage (lsh_params cached, numba shared-key
# search, one id gather per map task, hashed duplicate lookup).
DEFAULT_BEFORE = "85ae4f537abdb47b85a2a36c89123693114ee691"


def import_before(rev: str, into: Path) -> ModuleType:
    """The stage's modules at git revision `rev`, importable as `_piqaforge_minhash_before.minhash`."""
    pkg = into / BEFORE_PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for name in MODULES:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:transforms/dedup/{name}.py"],
                               capture_output=True, text=True)
        if shown.returncode and name == "minhash_tasks":  # split out of minhash.py after `rev`
            continue
        shown.check_returncode()
        src = shown.stdout
        for other in MODULES:  # its own siblings, not the current ones
            src = src.replace(f"transforms.dedup.{other} ", f"{BEFORE_PACKAGE}.{other} ")
            src = src.replace(f"transforms.dedup.{other}\n", f"{BEFORE_PACKAGE}.{other}\n")
        src = src.replace("from transforms.dedup import minhash_numba", f"from {BEFORE_PACKAGE} import minhash_numba")
        (pkg / f"{name}.py").write_text(src)
    sys.path.insert(0, str(into))
    # Ray workers import the pickled stage's class by module name: they need the folder too.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(into), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return importlib.import_module(f"{BEFORE_PACKAGE}.minhash")


def duplicate_map(table: pa.Table) -> dict[str, str]:
    table = table.filter(table.column(C.DUPLICATE_OF).is_valid())
    return dict(zip(table.column(C.ID).to_pylist(), table.column(C.DUPLICATE_OF).to_pylist(), strict=True))


def in_process(table: pa.Table, stages: dict[str, Any], repeat: int) -> tuple[dict[str, tuple[float, float]], bool]:
    texts = table.column(C.TEXT)
    for stage in stages.values():  # JIT and datasketch's integration outside the timing
        stage.process_table(table.slice(0, 200))
    fns = {"kernel": lambda: stages["after"].signatures(texts)}
    fns.update({f"stage {name}": (lambda s=stage: s.process_table(table)) for name, stage in stages.items()})
    best = interleaved(fns, repeat)
    maps = [duplicate_map(stage.process_table(table)) for stage in stages.values()]
    return best, all(m == maps[0] for m in maps)


def on_ray(path: Path, stages: dict[str, Any], num_cpus: int, repeat: int) -> tuple[dict[str, float], bool]:
    """CPU-seconds of driver + Ray processes for the stage on a Parquet-backed dataset, best of `repeat`."""
    import ray

    from transforms.core.execution import init_ray

    init_ray(None, num_cpus)
    ray.data.DataContext.get_current().enable_progress_bars = False
    best: dict[str, float] = {}
    maps: list[dict[str, str]] = []
    from transforms.core.planning import plan_partitions, read_partitions

    for stage in stages.values():  # worker start-up and each worker's numba JIT outside the timing
        ray.get(stage.run_dataset(ray.data.read_parquet(str(path)).limit(20_000)).to_arrow_refs())
    # the runner's path: the lake's partitions, which the map and signature tasks read themselves (run_partitions)
    parts = plan_partitions([path], 100_000)
    runs = {name: (lambda st=stage: st.run_dataset(ray.data.read_parquet(str(path)))) for name, stage in stages.items()}
    runs["after, lake partitions"] = lambda: stages["after"].run_partitions(read_partitions(parts, tracked=False), parts)
    for r in range(repeat):
        for name, run in runs.items():
            with RssSampler() as rss:
                ds = run()
                got = pa.concat_tables(ray.get(ds.select_columns([C.ID, C.DUPLICATE_OF]).to_arrow_refs()))
            best[name] = min(best.get(name, float("inf")), rss.cpu_seconds)
            if r == 0:
                maps.append(duplicate_map(got))
    ray.shutdown()
    return best, all(m == maps[0] for m in maps)


def runner_step(stage: Any, files: list[Path], out: Path) -> tuple[float, float, int]:
    """(CPU-seconds of the driver and every Ray process, wall seconds, processes started meanwhile: Ray workers
    each pay for their imports) of the runner's global step on `files`."""
    import shutil

    import psutil

    from transforms.core.cpu_time import StageClock
    from transforms.core.execution import run_global
    from transforms.core.ledger import PartitionLedger
    from transforms.core.planning import MAX_ROW_GROUP_ROWS, plan_partitions, read_partitions
    from transforms.core.runner import STAGED
    from transforms.core.writing import write_dataset

    shutil.rmtree(out, ignore_errors=True)
    parts = plan_partitions(files, 100_000)
    ledger = PartitionLedger(out / "kept", out / "rejected", "bench", "global", False)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    started = set(before)
    w0 = time.perf_counter()
    with StageClock() as clock:
        write_dataset(run_global(stage, read_partitions(parts, tracked=False), parts), ledger,
                      {0: sum(p.rows for p in parts)}, MAX_ROW_GROUP_ROWS, stage.name, STAGED)
        started |= {p.pid for p in psutil.Process().children(recursive=True)}
    return clock.seconds, time.perf_counter() - w0, len(started - before)


def written(out: Path) -> tuple[list[str], dict[str, str]]:
    """The kept ids (sorted) and `id -> duplicate_of` of the rejected rows a runner step wrote."""
    kept = pq.read_table(out / "kept", columns=[C.ID]).column(C.ID).to_pylist()
    rejected = pq.read_table(out / "rejected", columns=[C.ID, C.DUPLICATE_OF])
    return sorted(kept), duplicate_map(rejected)


def on_staged(folder: Path, stages: dict[str, Any], num_cpus: int, repeat: int) -> int:
    import ray

    from transforms.core.execution import init_ray

    files = sorted(folder.glob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    init_ray(None, num_cpus)
    ray.data.DataContext.get_current().enable_progress_bars = False
    work = Path(tempfile.mkdtemp(prefix="piqaforge-mh-step-"))
    print(f"{machine()}\n{rows:,} rows in {len(files)} files of {folder}; load average before "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    best: dict[str, tuple[float, float]] = {}
    outputs: dict[str, tuple[list[str], dict[str, str]]] = {}
    for r in range(repeat + 1):  # round 0 warms the workers (imports, numba's cache) and is not counted
        for name, stage in stages.items():
            cpu, wall, spawned = runner_step(stage, files, work / name)
            print(f"round {r} {name:<8} {cpu:7.1f} CPU-s {wall:6.1f} s  {cpu / rows * 1e6:6.2f} CPU-µs a row; "
                  f"{spawned} processes started", flush=True)
            if r:
                old = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(old[0], cpu), min(old[1], wall))
            else:
                outputs[name] = written(work / name)
    ray.shutdown()
    same = all(o == outputs["before"] for o in outputs.values())
    print(f"\n== the runner's step on {rows:,} rows, best of {repeat} (after a warm-up round) ==")
    print(f"{'':<10}{'CPU-s':>8}{'wall s':>8}{'CPU-µs a row':>14}")
    for name, (cpu, wall) in best.items():
        print(f"{name:<10}{cpu:>8.1f}{wall:>8.1f}{cpu / rows * 1e6:>14.2f}")
    print(f"after / before CPU: {best['after'][0] / best['before'][0]:.2f}; kept {len(outputs['after'][0]):,}, "
          f"dropped {len(outputs['after'][1]):,}; same rows kept and same duplicate_of: {same}")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=300_000, help="rows in the synthetic crawl")
    p.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of the previous stage")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (best of)")
    p.add_argument("--no-ray", action="store_true", help="only the in-process path")
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--staged", type=Path, help="a folder of Parquet rows with id and text: run the runner's step on it")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="piqaforge-mh-stage-"))
    before = import_before(args.before, work)
    if args.staged:
        return on_staged(args.staged, {"before": before.MinHashDedup(), "after": after.MinHashDedup()},
                         args.num_cpus, args.repeat)
    crawl = build_crawl(args.rows)
    table = crawl.table.select([C.ID, C.TEXT])
    n = table.num_rows
    config = {"local_max_rows": 0}
    stages = {"before": before.MinHashDedup(**config), "after": after.MinHashDedup(**config)}
    print(f"{machine()}\nsynthetic crawl {n:,} rows; before = {args.before[:12]}, after = working tree; "
          f"{stages['after'].lsh_bands()[0]}x{stages['after'].lsh_bands()[1]} bands, verify on")

    best, same = in_process(table, stages, args.repeat)
    kernel = best["kernel"][0] / n * 1e6
    print(f"\n== in process (process_table), best of {args.repeat}, CPU µs per row ==")
    print(f"{'':<10}{'stage':>10}{'kernel':>10}{'stage/kernel':>14}{'outside kernel':>16}")
    for name in stages:
        us = best[f"stage {name}"][0] / n * 1e6
        print(f"{name:<10}{us:>10.2f}{kernel:>10.2f}{us / kernel:>13.1f}x{us - kernel:>16.2f}")
    speedup = best["stage before"][0] / best["stage after"][0]
    print(f"after is {speedup:.2f}x faster per row; same duplicate_of for every row: {same}")
    if args.no_ray:
        return 0 if same else 1

    path = work / "crawl.parquet"
    pq.write_table(table, path, row_group_size=65_536)
    w0 = time.perf_counter()
    cpu, same_ray = on_ray(path, stages, args.num_cpus, args.repeat)
    print(f"\n== on Ray ({args.num_cpus} CPUs, run_dataset on Parquet, distributed path), best of {args.repeat}, "
          f"CPU µs per row over driver + Ray processes ({time.perf_counter() - w0:.0f}s wall in all) ==")
    print(f"{'':<24}{'stage':>10}{'kernel':>10}{'stage/kernel':>14}{'outside kernel':>16}")
    for name in cpu:
        us = cpu[name] / n * 1e6
        print(f"{name:<24}{us:>10.2f}{kernel:>10.2f}{us / kernel:>13.1f}x{us - kernel:>16.2f}")
    print(f"after is {cpu['before'] / cpu['after']:.2f}x faster per row, {cpu['before'] / cpu['after, lake partitions']:.2f}x "
          f"on the lake's partitions; same duplicate_of for every row: {same_ray}")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if same and same_ray else 1


if __name__ == "__main__":
    raise SystemExit(main())
