"""Scale benchmark: N synthetic crawl rows through the ko-piqa front half on this machine.

    .venv/bin/python benchmarks/bench_scale.py --rows 3000000            # the figure in docs/cluster.md
    .venv/bin/python benchmarks/bench_scale.py --rows 200000 --num-cpus 2  # a quick check

The crawl is built once (benchmarks/common.build_crawl: real Korean questions, 10% near-duplicates,
3% exact copies) by a *separate* process and cached as JSONL under lake/bench/, so this process
(the driver) never holds the data. The run is the job's own `run_stages` with the front half
(normalize → length → langid → exact dedup → MinHash), i.e. the stages up to MinHash even when
later stages are added to the job. A sampler thread records, every second, the resident memory
(RSS) of the driver and the proportional set size (PSS: shared object-store pages counted once)
of the driver plus every process it started (raylet, GCS, object store, Ray workers). Spilled
bytes come from Ray's memory summary at the end. Results are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class MemorySampler:
    """Peak RSS of this process, and peak PSS / RSS summed over it and all its descendants; and the
    CPU seconds (user + system) those processes used, as a timeline, so each stage's share can be
    read off (a process that lives less than one period is missed: CPU figures are lower bounds)."""

    def __init__(self, every: float = 1.0):
        import psutil

        self.proc, self.every = psutil.Process(), every
        self.peak: dict[str, float] = {"driver_rss": 0, "total_pss": 0, "total_rss": 0, "largest_worker_rss": 0}
        self._cpu: dict[int, float] = {}
        self._cpu_start = {p: c for p, c in self._cpu_times().items()}
        self.timeline: list[tuple[float, float]] = []  # (perf_counter, CPU seconds so far)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cpu_times(self) -> dict[int, float]:
        from benchmarks.common import tree_cpu_seconds

        return tree_cpu_seconds(self.proc)

    def cpu_seconds(self) -> float:
        return sum(v - self._cpu_start.get(pid, 0.0) for pid, v in self._cpu.items())

    def cpu_at(self, when: float) -> float:
        """CPU seconds used up to `when` (perf_counter), from the nearest earlier sample."""
        before = [c for t, c in self.timeline if t <= when]
        return before[-1] if before else 0.0

    def sample(self) -> dict[str, float]:
        import psutil

        driver = self.proc.memory_info().rss
        pss = rss = 0
        largest = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                info = p.memory_full_info()  # smaps_rollup: pss is cheap to read on Linux
                pss += getattr(info, "pss", info.rss)
                rss += info.rss
                if p.pid != self.proc.pid:
                    largest = max(largest, info.rss)
        return {"driver_rss": driver, "total_pss": pss, "total_rss": rss, "largest_worker_rss": largest}

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                for key, value in self.sample().items():
                    self.peak[key] = max(self.peak[key], value)
                for pid, cpu in self._cpu_times().items():
                    self._cpu[pid] = max(cpu, self._cpu.get(pid, 0.0))
                self.timeline.append((time.perf_counter(), self.cpu_seconds()))
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def start_ray(num_cpus: int | None) -> float:
    """Start local Ray (the job's init_ray then finds it running); returns the seconds it took.
    init_ray itself tries a start again when the raylet registers late on a loaded machine."""
    from transforms.core.runner import init_ray

    t0 = time.perf_counter()
    init_ray(None, num_cpus)
    return time.perf_counter() - t0


def machine() -> str:
    """`lscpu`'s model name and the core count."""
    model = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    return f"{model}, {os.cpu_count()} cores"


def git_head() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    return "?"


def print_summary(results: dict[str, Any]) -> None:
    print(f"\n{results['machine']}; load average before {results['load_average_before']}, after "
          f"{results['load_average_after']}; commit {results['commit']}; {results['command']}")
    print(f"{'stage':<16}{'in':>11}{'kept':>11}{'seconds':>9}{'rows/s':>10}{'CPU-s':>8}")
    for s in results["stages"]:
        rate = f"{s['rows_per_s']:,}" if s["rows_per_s"] else "-"
        print(f"{s['name']:<16}{s['rows_in']:>11,}{s['kept']:>11,}{s['seconds']:>9.1f}{rate:>10}{s['cpu_s']:>8.1f}")
    print(f"total: {results['rows']:,} rows in {results['wall_s']} s wall (Ray start-up before it: "
          f"{results['ray_start_s']} s) = {results['rows_per_s']:,} rows/s; "
          f"{results['cpu_s']} CPU-s over the driver and every Ray process = {results['rows_per_cpu_s']:,} rows/CPU-s; "
          f"peak PSS {results['all_processes_peak_pss_gib']} GiB, driver RSS {results['driver_peak_rss_gib']} GiB")


def build_crawl_file(rows: int, path: Path, seed: int) -> None:
    """Runs in its own process (see main): writes the synthetic crawl as JSONL, 100k rows at a time."""
    import polars as pl

    from benchmarks.common import build_crawl

    crawl = build_crawl(rows, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for start in range(0, rows, 100_000):
            df = pl.from_arrow(crawl.table.slice(start, 100_000))
            assert isinstance(df, pl.DataFrame)
            df.write_ndjson(f)
    tmp.replace(path)


def spilled_mib() -> dict[str, float]:
    import ray
    from ray._private.internal_api import memory_summary

    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    out = {}
    for key, pattern in (("spilled_mib", r"Spilled (\d+) MiB"), ("restored_mib", r"Restored (\d+) MiB")):
        m = re.search(pattern, text)
        out[key] = float(m.group(1)) if m else 0.0
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from jobs.config import parse_set
    from transforms.core.lake import Lake
    from transforms.core.runner import run_pipeline
    from transforms.dedup.minhash import MinHashDedup
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    overrides: dict[str, Any] = {
        "num_cpus": args.num_cpus, "input.paths": [str(args.crawl)], "input.format": "jsonl",
        "input.columns": {"id": "id", "text": "text", "source": "source"},
    }
    overrides.update(dict(parse_set(item) for item in args.sets))
    recipe = load_recipe("ko-piqa", overrides)  # the recipe's crawl run, cut after its MinHash stage
    run_id = f"scale-{args.rows}-{time.strftime('%Y%m%dT%H%M%S')}"
    source, chain = run_stages(recipe, "crawl", lake=args.lake, run_id=run_id)
    cut = next(i for i, s in enumerate(chain) if isinstance(s, MinHashDedup))
    front = chain[: cut + 1]
    load_before = os.getloadavg()
    with MemorySampler(args.sample_every) as mem:
        ray_start = start_ray(args.num_cpus)
        started = time.perf_counter()
        run_pipeline(job="ko-piqa:crawl", dataset="ko-piqa", source=source, stages=front, lake=Lake(args.lake),
                     config={}, run_id=run_id)
        result = {"manifest": str(Lake(args.lake).manifest_path(run_id))}
        wall = time.perf_counter() - started
        spill = spilled_mib()
    from transforms.core.manifest import RunManifest
    from transforms.core.runner import conservation_errors

    manifest = RunManifest.load(Path(result["manifest"]))
    gib = 2**30
    # Stages run one after another; each one's CPU is read off the sampler's timeline between the
    # end of the previous stage and its own end (stage seconds from the manifest; the time between
    # stages, a few seconds, goes to the next stage).
    per_stage, end = [], started + wall - sum(s.seconds for s in manifest.stages)
    for s in manifest.stages:
        begin, end = end, end + s.seconds
        cpu = mem.cpu_at(end) - mem.cpu_at(begin)
        per_stage.append({"name": s.name, "rows_in": s.rows_in, "kept": s.rows_kept, "dropped": s.rows_dropped,
                       "seconds": s.seconds, "rows_per_s": round(s.rows_in / s.seconds) if s.seconds else None,
                       "cpu_s": round(cpu, 1), "partitions": s.partitions})
    return {
        "rows": args.rows, "run_id": run_id, "num_cpus": args.num_cpus or os.cpu_count(),
        "machine": machine(), "load_average_before": [round(x, 1) for x in load_before],
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
        "command": " ".join([".venv/bin/python", "benchmarks/bench_scale.py", *sys.argv[1:]]),
        "commit": git_head(),
        "partition_rows": int(os.environ.get("PIQAFORGE_PARTITION_ROWS", 100_000)),
        "ray_start_s": round(ray_start, 1), "wall_s": round(wall, 1), "rows_per_s": round(args.rows / wall),
        "cpu_s": round(mem.cpu_seconds(), 1), "rows_per_cpu_s": round(args.rows / max(mem.cpu_seconds(), 1e-9)),
        "driver_peak_rss_gib": round(mem.peak["driver_rss"] / gib, 3),
        "all_processes_peak_pss_gib": round(mem.peak["total_pss"] / gib, 3),
        "all_processes_peak_rss_sum_gib": round(mem.peak["total_rss"] / gib, 3),
        "largest_worker_peak_rss_gib": round(mem.peak["largest_worker_rss"] / gib, 3),
        **spill,
        "stages": per_stage,
        "conservation_errors": conservation_errors(manifest),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--crawl", type=Path, help="cached crawl JSONL (default lake/bench/crawl-<rows>.jsonl)")
    parser.add_argument("--lake", type=Path, default=ROOT / "lake" / "bench")
    parser.add_argument("--num-cpus", type=int, default=None, help="local Ray CPUs (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-every", type=float, default=1.0, help="memory sampling period, seconds")
    parser.add_argument("--out", type=Path, help="JSON results (default benchmarks/results/scale-<rows>.json)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a job config override, as `piqaforge run --set` (repeatable), e.g. "
                             "'langid.script_shortcut={}' to measure without the job's script shortcut")
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.crawl = args.crawl or args.lake / f"crawl-{args.rows}.jsonl"
    if args.build_only:
        build_crawl_file(args.rows, args.crawl, args.seed)
        return 0
    if not args.crawl.exists():
        started = time.perf_counter()
        print(f"building {args.rows:,} synthetic rows -> {args.crawl} (separate process)", flush=True)
        subprocess.run([sys.executable, __file__, "--build-only", "--rows", str(args.rows), "--crawl",
                        str(args.crawl), "--seed", str(args.seed)], check=True)
        print(f"built in {time.perf_counter() - started:.0f}s, {args.crawl.stat().st_size / 2**20:.0f} MiB", flush=True)
    os.environ.setdefault("PIQAFORGE_PROGRESS", "0")
    results = run(args)
    results["crawl_mib"] = round(args.crawl.stat().st_size / 2**20)
    out = args.out or ROOT / "benchmarks" / "results" / f"scale-{args.rows}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print_summary(results)
    return 0 if not results["conservation_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
