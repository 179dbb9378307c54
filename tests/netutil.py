"""Helpers shared by the tests that start real Ray processes on this machine."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (all held open together so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def popen_logged(cmd: list[str], log: Path, **kwargs: Any) -> subprocess.Popen:
    """Start a job with its stdout and stderr in `log`, so a failure can say why (`log_tail`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)


def run_logged(cmd: list[str], log: Path, timeout: float, **kwargs: Any) -> None:
    """Run a job to the end; if it fails, the assertion shows the end of its log."""
    proc = popen_logged(cmd, log, **kwargs)
    assert proc.wait(timeout=timeout) == 0, log_tail(log)


def log_tail(log: Path, lines: int = 60) -> str:
    text = log.read_text(errors="replace").splitlines() if log.exists() else ["(no log)"]
    return f"{log}:\n" + "\n".join(text[-lines:])
