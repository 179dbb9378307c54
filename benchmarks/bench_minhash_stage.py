"""The MinHash stage per row against its signature kernel per row, before and after (issue 34 §4).

    .venv/bin/python benchmarks/bench_minhash_stage.py                        # 300k rows, in process + Ray
    .venv/bin/python benchmarks/bench_minhash_stage.py --rows 3000000 --repeat 3
    .venv/bin/python benchmarks/bench_minhash_stage.py --rows 50000 --repeat 1 --no-ray   # smoke run

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=300_000, help="rows in the synthetic crawl")
    p.add_argument("--before", default=DEFAULT_BEFORE, help="git revision of the previous stage")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (best of)")
    p.add_argument("--no-ray", action="store_true", help="only the in-process path")
    p.add_argument("--num-cpus", type=int, default=2)
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="piqaforge-mh-stage-"))
    before = import_before(args.before, work)
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
