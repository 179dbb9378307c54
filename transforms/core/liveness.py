"""Is a run's driver still alive? A `running` status whose driver is gone reads `interrupted`.

A run records its driver (`pid`, `host`) and, while it runs, a daemon thread touches
`runs/<run id>/heartbeat` every `BEAT_S` seconds. A run still marked `running` is `interrupted`
when its driver's process is gone (same host) or its heartbeat is older than `STALE_S` (another
host, e.g. a submitted job's driver on a head node that died).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

BEAT_S = 10.0
STALE_S = 90.0
HEARTBEAT = "heartbeat"


def driver_stamp() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname()}


class Heartbeat:
    """Touch `<run_dir>/heartbeat` every BEAT_S seconds until stopped (a context manager)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / HEARTBEAT
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="piqaforge-heartbeat")

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(f"{os.getpid()} {time.time():.0f}\n", encoding="utf-8")
            except OSError:
                pass
            self._stop.wait(BEAT_S)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def driver_gone(driver: dict[str, Any] | None, run_dir: Path) -> bool:
    """True when the run's driver is known to be gone (dead pid here, or a stale heartbeat)."""
    if not driver:
        return False
    if driver.get("host") == socket.gethostname() and isinstance(driver.get("pid"), int):
        return not _pid_alive(int(driver["pid"]))
    beat = Path(run_dir) / HEARTBEAT
    try:
        return time.time() - beat.stat().st_mtime > STALE_S
    except OSError:
        return False


def effective_status(status: str, driver: dict[str, Any] | None, run_dir: Path) -> str:
    """`interrupted` for a `running` run whose driver is gone, else `status`."""
    return "interrupted" if status == "running" and driver_gone(driver, run_dir) else status
