"""Fusion: consecutive cheap row-wise stages run as one pass over their input, one read and one write.

Each stage of a chain reads the previous stage's kept files and writes its own (docs/stages.md). For stages
whose own work is cheap (normalise text, count its characters, name its language) that reading and writing
is most of their cost: on 3M crawl rows a length filter alone took 5.3–7.5 s (bench_scale.py) for 0.3–0.6
CPU-s of counting (docs/front_half.md). A stage class that says `fuse = True` runs with its fusable
neighbours as one step: every batch goes through the members in turn, a row one member drops goes no further,
and the step writes the last member's kept rows once and each member's dropped rows to that member's own
`rejected/NN_<stage>/`. Each member still gets its own record: its rows in, dropped (counted from its rejected
files) and kept (the next member's rows in; the last member's from its kept files, so the law is still checked
on what was written); only the intermediate kept files are gone (its record's `outputs` names no `kept`).

What a fused step changes and what it does not:
* the rows and the reasons are those of the stages run one by one (tests/core/test_fusion.py);
* a row one member dropped carries the columns later members add, null (they never saw it);
* a member's seconds and CPU-seconds are the step's, shared out by the time each member spent in its own code
  (measured in the workers, `timing_dir`); `fused_with` in its record names the step's members;
* resuming: the step resumes by partition like any step; its members' checkpoints are reused only all
  together;
* `--set fuse=false` (a recipe's top-level `fuse: false`, or PIQAFORGE_FUSE=0) runs every stage alone.

A stage can fuse when it is row-wise (not a source, global or creating stage), asks no HTTP endpoint and no
GPU; neighbours fuse when they ask for the same environment (runtime_env, env, custom resources). The step
runs on actors when a member is stateful (its model loads once per actor), with the largest `cpus` and
`concurrency` any member sets and the smallest `batch_size` any member sets; on a local Ray of N >= 2 CPUs, when no
member sets `cpus` or `concurrency`, N actors of (N - 1) / N CPU each (`merged_resources`).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import PrivateAttr

from transforms.core import columns as C
from transforms.core.creating import is_creating
from transforms.core.resources import Resources
from transforms.core.stage import GlobalStage, Stage

# The member (its position in the step) that dropped a row; the writer files the row under that member.
FUSED_MEMBER = "_fused_member"
FUSE_ENV = "PIQAFORGE_FUSE"


def fusion_enabled(setting: bool | None = None) -> bool:
    """The argument, else $PIQAFORGE_FUSE (0 turns it off), else on."""
    if setting is not None:
        return setting
    return os.environ.get(FUSE_ENV, "1") not in ("0", "false", "no")


def can_fuse(stage: Stage[Any]) -> bool:
    from transforms.core.creating import SourceStage

    return (bool(getattr(type(stage), "fuse", False)) and not isinstance(stage, GlobalStage | SourceStage)
            and not is_creating(stage) and not hasattr(stage, "record_requests_to") and not stage.resources.gpus)


def _environment(stage: Stage[Any]) -> str:
    r = stage.resources
    return json.dumps([r.runtime_env, r.env, r.custom_resources, r.accelerator_type, r.secrets], sort_keys=True,
                      default=str)


def fuse_groups(stages: Sequence[Stage[Any]], enabled: bool = True) -> list[list[int]]:
    """The chain's steps as lists of positions in `stages`: runs of two or more fusable neighbours that ask for
    the same environment become one step, every other stage is a step alone."""
    groups: list[list[int]] = []
    for i, stage in enumerate(stages):
        last = groups[-1] if groups else None
        if (enabled and last is not None and can_fuse(stage) and can_fuse(stages[last[-1]])
                and _environment(stage) == _environment(stages[last[-1]])):
            last.append(i)
        else:
            groups.append([i])
    return groups


def merged_resources(members: Sequence[Stage[Any]], local_cpus: float | None = None) -> Resources:
    """One copy of the step asks what its members ask for where they say so (a field left at its default asks
    nothing): the largest `cpus`, `concurrency` and `memory_gb`, the smallest `batch_size`.

    On a Ray this process started with `local_cpus` >= 2 CPUs (not a cluster, whose profile sets its own), a step
    on actors whose members set neither `cpus` nor `concurrency` runs one actor per CPU, each asking for
    (N - 1) / N of one, so that one CPU stays for the tasks that read the actors' input: its members are cheap by
    declaration, and one actor would leave all cores but one idle (3M crawl rows on 2 cores: the fused
    normalize → length_filter → langid step 34.6 s with one actor, 22.5 s with two; docs/front_half.md)."""
    def asked(field: str) -> list[Any]:
        return [getattr(m.resources, field) for m in members
                if field in m.resources.model_fields_set and getattr(m.resources, field) is not None]

    default = Resources()
    cpus, concurrency, memory, sizes = asked("cpus"), asked("concurrency"), asked("memory_gb"), asked("batch_size")
    if local_cpus and local_cpus >= 2 and any(m.stateful for m in members) and not cpus and not concurrency:
        n = int(local_cpus)
        cpus, concurrency = [round((local_cpus - 1) / n, 3)], [n]
    return members[0].resources.model_copy(update={
        "cpus": max(cpus) if cpus else default.cpus,
        "batch_size": min(sizes) if sizes else default.batch_size,
        "concurrency": max(concurrency) if concurrency else None,
        "memory_gb": max(memory) if memory else None})


class FusedStages(Stage):
    """Several row-wise stages as one: a batch goes through each member in turn (see the module docstring)."""

    name: ClassVar[str] = "fused"
    members: list[Any]
    timing_dir: str | None = None

    _seconds: list[float] = PrivateAttr(default_factory=list)
    _timing_file: str | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, members: Sequence[Stage[Any]], timing_dir: Path | None = None,
           local_cpus: float | None = None) -> FusedStages:
        kind = StatefulFusedStages if any(m.stateful for m in members) else FusedStages
        return kind(members=list(members), resources=merged_resources(members, local_cpus),
                    timing_dir=str(timing_dir) if timing_dir else None)

    @property
    def member_names(self) -> list[str]:
        return [m.name for m in self.members]

    def label(self) -> str:
        """How messages name the step: the member that asks the most (a stateful one first), and the others."""
        def demand(m: Stage[Any]) -> tuple[bool, float]:
            return m.stateful, m.resources.cpus * (m.resources.concurrency or 1)

        blamed = max(self.members, key=demand)
        others = ", ".join(repr(m.name) for m in self.members if m is not blamed)
        return f"{blamed.name!r} (run in one pass with {others})"

    def setup(self) -> None:
        for m in self.members:
            m.ensure_setup()

    def ensure_setup(self) -> None:
        if not self._is_set_up:  # each member notes where it runs (the placement log), the step itself does not
            self.setup()
            self._is_set_up = True

    def set_finished_marker(self, path: str | os.PathLike[str]) -> None:
        super().set_finished_marker(path)
        for m in self.members:
            m.set_finished_marker(path)

    def declared_drop_reasons(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for m in self.members:
            out.update(m.declared_drop_reasons())
        return out

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if not self._seconds:
            self._seconds = [0.0] * len(self.members)
        positions = np.arange(batch.num_rows)
        dropped: list[tuple[pa.Table, np.ndarray]] = []
        current, out = batch, batch
        for i, member in enumerate(self.members):
            if i and current.num_rows == 0:
                break  # a batch that an earlier member emptied: later members would only invent column types
            started = time.perf_counter()
            out = member(current)  # the member's own contract: columns, set-up, same rows, declared reasons
            self._seconds[i] += time.perf_counter() - started
            rejected = pc.equal(out.column(C.STATUS), C.REJECTED).to_numpy(zero_copy_only=False)
            if rejected.any():
                rows = out.filter(pa.array(rejected))
                dropped.append((rows.append_column(FUSED_MEMBER, pa.array(np.full(rows.num_rows, i, np.int16))),
                                positions[rejected]))
            keep = ~rejected
            positions = positions[keep]
            current = out.filter(pa.array(keep))
            if i < len(self.members) - 1:
                current = current.drop_columns([C.STATUS])  # a stage's input never has it (writing.split_roles)
        self._write_timing()
        if not dropped:
            return current if current.num_rows else out
        kept = current.append_column(FUSED_MEMBER, pa.nulls(current.num_rows, pa.int16()))
        if C.STATUS not in kept.schema.names:  # the batch emptied before the last member
            kept = kept.append_column(C.STATUS, pa.array([C.KEPT] * kept.num_rows, pa.string()))
        table = pa.concat_tables([t for t, _ in dropped] + [kept], promote_options="default")
        order = np.argsort(np.concatenate([p for _, p in dropped] + [positions]), kind="stable")
        return table.take(pa.array(order))  # the rows in the order they came (the filter contract)

    def _write_timing(self) -> None:
        if self.timing_dir is None:
            return
        if self._timing_file is None:
            os.makedirs(self.timing_dir, exist_ok=True)
            self._timing_file = os.path.join(self.timing_dir, f"{os.getpid()}-{secrets.token_hex(4)}.json")
        tmp = f"{self._timing_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"members": self.member_names, "seconds": self._seconds}, fh)
        os.replace(tmp, self._timing_file)


class StatefulFusedStages(FusedStages):
    """A fused step with a member that loads a model: it runs on actors, the model loading once per actor."""

    stateful: ClassVar[bool] = True


def member_shares(timing_dir: Path, n: int) -> list[float]:
    """Each member's share of the time the step's workers spent in the members' own code (equal shares when
    nothing was recorded: a step whose every partition an earlier attempt finished)."""
    total = [0.0] * n
    for f in timing_dir.glob("*.json") if timing_dir.is_dir() else []:
        try:
            seconds = json.loads(f.read_text(encoding="utf-8"))["seconds"]
        except (OSError, ValueError, KeyError):
            continue
        for i, s in enumerate(seconds[:n]):
            total[i] += float(s)
    whole = sum(total)
    return [t / whole for t in total] if whole > 0 else [1.0 / n] * n
