"""What a person sees in the terminal: one line per stage in our words, a funnel table, run lists.

While a job runs, `StageConsole` prints `[3/10] langid  4,207 rows → 4,121 kept, 86 dropped (lang:ja 40 …)  7.7 s`
when a stage ends (and `[3/10] langid …` when it starts, in a terminal as a live line). Ray's own
logs go to `runs/<run_id>/logs/` unless `--verbose` (see `quiet_ray_logging`). `piqaforge runs` and
`piqaforge show RUN_ID` read the lake's manifests.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from transforms.core.manifest import RunManifest, StageRecord


def _n(x: int | float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


def stage_line(index: int, total: int, rec: StageRecord, top: int = 3) -> str:
    """`[i/n] name  in → kept, dropped (top reasons)  seconds` (created/consumed where a stage makes rows)."""
    head = f"[{index + 1}/{total}] {rec.name:<18}"
    if rec.kind == "source":
        flow = f"{_n(rec.rows_created)} read → {_n(rec.rows_kept)} kept"
    elif rec.rows_created or rec.rows_consumed:
        flow = (f"{_n(rec.rows_in)} rows → {_n(rec.rows_created)} created from {_n(rec.rows_consumed)}, "
                f"{_n(rec.rows_kept)} kept")
    else:
        flow = f"{_n(rec.rows_in)} rows → {_n(rec.rows_kept)} kept"
    if rec.rows_dropped:
        reasons = sorted(rec.rows_dropped.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = " ".join(f"{r} {_n(n)}" for r, n in reasons[:top]) + (" …" if len(reasons) > top else "")
        flow += f", {_n(rec.dropped_total)} dropped ({shown})"
    extra = " (reused)" if rec.resumed else ""
    return f"{head} {flow}  {rec.seconds:.1f} s{extra}"


class StageConsole:
    """Runner hooks (`before_stage`, `after_stage`) that print one line per stage."""

    def __init__(self, total: int, stream: IO[str] | None = None):
        self.total, self.stream = total, stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = 0.0
        self.records: list[StageRecord] = []

    def before(self, index: int, stage: Any) -> None:
        self.started = time.perf_counter()
        text = f"[{index + 1}/{self.total}] {stage.name:<18} running …"
        if self.tty:
            self.stream.write("\r\033[2K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def after(self, rec: StageRecord) -> None:
        self.records.append(rec)
        line = stage_line(rec.index, self.total, rec)
        self.stream.write(("\r\033[2K" if self.tty else "") + line + "\n")
        self.stream.flush()


def funnel_table(manifest: RunManifest) -> str:
    rows = [("stage", "kind", "in", "created", "kept", "dropped", "consumed", "s")]
    for s in manifest.stages:
        rows.append((s.name, s.kind, _n(s.rows_in), _n(s.rows_created), _n(s.rows_kept), _n(s.dropped_total),
                     _n(s.rows_consumed), f"{s.seconds:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def show_run(manifest: RunManifest, report: Path | None = None) -> str:
    out = [f"run {manifest.run_id}  job {manifest.job}  status {manifest.status}",
           f"started {manifest.started_at}  finished {manifest.finished_at or '-'}"]
    if manifest.parents:
        out.append("parents " + ", ".join(manifest.parents))
    if manifest.error:
        out.append(f"error {manifest.error}")
    out += ["", funnel_table(manifest), ""]
    for s in manifest.stages:
        if s.rows_dropped:
            reasons = ", ".join(f"{r} {_n(n)}" for r, n in sorted(s.rows_dropped.items(), key=lambda kv: -kv[1]))
            out.append(f"dropped by {s.name}: {reasons}")
    out += [""] + [f"{k:<10} {v}" for k, v in manifest.outputs.items()]
    if report is not None and report.exists():
        out.append(f"{'report':<10} {report}")
    return "\n".join(out)


def list_runs(runs_dir: Path) -> str:
    rows = [("run", "job", "status", "started", "in → kept", "parents")]
    manifests = []
    for path in sorted(runs_dir.glob("*/manifest.json")):
        try:
            manifests.append(RunManifest.load(path))
        except (OSError, ValueError):
            continue
    for m in sorted(manifests, key=lambda m: m.started_at):
        funnel = m.funnel()
        flow = f"{_n(funnel[0][1])} → {_n(funnel[-1][1])}" if funnel else "-"
        rows.append((m.run_id, m.job, m.status, m.started_at[:19], flow, ",".join(m.parents) or "-"))
    if len(rows) == 1:
        return f"no runs in {runs_dir}"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def quiet_ray_logging(log_dir: Path, verbose: bool) -> Path | None:
    """Send Ray's and Ray Data's log lines to `log_dir/ray.log` (not the console) unless verbose."""
    if verbose:
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "ray.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("ray", "ray.data", "ray._private", "ray.util"):
        logger = logging.getLogger(name)
        for old in logger.handlers:  # the previous run's file: close it, do not leak one per run
            old.close()
        logger.handlers = [handler]
        logger.propagate = False
    return path


def with_console(run_dir: Path, run_id: str, total: int, before: Callable[[int, Any], None] | None,
                 after: Callable[[StageRecord], None] | None) -> tuple[Callable[[int, Any], None],
                                                                     Callable[[StageRecord], None]]:
    """One line per stage on the console (unless PIQAFORGE_CONSOLE=0); Ray's log lines to runs/<id>/logs/."""
    quiet = os.environ.get("PIQAFORGE_CONSOLE", "1") == "0"
    logs = quiet_ray_logging(run_dir / "logs", verbose=os.environ.get("PIQAFORGE_VERBOSE") == "1")
    console = None if quiet else StageConsole(total)
    if console is not None:
        where = f"; Ray's log lines: {logs}" if logs else ""
        console.stream.write(f"run {run_id}: {total} stages{where}\n")

    def before_stage(index: int, stage: Any) -> None:
        if console is not None:
            console.before(index, stage)
        if before is not None:
            before(index, stage)

    def after_stage(record: StageRecord) -> None:
        if console is not None:
            console.after(record)
        if after is not None:
            after(record)

    return before_stage, after_stage
