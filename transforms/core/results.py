"""Results files: the one place a figure about this project's speed, cost or quality comes from.

A benchmark that measures something writes `benchmarks/results/<name>.json` through `write_result`; the docs
render their figures from those files (`<!--fig NAME.KEY-->value<!--/fig-->`, checked by a test) and
`piqaforge plan` reads its rates from them. Nothing else writes a figure down by hand.

One file's layout (`FORMAT`):

    {
      "format": "piqaforge-result/1",
      "name": "minhash_stage",                      # the file's stem
      "benchmark": "benchmarks/bench_minhash_stage.py",
      "command": "python benchmarks/bench_minhash_stage.py --rows 1000000",
      "commit": "<40 hex digits>", "dirty": false,  # the checkout the benchmark ran from
      "date": "2026-12-01T22:55:00Z",               # UTC, when the file was written
      "machine": {...},                             # transforms.core.machine.machine_info()
      "load": {"start": [1m, 5m, 15m], "end": [...]},  # load averages around the measurement
      "figures": {"cpu_us_per_row": {"value": 8.66, "unit": "CPU-µs/row", "what": "..."}, ...},
      "data": {...}                                 # anything else the benchmark keeps (per-seed values, tables)
    }

`figures` holds what a page may quote; each has a `value` (a number or a short string), a `unit` and a `what`
(one sentence: what was measured, on what). `data` is free-form and never quoted directly.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transforms.core.machine import machine_info

FORMAT = "piqaforge-result/1"
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
REQUIRED = ("format", "name", "benchmark", "command", "commit", "date", "machine", "figures")


def results_dir() -> Path:
    """benchmarks/results/, or `$PIQAFORGE_RESULTS_DIR` (a test's or a scratch measurement's folder)."""
    return Path(os.environ.get("PIQAFORGE_RESULTS_DIR") or RESULTS)


class ResultError(ValueError):
    """A results file that is missing, malformed, or lacks the figure asked for."""


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def checkout() -> tuple[str, bool]:
    """(commit, dirty) of the checkout this code runs from; ("unknown", False) outside git."""
    commit = _git("rev-parse", "HEAD") or "unknown"
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return commit, dirty


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def figure(value: float | int | str, unit: str, what: str) -> dict[str, Any]:
    """One quotable figure."""
    return {"value": value, "unit": unit, "what": what}


def write_result(name: str, figures: Mapping[str, Mapping[str, Any]], *, benchmark: str,
                 argv: list[str] | None = None, command: str | None = None, data: Mapping[str, Any] | None = None,
                 load_start: list[float] | None = None, directory: Path | None = None) -> Path:
    """Write `<directory or benchmarks/results>/<name>.json` in `FORMAT` and return its path.

    `argv` defaults to this process's command line (`command`, when given, is recorded as it is instead: a
    shell command that is not one Python process); `load_start` is `os.getloadavg()` taken before the
    measurement (the end is taken now)."""
    for key, fig in figures.items():
        if not {"value", "unit", "what"} <= set(fig):
            raise ResultError(f"{name}: figure {key!r} needs value, unit and what (use results.figure())")
    commit, dirty = checkout()
    args = sys.argv if argv is None else argv
    record = {
        "format": FORMAT, "name": name, "benchmark": benchmark,
        "command": command or (" ".join(["python", *(shlex.quote(a) for a in args)]) if args else benchmark),
        "commit": commit, "dirty": dirty,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_info(),
        "load": {"start": load_start or [], "end": _loadavg()},
        "figures": {k: dict(v) for k, v in figures.items()},
        "data": dict(data or {}),
    }
    out = (directory or results_dir()) / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out


def read_result(name_or_path: str | Path, directory: Path | None = None) -> dict[str, Any]:
    """A results file by name (`minhash_stage`) or path, checked for `FORMAT`'s keys."""
    path = Path(name_or_path)
    if path.suffix != ".json":
        path = (directory or results_dir()) / f"{name_or_path}.json"
    if not path.is_file():
        raise ResultError(f"no results file {path} (the benchmark that writes it has not been run and committed)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not JSON ({exc})") from exc
    missing = [k for k in REQUIRED if k not in record]
    if missing or record.get("format") != FORMAT:
        raise ResultError(f"{path}: not a {FORMAT} file (missing {', '.join(missing) or 'the format tag'})")
    return record


def figure_value(name: str, key: str, directory: Path | None = None) -> Any:
    """The value of figure `key` in results file `name`."""
    record = read_result(name, directory)
    if key not in record["figures"]:
        raise ResultError(f"results file {name}.json has no figure {key!r}; it has: "
                          f"{', '.join(sorted(record['figures'])) or 'none'}")
    return record["figures"][key]["value"]
