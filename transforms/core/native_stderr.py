"""Keep the log lines Ray's C++ core writes to the driver's stderr off the terminal.

The driver's core worker copies its error-level lines to file descriptor 2, below Python, e.g.
`[2026-… E 5920 5920] core_worker.cc:2465: Actor with class name: 'MapWorker(MapBatches(_StageActor))'
… has constructor arguments in the object store …` once per actor-pool stage (ray-project/ray#53727).
Python's logging cannot see them. On a terminal, `filter_native_stderr` points fd 2 at a pipe; a
thread copies every byte back to the terminal at once, except whole lines in that native format,
which go to the run's `ray.log`. The `piqaforge` command turns it on without a terminal too
(PIQAFORGE_NATIVE_FILTER=1: a console piped to a file or a CI log shows only our lines); code that calls the
runner in-process (tests) keeps its stderr as it is. `-v` leaves stderr alone.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from pathlib import Path

# `[2026-11-23 08:45:23,362 E 5920 5920] core_worker.cc:2465: ...` (glog-style, any level)
NATIVE_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [DIWEF] \d+ \d+\] [\w./-]+\.(cc|h):\d+: ")


class _Filter:
    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.terminal = os.dup(2)
        read_end, self.write_end = os.pipe()
        self.read_end = read_end
        os.dup2(self.write_end, 2)
        self.thread = threading.Thread(target=self._pump, name="native-stderr", daemon=True)
        self.thread.start()

    def _emit(self, line: bytes) -> None:
        if NATIVE_LINE.match(line):
            with open(self.log_path, "ab") as f:
                f.write(line)
        else:
            os.write(self.terminal, line)

    def _pump(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.read_end, 65536)
            except OSError:
                break
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._emit(line + b"\n")
            if pending and not pending.startswith(b"["):  # a progress bar or prompt: show it now
                os.write(self.terminal, pending)
                pending = b""
        if pending:
            os.write(self.terminal, pending)

    def stop(self) -> None:
        os.dup2(self.terminal, 2)  # fd 2 is the terminal again; closing our end lets the thread drain
        os.close(self.write_end)
        self.thread.join(timeout=5)


_ACTIVE: _Filter | None = None


def filter_native_stderr(log_path: Path) -> bool:
    """Route native log lines to `log_path` from now on (on a terminal only); True when active."""
    global _ACTIVE
    if _ACTIVE is not None:
        _ACTIVE.log_path = log_path  # a second run in the same process writes to its own log
        return True
    if not os.isatty(2) and os.environ.get("PIQAFORGE_NATIVE_FILTER") != "1":
        return False
    _ACTIVE = _Filter(log_path)
    atexit.register(stop_filter)
    return True


def stop_filter() -> None:
    global _ACTIVE
    if _ACTIVE is not None:
        _ACTIVE.stop()
        _ACTIVE = None
