"""One-off: wrap a results file of the older layout, written by its benchmark, into transforms/core/results.py's
format, its data kept verbatim.

Only files a benchmark wrote are converted (the figures are read out of its data by the code below, never typed):

    python benchmarks/convert_legacy_results.py minhash-memory

The older layout recorded neither the commit nor the date: `commit` is "unknown" and `date` is when git first
saw the file (`converted_from` says so). Re-running the benchmark replaces the file with a first-hand one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transforms.core.results import FORMAT, RESULTS, figure  # noqa: E402


def _minhash_memory(old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """bench_minhash_memory.py's per-unit costs at its largest size and its 100M-row extrapolation."""
    largest, unit = old["sizes"][-1], old["per_unit"][-1]
    at = f"{largest['crawl_rows']:,} synthetic crawl rows"
    ext = old["extrapolation"]
    return {
        "largest_crawl_rows": figure(largest["crawl_rows"], "rows", "the largest crawl the per-unit costs come from"),
        "band_row_bytes": figure(unit["band_row_nbytes"], "B", f"bytes of one band row ({at})"),
        "reducer_peak_bytes_per_band_row": figure(round(unit["reducer_peak_per_band_row"], 1), "B",
                                                  f"a reducer's peak memory per band row it holds ({at})"),
        "map_peak_bytes_per_block_row": figure(round(unit["map_peak_per_block_row"], 1), "B",
                                               f"a map task's peak memory per row of its block ({at})"),
        "cluster_bytes_per_dropped": figure(round(unit["cluster_total_per_dropped"]), "B",
                                            f"the cluster task's memory per dropped row ({at})"),
        "map_task_gb_at_100m": figure(round(ext["map_task_bytes"] / 1e9, 3), "GB",
                                      "one map task's memory, extrapolated to 100M rows"),
        "reducer_gb_at_100m_256": figure(round(ext["reducer_bytes"]["256"] / 1e9, 2), "GB",
                                         "one reducer's memory with 256 partitions, extrapolated to 100M rows"),
        "cluster_task_gb_at_100m": figure(round(ext["cluster_task_bytes"] / 1e9, 1), "GB",
                                          "the cluster task's memory, extrapolated to 100M rows"),
        "band_rows_gb_at_100m": figure(round(ext["band_rows_bytes"] / 1e9, 1), "GB",
                                       "the band rows shuffled, extrapolated to 100M rows"),
        "candidate_rows_gb_at_100m": figure(round(ext["candidate_rows_bytes"] / 1e9, 1), "GB",
                                            "the candidate rows the cluster task maps, extrapolated to 100M rows"),
        "candidates_task_gb_at_100m": figure(round(ext["candidates_task_bytes"] / 1e9, 1), "GB",
                                             "the candidates task's memory, extrapolated to 100M rows"),
        "dup_lookup_gb_at_100m": figure(round(ext["dup_lookup_bytes"] / 1e9, 2), "GB",
                                        "each marking worker's duplicate lookup, extrapolated to 100M rows"),
        "dropped_per_row": figure(round(unit["dropped_per_row"], 3), "",
                                  f"near-duplicates dropped per row ({at})"),
    }


CONVERTERS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, dict[str, Any]]]]] = {
    "minhash-memory": ("benchmarks/bench_minhash_memory.py", _minhash_memory),
}


def _first_seen(path: Path) -> str:
    out = subprocess.run(["git", "log", "--diff-filter=AM", "--format=%cI", "-1", "--", str(path)], cwd=ROOT,
                         capture_output=True, text=True, check=False).stdout.strip()
    return out or "unknown"


def convert(name: str, directory: Path = RESULTS) -> Path:
    path = directory / f"{name}.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    date = None
    if old.get("format") == FORMAT:
        if "converted_from" not in old:
            return path  # a first-hand file: nothing to convert
        old, date = old["data"], old["date"]  # converted before: derive the figures again from its data
    benchmark, figures = CONVERTERS[name]
    record = {
        "format": FORMAT, "name": name, "benchmark": benchmark,
        "command": "python " + old.get("command", benchmark),
        "commit": "unknown", "dirty": False, "date": date or _first_seen(path),
        "converted_from": "the older results layout (no commit, no date: the date is the file's last commit)",
        "machine": old.get("machine", {}), "load": {},
        "figures": figures(old),
        "data": old,
    }
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    for arg in sys.argv[1:] or list(CONVERTERS):
        print(convert(arg))
