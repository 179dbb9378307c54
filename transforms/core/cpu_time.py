"""The CPU seconds a stage costs, for the run report's rows per CPU-second (the unit of
benchmarks/bench_crawl_cost.py, so a real run can be compared with the cost model).

A stage runs in Ray workers, not in the driver, so the driver's own `time.process_time` would miss almost
all of it. On a Ray instance the driver started (a local run), every Ray process is a descendant of the
driver (raylet → workers), so the CPU time of the driver's process tree is the stage's whole cost on this
machine: its tasks and actors, the driver's reading and writing, and Ray's own processes while it ran (an
idle raylet costs a few CPU-milliseconds a second: honest overhead, visible on tiny stages).

`StageClock` sums each process's own user + system time (/proc/<pid>/stat), sampled every `interval`
seconds while the stage runs: an actor that exits when its stage ends keeps what it had used at the last
sample (the raylet reaps its workers without adding their time to its own `cutime`, so a before/after
difference would lose or even subtract it). What a process uses in its last interval before it exits,
and processes that live shorter than one interval, are missed. On a cluster the workers are on other
machines and only the driver is measured: `scope()` says which, and the report's column header repeats it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

TREE = "driver + its local Ray processes"
DRIVER = "driver only (the stage ran on cluster workers)"


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, start time, user + system seconds) of one process, or None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    # fields[0] is stat field 3 (the state): ppid is field 4, utime and stime 14 and 15, starttime 22
    return int(fields[1]), fields[19], (int(fields[11]) + int(fields[12])) / _TICKS


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_snapshot(root: int | None = None) -> dict[tuple[int, str], float]:
    """{(pid, start time): own CPU seconds} of process `root` (default: this one) and every live descendant.
    Without /proc (not Linux): this process, its threads and its reaped children (`os.times`)."""
    root = os.getpid() if root is None else root
    if not Path("/proc/self/stat").exists():
        t = os.times()
        return {(root, ""): t.user + t.system + t.children_user + t.children_system}
    stats = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (got := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = got
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[(pid, stats[pid][1])] = stats[pid][2]
        todo.extend(children.get(pid, []))
    return out


class StageClock:
    """`with StageClock() as clock: ...` then `clock.seconds`: the CPU seconds of the process tree meanwhile."""

    def __init__(self, interval: float = 0.5):
        self.interval = interval
        self.seconds = 0.0
        self._base: dict[tuple[int, str], float] = {}
        self._seen: dict[tuple[int, str], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        for key, value in tree_snapshot().items():
            if value > self._seen.get(key, -1.0):
                self._seen[key] = value

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> StageClock:
        self._base = tree_snapshot()
        self._seen = dict(self._base)
        self._thread = threading.Thread(target=self._run, name="stage-cpu-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.seconds = sum(v - self._base.get(k, 0.0) for k, v in self._seen.items())


def scope() -> str:
    """What `tree_cpu_seconds` covers now: the whole local Ray, or (joined to a cluster) the driver only."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        from transforms.core.execution import fixed_cpus

        return TREE if fixed_cpus() else DRIVER
    return TREE
