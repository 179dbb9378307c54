"""The stage contract.

A stage is a small pydantic model: its fields are its configuration, `reads`/`writes` declare the
columns it needs and makes, and `resources` says what one copy of it costs on a cluster. It maps
an Arrow batch to a batch of the *same rows in the same order*; a row it wants gone gets a
`drop_reason`, and the runner moves it to `rejected/`. Heavy models load in `setup()`, which
runs once per worker (a Ray actor when `stateful`), never at import.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, ClassVar, Generic

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from typing_extensions import TypeVar

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason, NoDrops, reason_array, reason_text
from transforms.core.placement_log import PLACEMENT_LOG_VAR, _where, note_placement  # noqa: F401 (re-exported)
from transforms.core.resources import Resources, StageError, placement_args  # noqa: F401 (re-exported)

log = logging.getLogger("piqaforge")

# The stage's own reasons (transforms/core/drop_reasons.py): `class LengthFilter(Stage[LengthDrops])`. A class that
# names none is a `Stage[NoDrops]`: mypy lets its `drop` mark no row at all.
R = TypeVar("R", bound=DropReason, default=NoDrops)


class Stage(BaseModel, Generic[R]):
    """Base class of every row-wise stage."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: ClassVar[str] = "stage"
    reads: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ()
    # The pyproject extras this stage needs whatever its configuration (its engines' backends add theirs):
    # placement, the cluster's node set-up and `piqaforge stages` read them from here.
    extras: ClassVar[tuple[str, ...]] = ()
    # True when setup() loads something expensive: the runner then uses an actor pool so the
    # model loads once per worker instead of once per batch.
    stateful: ClassVar[bool] = False
    # True when its own work is cheap next to reading and writing its input (normalise, count, name a language):
    # the runner then runs it with fusable neighbours as one pass, one read and one write (transforms/core/fusion.py).
    fuse: ClassVar[bool] = False
    # Why it drops rows: the `DropReason` enum the class is parametrised with (`Stage[LengthDrops]`), whose members
    # carry each kind and what it means; the stage drops a row only through `drop` / `drop_where`, which take a
    # member of that enum (mypy refuses any other), so a reason cannot be written without being declared.
    # `reason_type` and `drop_reasons` ({kind: meaning}: `piqaforge stages NAME`, docs/stages_reference.md) are
    # derived from it. A class from outside the repo may set `drop_reasons` by hand and write strings itself
    # (`set_drop_reason`): the runner checks what it wrote (`check_drop_reasons`), a warning in a user's run.
    reason_type: ClassVar[type[DropReason] | None] = None
    drop_reasons: ClassVar[dict[str, str]] = {}
    # The item columns it adds that a release may publish (names from transforms/piqa/schema.ITEM_COLUMNS,
    # which holds each one's type and meaning); the release card names the stage beside each.
    release_columns: ClassVar[tuple[str, ...]] = ()

    resources: Resources = Field(default_factory=Resources, description="Per-copy resources on a cluster.")

    _is_set_up: bool = PrivateAttr(default=False)
    # A file that exists once this stage's run is over (the runner sets it: the stage's checkpoint).
    _finished_marker: str | None = PrivateAttr(default=None)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        meta = cls.__pydantic_generic_metadata__
        reasons = meta["args"][0] if meta["origin"] is not None and meta["args"] else None
        if isinstance(reasons, type) and issubclass(reasons, DropReason):  # `Stage[LengthDrops]` itself
            cls.reason_type, cls.drop_reasons = reasons, reasons.meanings()
        elif cls.reason_type is not None and "drop_reasons" in cls.__dict__:
            raise TypeError(f"{cls.__module__}.{cls.__name__} sets `drop_reasons` beside its reasons' enum "
                            f"{cls.reason_type.__name__}: the enum is the one declaration")

    # -- dropping rows: only for a reason of this stage's own ---------------------------------------
    @classmethod
    def drop(cls, batch: pa.Table, reasons: Sequence[R | tuple[R, str] | None]) -> pa.Table:
        """`batch` with each row's reason (None: kept): a member of this stage's reasons, or a member and its
        detail (`(Drops.EMPTY_FIELD, "goal")` is written `empty_field:goal`). An earlier reason on a row wins."""
        return set_drop_reason(batch, reason_array(reasons))

    @classmethod
    def drop_where(cls, batch: pa.Table, mask: pa.Array | pa.ChunkedArray, reason: R,
                   detail: str | None = None) -> pa.Table:
        """`batch` with the rows where `mask` is true dropped for `reason` (the columnar form of `drop`). Class
        methods both, so a helper that runs without the stage (a Ray task) drops as `ExactDedup.drop_where(...)`."""
        text = reason_text(reason if detail is None else (reason, detail))
        return set_drop_reason(batch, pc.if_else(mask, pa.scalar(text, pa.string()), pa.scalar(None, pa.string())))

    # -- to override -------------------------------------------------------------------------
    def setup(self) -> None:
        """Load models or indexes. Runs once per worker, before the first batch."""

    def process(self, batch: pa.Table) -> pa.Table:
        """Return `batch` with the `writes` columns and, for rows to drop, a `drop_reason`."""
        raise NotImplementedError

    # -- the contract, enforced ----------------------------------------------------------------
    def check_columns(self, schema: pa.Schema) -> None:
        missing = [c for c in self.reads if c not in schema.names]
        if missing:
            raise StageError(
                f"stage '{self.name}' needs column(s) {missing}, but the batch has {schema.names}. "
                f"Check the column mapping or the stage order."
            )

    def set_finished_marker(self, path: str | os.PathLike[str]) -> None:
        """Name the file whose existence means this stage's run is over (before its actors are made)."""
        self._finished_marker = os.fspath(path)

    def exit_actor_if_finished(self) -> None:
        """First thing in the constructor of every actor that runs a stage.

        Ray keeps the lineage of a finished stage's blocks, and when a node holding some of them dies
        it restarts the actor that made them to rebuild them, long after the stage wrote its output.
        Nobody reads those blocks again, but the restarted actor would keep its CPUs (or GPU) until
        the job ends, and a later stage can then wait for them forever. Such an actor leaves at once.
        """
        if self._finished_marker is None or not os.path.exists(self._finished_marker):
            return
        import ray

        log.warning("stage %r finished before this actor (re)started (Ray restarted it to rebuild blocks "
                    "lost with a node); it exits without loading anything", self.name)
        ray.actor.exit_actor()

    def ensure_setup(self) -> None:
        if not self._is_set_up:
            note_placement(self.name)
            try:
                self.setup()
            except ImportError as err:  # a node whose image lacks the stage's code: say which, at once
                raise type(err)(f"stage '{self.name}' cannot start on this node ({_where()}): {err}") from err
            self._is_set_up = True

    def prepare(self, batch: pa.Table | pa.RecordBatch) -> pa.Table:
        """The batch as a table, its columns checked and the stage set up (every kind's first step)."""
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        self.check_columns(batch.schema)
        self.ensure_setup()
        return batch

    def __call__(self, batch: pa.Table) -> pa.Table:
        batch = self.prepare(batch)
        before = batch.column(C.DROP_REASON) if C.DROP_REASON in batch.schema.names else None
        n = batch.num_rows
        out = self.process(batch) if n else self.process_empty(batch)
        if out.num_rows != n:
            raise StageError(
                f"stage '{self.name}' returned {out.num_rows} rows for {n}: stages must mark rows with a "
                f"drop_reason instead of deleting them."
            )
        missing = [c for c in self.writes if c not in out.schema.names]
        if missing:
            raise StageError(f"stage '{self.name}' promised column(s) {missing} but did not write them.")
        out = mark_dropped(out, self.name)
        reasons = out.column(C.DROP_REASON)
        if before is not None:  # only the reasons this stage gave (an earlier stage's stand)
            reasons = pc.filter(reasons, pc.is_null(before.cast(pa.string())))
        if self._finished_marker is None:
            # called directly (a unit test, a notebook). Under the runner (which set the marker) the driver checks
            # every kind once from the rejected files (records.record_step): strict there in tests, else a warning
            # on the stage's record; a worker never raises for bookkeeping
            check_drop_reasons(self, pc.unique(reasons.drop_null()).to_pylist())
        return out

    def process_empty(self, batch: pa.Table) -> pa.Table:
        # Empty blocks happen on Ray; give them the output schema without calling the model.
        out = batch
        for col in self.writes:
            if col not in out.schema.names:
                out = out.append_column(col, pa.nulls(0, pa.string()))
        return out

    def declared_drop_reasons(self) -> dict[str, str]:
        """The kinds this stage may drop rows for: its class's `drop_reasons`, plus any a field names
        (a stage whose reason is configured, such as `drop_where`'s `reason`, adds it here)."""
        return dict(type(self).drop_reasons)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "reads": list(self.reads), "writes": list(self.writes), **self.model_dump()}


class FilterStage(Stage[R], Generic[R]):
    """A stage that only decides keep-or-drop: override `reasons` and return None for kept rows."""

    def reasons(self, batch: pa.Table) -> Sequence[R | tuple[R, str] | None]:
        raise NotImplementedError

    def process(self, batch: pa.Table) -> pa.Table:
        reasons = self.reasons(batch)
        if isinstance(reasons, (pa.Array, pa.ChunkedArray)):  # a class from outside that writes its own strings
            return set_drop_reason(batch, reasons)
        return self.drop(batch, reasons)


class GlobalStage(Stage[R], Generic[R]):
    """A stage that must see the whole dataset at once (dedup, sampling, clustering).

    `process_table` is the pure function that unit tests call on a small table. `run_dataset` is
    what the runner calls on Ray; the default gathers the blocks into one remote task (not the
    driver), which is right for the small tables late in a recipe. Stages that scale to millions
    of rows (exact and MinHash dedup) override it with a distributed implementation.
    """

    def process_table(self, table: pa.Table) -> pa.Table:
        raise NotImplementedError

    def process(self, batch: pa.Table) -> pa.Table:
        return self.process_table(batch)

    def run_partitions(self, ds: Any, partitions: list[Any]) -> Any:
        """What the runner calls: `ds` read from `partitions` (transforms/core/planning.Partition: Parquet row
        groups), for a stage whose tasks read the columns they need from the lake themselves; the default is
        `run_dataset(ds)`."""
        return self.run_dataset(ds)

    def run_dataset(self, ds: Any) -> Any:
        import ray

        refs = ds.to_arrow_refs()
        remote = ray.remote(**self.resources.ray_remote_args())(_run_global)
        return ray.data.from_arrow_refs([remote.remote(self, *refs)])


def _run_global(stage: GlobalStage[Any], *tables: pa.Table) -> pa.Table:
    table = pa.concat_tables(list(tables), promote_options="default") if tables else pa.table({})
    return stage(table)


def reason_kind(reason: str) -> str:
    """`empty_field:goal` -> `empty_field`: what a stage declares in `drop_reasons`."""
    return reason.split(":", 1)[0].strip()


DROP_REASONS_LOG = "PIQAFORGE_UNDECLARED_DROPS"
# Set (to 1) by the tests: an undeclared drop reason is then a StageError. A user's run never dies for one: it
# keeps the rows' reasons as they are and the stage's record in the manifest and the report carry a warning.
STRICT_DROP_REASONS = "PIQAFORGE_STRICT_DROP_REASONS"


def check_drop_reasons(stage: Any, reasons: list[str]) -> list[str]:
    """The kinds among `reasons` that the stage's class does not declare in `drop_reasons`, as one warning each
    (empty when all are declared). Bookkeeping never kills a run: outside strict mode (PIQAFORGE_STRICT_DROP_REASONS=1,
    which the tests set) they are logged and returned for the stage's record; in strict mode they raise a StageError
    naming the class, the kind and what it declares. With PIQAFORGE_UNDECLARED_DROPS=<file> they are also appended
    there (a survey of what stages give)."""
    declared = stage.declared_drop_reasons()
    undeclared = sorted({reason_kind(r) for r in reasons if r and reason_kind(r) not in declared})
    if not undeclared:
        return []
    cls = type(stage)
    if survey := os.environ.get(DROP_REASONS_LOG):
        with open(survey, "a", encoding="utf-8") as fh:
            for kind in undeclared:
                example = next(r for r in reasons if r and reason_kind(r) == kind)
                fh.write(f"{cls.__module__}:{cls.__name__}\t{stage.name}\t{kind}\t{example[:80]}\n")
    message = (f"stage '{stage.name}' dropped rows for reason(s) {undeclared} that its class "
               f"{cls.__module__}.{cls.__name__} does not declare (it declares {sorted(declared) or 'none'}): "
               f"name each in the class's reasons (a `DropReason` enum: `class {cls.__name__}(Stage[<its enum>])`), "
               f"or, for a class that writes its own strings, in `drop_reasons = {{'<kind>': '<what it means>'}}`")
    if os.environ.get(STRICT_DROP_REASONS, "") not in ("", "0"):
        raise StageError(message)
    log.warning("%s (the rows are dropped as the stage said; the run goes on)", message)
    return [f"undeclared drop reason {kind!r}: {cls.__module__}.{cls.__name__} does not declare it"
            for kind in undeclared]


# -- helpers shared by stages and the runner ------------------------------------------------------
def put_column(table: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Replace column `name` if the table has it, else append it."""
    if name in table.schema.names:
        return table.set_column(table.schema.get_field_index(name), name, values)
    return table.append_column(name, values)


def set_drop_reason(batch: pa.Table, reasons: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Merge new reasons into the batch; an earlier reason on the same row wins."""
    reasons = reasons.cast(pa.string())
    if C.DROP_REASON in batch.schema.names:
        current = batch.column(C.DROP_REASON).cast(pa.string())
        merged = pc.coalesce(current, reasons)
        return batch.set_column(batch.schema.get_field_index(C.DROP_REASON), C.DROP_REASON, merged)
    return batch.append_column(C.DROP_REASON, reasons)


def set_duplicate_of(batch: pa.Table, duplicate_of: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Record which kept row each row duplicates; an earlier dedup stage's answer on a row stands."""
    duplicate_of = duplicate_of.cast(pa.string())
    if C.DUPLICATE_OF in batch.schema.names:
        duplicate_of = pc.coalesce(batch.column(C.DUPLICATE_OF).cast(pa.string()), duplicate_of)
    return put_column(batch, C.DUPLICATE_OF, duplicate_of)


def mark_dropped(batch: pa.Table, stage_name: str) -> pa.Table:
    """Give every row a string `drop_reason`, `drop_stage` and `_status` (kept/rejected)."""
    n = batch.num_rows
    if C.DROP_REASON not in batch.schema.names:
        batch = batch.append_column(C.DROP_REASON, pa.nulls(n, pa.string()))
    reason = batch.column(C.DROP_REASON).cast(pa.string())
    batch = batch.set_column(batch.schema.get_field_index(C.DROP_REASON), C.DROP_REASON, reason)
    dropped = pc.is_valid(reason)
    stage_col = pc.if_else(dropped, pa.scalar(stage_name), pa.scalar(None, pa.string()))
    if C.DROP_STAGE in batch.schema.names:
        old = batch.column(C.DROP_STAGE).cast(pa.string())
        batch = batch.set_column(batch.schema.get_field_index(C.DROP_STAGE), C.DROP_STAGE, pc.coalesce(old, stage_col))
    else:
        batch = batch.append_column(C.DROP_STAGE, stage_col)
    status = pc.if_else(dropped, pa.scalar(C.REJECTED), pa.scalar(C.KEPT))
    if C.STATUS in batch.schema.names:
        return batch.set_column(batch.schema.get_field_index(C.STATUS), C.STATUS, status)
    return batch.append_column(C.STATUS, status)
