"""What a person sees in the terminal: one line per stage in our words, a funnel table, run lists.

While a job runs, `StageConsole` prints `[3/10] langid  4,207 rows → 4,121 kept, 86 dropped (lang:ja 40 …)  7.7 s`
when a stage ends, and `[3/10] langid  running …` when it starts. In a terminal the running line is
a live bar (rows written / rows in, rate, ETA) fed by the writer (`progress`), and is replaced by
the end line; without one, each stage prints one plain line at its start and one at its end. Ray's
own logs and progress bars go to `runs/<run_id>/logs/` unless `--verbose` (see `quiet_ray_logging`).
At the end of `piqaforge run`, `run_summary` prints the funnel, the outputs, the report and the
judges' figures. `piqaforge runs` and `piqaforge show RUN_ID` read the lake's manifests.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TextIO

from transforms.core.accounting import retries_line
from transforms.core.liveness import effective_status
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


def _table(rows: list[tuple[str, ...]], left: int = 1, indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) if i < left else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]


def _f(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.3f}"
    return _n(x) if isinstance(x, int) else str(x)


def judges_lines(judges: dict[str, Any]) -> list[str]:
    """The judges' figures against the labels (manifest extras `judges`, docs/judges.md), as text."""
    out: list[str] = []
    run = judges.get("run") or {}
    if run:
        out.append(f"kept rows against the labels: {_f(run.get('kept_rows'))} kept after {run.get('kept_stage')}; "
                   f"from 3i4k/chatbot {_f(run.get('kept_from_negative_sources'))} "
                   f"({_f(run.get('kept_share_from_negative_sources'))})")
        rows: list[tuple[str, ...]] = [("group", "rows", "physical", "kept", "precision", "recall", "AUC")]
        for group, m in (run.get("groups") or {}).items():
            kept = (m.get("tp") or 0) + (m.get("fp") or 0)
            rows.append((group, _f(m.get("rows")), _f(m.get("positives")), _f(kept), _f(m.get("precision")),
                         _f(m.get("recall")), _f(m.get("auc"))))
        out += _table(rows) if len(rows) > 1 else []
    ev = judges.get("judge_eval") or {}
    if ev.get("judges"):
        out.append(f"judge-eval on {_f(ev.get('rows'))} labelled rows ({_f(ev.get('positives'))} physical):")
        table: list[tuple[str, ...]] = [("judge", "kind", "precision", "recall", "AUC", "pass rate")]
        for name, j in ev["judges"].items():
            table.append((name, str(j.get("kind", "")), _f(j.get("precision")), _f(j.get("recall")), _f(j.get("auc")),
                          _f(j.get("pass_rate"))))
        out += _table(table, left=2)
    return out


def run_summary(manifest: RunManifest, report: Path | None = None) -> str:
    """What `piqaforge run` prints at the end: the funnel, the outputs, the report, the judges' figures."""
    out = [f"run {manifest.run_id}  {manifest.status}", "", funnel_table(manifest), ""]
    out += [f"{k:<10} {v}" for k, v in manifest.outputs.items()]
    if report is not None and report.exists():
        out.append(f"{'report':<10} {report}")
    from transforms.core.manifest import recorded_figures

    figures = manifest.extras.get("judges") or recorded_figures(report.parent if report else None, "judges")
    if figures:
        out += ["", *judges_lines(figures)]
    waiting: dict[str, Any] = manifest.extras["review"] if isinstance(manifest.extras.get("review"), dict) else {}
    if manifest.status == "awaiting_review" and waiting.get("next"):
        out += ["", f"review batch {waiting.get('batch')}: {waiting['next']}"]
    return "\n".join(out)


def listed_status(manifest: RunManifest, run_dir: Path | None) -> str:
    """The status `runs` and `show` print: `interrupted` for a running run whose driver is gone, `superseded`
    for a finished review import that a later import of the same batch replaced (`review import --replace`)."""
    status = effective_status(manifest.status, manifest.extras.get("driver"), run_dir) if run_dir \
        else manifest.status
    return "superseded" if status == "succeeded" and manifest.extras.get("superseded_by") else status


def show_run(manifest: RunManifest, report: Path | None = None) -> str:
    status = listed_status(manifest, report.parent if report else None)
    out = [f"run {manifest.run_id}  job {manifest.job}  status {status}",
           f"started {manifest.started_at}  finished {manifest.finished_at or '-'}"]
    if manifest.extras.get("superseded_by"):
        out.append(f"superseded by {manifest.extras['superseded_by']}")
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
    waiting: dict[str, Any] = manifest.extras["review"] if isinstance(manifest.extras.get("review"), dict) else {}
    if manifest.status == "awaiting_review" and waiting.get("next"):
        out.append(f"{'next':<10} {waiting['next']}")
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
        status = listed_status(m, runs_dir / m.run_id)  # a dead driver: interrupted; a replaced import: superseded
        rows.append((m.run_id, m.job, status, m.started_at[:19], flow, ",".join(m.parents) or "-"))
    if len(rows) == 1:
        return f"no runs in {runs_dir}"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


RAY_LOGGERS = ("ray", "ray.data", "ray._private", "ray.util")


def hold_ray_logs() -> None:
    """Before Ray starts (`piqaforge run`): keep Ray's log lines, such as its start-up warnings, in
    memory until `quiet_ray_logging` knows the run's log folder, instead of printing them."""
    from logging.handlers import MemoryHandler

    import ray  # noqa: F401  (importing ray installs its console handler, which this replaces)

    # If no run takes them (the job fails before its first stage), they reach stderr at exit, and
    # an error is printed at once: nothing Ray says is lost.
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    held = MemoryHandler(capacity=100_000, flushLevel=logging.ERROR, target=console)
    for name in RAY_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [held]
        logger.propagate = False


def _route_ray_warnings() -> None:
    """Python warnings raised inside Ray's own code (e.g. Ray Data's actor pool sizing) go to the
    `ray` logger, so to the run's ray.log; every other warning is shown as before."""
    import warnings

    import ray

    if getattr(warnings.showwarning, "piqaforge", False):
        return
    ray_dir, shown = os.path.dirname(ray.__file__), warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if filename.startswith(ray_dir):
            logging.getLogger("ray").warning("%s:%s: %s: %s", filename, lineno, category.__name__, message)
        else:
            shown(message, category, filename, lineno, file, line)

    show.piqaforge = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def quiet_ray_logging(log_dir: Path, verbose: bool) -> Path | None:
    """Send Ray's and Ray Data's log lines to `log_dir/ray.log` (not the console) unless verbose."""
    if verbose:
        return None
    from logging.handlers import MemoryHandler

    import ray  # noqa: F401  (first: importing ray adds its console handler, replaced below)

    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "ray.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in RAY_LOGGERS:
        logger = logging.getLogger(name)
        for old in logger.handlers:  # the previous run's file: close it, do not leak one per run
            if isinstance(old, MemoryHandler):  # lines held since Ray started go to this run's file
                old.setTarget(handler)
                old.flush()
            old.close()
        logger.handlers = [handler]
        logger.propagate = False
    _route_ray_warnings()
    return path


def quiet_ray_progress() -> None:
    """Ray Data's own progress bars name its operators (`MapBatches(_StageActor)`), not our stages:
    off unless verbose; our bar shows the running stage instead."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.enable_operator_progress_bars = False


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
