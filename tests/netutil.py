"""Helpers shared by the tests that start real Ray processes on this machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

# one helper for the tests and the cluster rehearsal, which starts real raylets too
from jobs.rehearsal import free_ports

__all__ = ["free_ports", "kill_session"]


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL a `ray start --block` started with `start_new_session=True` and everything its raylet started in
    that session (workers, agents), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)
