"""Ray's own log lines, warnings and progress bars kept off the console: held in memory until the run's
log folder is known, then written to `runs/<run_id>/logs/ray.log` unless `--verbose`."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TextIO

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
