"""What a person sees in the terminal: one line per stage in our words, a funnel table, run lists.

While a job runs, `StageConsole` prints `[3/10] langid  4,207 rows → 4,121 kept, 86 dropped (lang:ja 40 …)  7.7 s`
when a stage ends, and `[3/10] langid  running …` when it starts. In a terminal the running line is
a live bar (rows written / rows in, rate, ETA) fed by the writer (`progress`), and is replaced by
the end line; without one, each stage prints one plain line at its start and one at its end. Ray's
own logs and progress bars go to `runs/<run_id>/logs/` unless `--verbose` (see `quiet_ray_logging`).
At the end of `piqaforge run`, `run_summary` prints the funnel, the outputs, the report and the
judges' figures; it and what `piqaforge runs` and `piqaforge show RUN_ID` print are in run_listing.py,
Ray's logs kept off the console in ray_logs.py (both re-exported here for one release).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from transforms.core.accounting import retries_line
from transforms.core.manifest import StageRecord
from transforms.core.ray_logs import (  # noqa: F401 (re-exported)
    RAY_LOGGERS,
    hold_ray_logs,
    quiet_ray_logging,
    quiet_ray_progress,
)
from transforms.core.run_listing import (  # noqa: F401 (re-exported)
    count_text,
    funnel_table,
    judges_lines,
    list_runs,
    listed_status,
    run_summary,
    show_run,
)


def stage_line(index: int, total: int, rec: StageRecord, top: int = 3) -> str:
    """`[i/n] name  in → kept, dropped (top reasons)  seconds` (created/consumed where a stage makes rows)."""
    head = f"[{index + 1}/{total}] {rec.name:<18}"
    if rec.kind == "source":
        flow = f"{count_text(rec.rows_created)} read → {count_text(rec.rows_kept)} kept"
    elif rec.rows_created or rec.rows_consumed:
        flow = (f"{count_text(rec.rows_in)} rows → {count_text(rec.rows_created)} created from "
                f"{count_text(rec.rows_consumed)}, {count_text(rec.rows_kept)} kept")
    else:
        flow = f"{count_text(rec.rows_in)} rows → {count_text(rec.rows_kept)} kept"
    if rec.rows_dropped:
        reasons = sorted(rec.rows_dropped.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = " ".join(f"{r} {count_text(n)}" for r, n in reasons[:top])
        shown += " …" if len(reasons) > top else ""
        flow += f", {count_text(rec.dropped_total)} dropped ({shown})"
    extra = " (reused)" if rec.resumed else ""
    asked = retries_line(rec.requests)  # only when an endpoint needed retries or failed questions
    return f"{head} {flow}  {rec.seconds:.1f} s{extra}" + (f"; {asked}" if asked else "")


class StageConsole:
    """Runner hooks (`before_stage`, `after_stage`) that print one line per stage, with a live bar in a terminal."""

    def __init__(self, total: int, stream: IO[str] | None = None, bar_after_s: float = 1.0):
        self.total, self.stream = total, stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar_after_s = bar_after_s
        self.started = 0.0
        self.records: list[StageRecord] = []
        self.bar: Any = None
        self.label = ""

    def before(self, index: int, stage: Any) -> None:
        global _ACTIVE
        self.started = time.perf_counter()
        self.label = f"[{index + 1}/{self.total}] {stage.name:<18}"
        text = f"{self.label} running …"
        if self.tty:
            self.stream.write("\r\033[2K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        _ACTIVE = self

    def progress(self, rows: int = 0, total: int | None = None) -> None:
        """Rows of the running stage written so far (the writer calls this); a bar in a terminal only."""
        if not self.tty:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.label, unit=" rows", unit_scale=total is None or total >= 10_000, file=self.stream,
                            leave=False, delay=self.bar_after_s, dynamic_ncols=True, mininterval=0.5,
                            bar_format="{desc} {percentage:3.0f}%|{bar:24}| {n_fmt}/{total_fmt} rows "
                                       "[{elapsed}<{remaining}, {rate_fmt}]" if total else None)
            # rows arrive per written block, so a slow stage may go long without one: keep the clock moving
            threading.Thread(target=self._tick, args=(self.bar,), daemon=True, name="stage-bar").start()
        elif total is not None and self.bar.total != total:
            self.bar.total = total
        if rows:
            self.bar.update(rows)

    def _tick(self, bar: Any) -> None:
        time.sleep(self.bar_after_s)
        while self.bar is bar:
            bar.refresh()  # a no-op once the bar is closed
            time.sleep(1.0)

    def after(self, rec: StageRecord) -> None:
        global _ACTIVE
        _ACTIVE = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.records.append(rec)
        line = stage_line(rec.index, self.total, rec)
        self.stream.write(("\r\033[2K" if self.tty else "") + line + "\n")
        self.stream.flush()


# The console of the stage that is running in this process (the driver), for `progress`.
_ACTIVE: StageConsole | None = None


def progress(rows: int = 0, total: int | None = None) -> None:
    """Called by the writer as a stage's rows are written: advances the live bar, if there is one."""
    if _ACTIVE is not None:
        _ACTIVE.progress(rows, total)


def with_console(run_dir: Path, run_id: str, total: int, before: Callable[[int, Any], None] | None,
                 after: Callable[[StageRecord], None] | None) -> tuple[Callable[[int, Any], None],
                                                                     Callable[[StageRecord], None]]:
    """One line per stage on the console (unless PIQAFORGE_CONSOLE=0); Ray's log lines to runs/<id>/logs/."""
    quiet = os.environ.get("PIQAFORGE_CONSOLE", "1") == "0"
    verbose = os.environ.get("PIQAFORGE_VERBOSE") == "1"
    logs = quiet_ray_logging(run_dir / "logs", verbose=verbose)
    if logs is not None:
        from transforms.core.native_stderr import filter_native_stderr

        quiet_ray_progress()
        filter_native_stderr(logs)  # Ray's C++ log lines on a terminal's stderr, too
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
