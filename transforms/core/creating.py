"""Stages that create rows: sources, expand stages and aggregations.

A filter maps a batch to the same rows in the same order. A creating stage makes new rows, and the
runner accounts for them with one law for every stage of every job (docs/stages.md):

    rows_in + rows_created = rows_kept + sum(rows_dropped) + rows_consumed

* `SourceStage`: rows from nothing (a crawl, request rows `prompt × model × chunk`); in = 0.
* `ExpandStage`: each input row yields 0..N children that carry its id in `parent_id`. A parent with
  children is *consumed* (it lives on in them); a parent with none is dropped with `empty_reason`.
* `AggregateStage` (global): groups of rows become one row per group; every member is consumed.

What a creating stage returns to the runner is one table with a `_role` per row: `child` (a new
row; kept, or dropped with a reason), `input` (an input row dropped whole) and `consumed` (an input
row that became children; only its id and lineage are written, to `lineage/`). `_src` is the index
of the input row each output row comes from, so the runner can carry its partition bookkeeping.
The lineage table (`parent_id`, `n_children`, `child_ids`) is what `piqaforge lineage` walks.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pydantic import Field

from transforms.core import columns as C
from transforms.core.stage import GlobalStage, R, Stage, StageError, mark_dropped, put_column, set_drop_reason

# Written by a creating stage for the runner only (never stored in the lake's data files).
ROLE = "_role"
SRC = "_src"
CHILD, INPUT, CONSUMED = "child", "input", "consumed"
LINEAGE_SCHEMA = pa.schema([(C.PARENT_ID, pa.string()), ("n_children", pa.int64()),
                            ("child_ids", pa.list_(pa.string()))])


def child_ids(parent_ids: pa.Array | pa.ChunkedArray, ordinals: np.ndarray, stage: str) -> pa.Array:
    """Deterministic ids: the same parent, stage and ordinal always give the same child id, so a
    resumed or repeated run makes the very same rows (ids are 16 hex digits of xxh3-64)."""
    parents = parent_ids.to_pylist()
    return pa.array([xxhash.xxh3_64_hexdigest(f"{p}\x1f{stage}\x1f{int(k)}".encode()) for p, k in
                     zip(parents, ordinals, strict=True)], pa.string())


def ordinal_within(groups: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements share its group (0, 1, 2 ... per group)."""
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    starts = np.r_[0, np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(groups)]))
    out = np.empty(len(groups), dtype=np.int64)
    out[order] = np.arange(len(groups)) - run_start
    return out


class CreatingStage(Stage[R], Generic[R]):
    """Marker base: the runner writes `lineage/` and counts created/consumed rows for these."""

    creates: ClassVar[bool] = True


class SourceStage(CreatingStage[R], Generic[R]):
    """Rows from nothing: `read()` returns a Ray Dataset (or `rows()` a table for small sources).

    Unreadable records are children with a `drop_reason` (a bad JSON line, a row without text):
    every record the source saw is born here and either kept or dropped.
    """

    name: ClassVar[str] = "source"

    def rows(self) -> pa.Table:
        """The source's rows as one table; small sources (request rows) override only this."""
        raise NotImplementedError

    def read(self) -> Any:
        import ray

        return ray.data.from_arrow(self.rows())

    def fingerprints(self) -> list[dict[str, Any]]:
        """Content hashes of the files the source reads (resume is keyed on them)."""
        return []

    def process(self, batch: pa.Table) -> pa.Table:
        raise StageError(f"source '{self.name}' has no input rows to process")


class ExpandStage(CreatingStage[R], Generic[R]):
    """Each input row yields 0..N children (`expand`), which carry the parent's id in `parent_id`.

    `expand(batch)` returns the children with an int `_parent` column (the parent's row index in
    `batch`); children may carry a `drop_reason` (e.g. an invalid item in an otherwise good reply).
    Unless the stage writes `id`, children get deterministic ids from (parent id, stage, ordinal).
    With `inherit_columns`, a child gets every parent column it does not write itself.
    """

    empty_reason: ClassVar[str] = "no_children"
    drop_reasons: ClassVar[dict[str, str]] = {"no_children": "the row yielded no children"}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        declare_empty_reason(cls, "the row yielded no children")

    inherit_columns: bool = Field(True, description="Copy the parent's columns onto children that lack them.")

    def expand(self, batch: pa.Table) -> pa.Table:
        raise NotImplementedError

    def __call__(self, batch: pa.Table) -> pa.Table:
        if C.ID not in batch.schema.names:
            raise StageError(f"expand stage '{self.name}' needs an `id` column to name its children's parents")
        batch = self.prepare(batch)
        n = batch.num_rows
        children = self.expand(batch) if n else None
        if children is None or children.num_rows == 0:
            parent_idx = np.zeros(0, dtype=np.int64)
            children = None
        else:
            if "_parent" not in children.schema.names:
                raise StageError(f"expand stage '{self.name}' returned children without a `_parent` column")
            parent_idx = children.column("_parent").to_numpy().astype(np.int64)
            if len(parent_idx) and (parent_idx.min() < 0 or parent_idx.max() >= n):
                raise StageError(f"expand stage '{self.name}' named a parent outside its batch of {n} rows")
        return assemble_expansion(batch, children, parent_idx, self.name, self.empty_reason,
                                  self.inherit_columns, list(self.writes))


def assemble_expansion(batch: pa.Table, children: pa.Table | None, parent_idx: np.ndarray, stage: str,
                       empty_reason: str, inherit: bool, writes: list[str]) -> pa.Table:
    """Children + dropped parents + consumed parents, in one table with `_role` and `_src`."""
    n = batch.num_rows
    counts = np.bincount(parent_idx, minlength=n) if n else np.zeros(0, dtype=np.int64)
    parent_ids = batch.column(C.ID).cast(pa.string())
    parts: list[pa.Table] = []
    if children is not None:
        children = children.drop_columns(["_parent"])
        missing = [c for c in writes if c not in children.schema.names]
        if missing:
            raise StageError(f"stage '{stage}' promised column(s) {missing} but its children lack them")
        take = pa.array(parent_idx)
        my_parents = parent_ids.take(take)
        if C.ID not in children.schema.names:
            children = children.append_column(C.ID, child_ids(my_parents, ordinal_within(parent_idx), stage))
        children = put_column(children, C.PARENT_ID, my_parents)
        if inherit:
            skip = {*children.schema.names, C.DROP_REASON, C.DROP_STAGE, C.STATUS, C.DUPLICATE_OF, "_born"}
            for name in batch.schema.names:
                if name not in skip:
                    children = children.append_column(name, batch.column(name).take(take))
        children = mark_dropped(children, stage)
        children = children.append_column(ROLE, pa.array([CHILD] * children.num_rows, pa.string()))
        parts.append(children.append_column(SRC, take.cast(pa.int64())))
    empty = np.flatnonzero(counts == 0)
    if len(empty):
        dropped = batch.take(pa.array(empty))
        reasons = pa.array([str(empty_reason)] * len(empty), pa.string())
        dropped = mark_dropped(set_drop_reason(dropped, reasons), stage)
        dropped = dropped.append_column(ROLE, pa.array([INPUT] * len(empty), pa.string()))
        parts.append(dropped.append_column(SRC, pa.array(empty, pa.int64())))
    full = np.flatnonzero(counts > 0)
    if len(full):
        parts.append(consumed_rows(parent_ids.take(pa.array(full)), counts[full],
                                   _group_children(parts[0], parent_idx, full) if children is not None else None,
                                   full))
    if not parts:
        return pa.table({ROLE: pa.array([], pa.string()), SRC: pa.array([], pa.int64())})
    return pa.concat_tables(parts, promote_options="permissive")


def _group_children(children: pa.Table, parent_idx: np.ndarray, full: np.ndarray) -> list[list[str]]:
    ids = children.column(C.ID).to_pylist()
    grouped: dict[int, list[str]] = {int(p): [] for p in full}
    for p, cid in zip(parent_idx.tolist(), ids, strict=True):
        grouped[p].append(cid)
    return [grouped[int(p)] for p in full]


def consumed_rows(parent_ids: pa.Array | pa.ChunkedArray, n_children: np.ndarray,
                  child_id_lists: list[list[str]] | None, src: np.ndarray) -> pa.Table:
    """The rows that stand for consumed parents in a stage's output (they go to `lineage/`)."""
    k = len(n_children)
    return pa.table({
        C.ID: parent_ids.cast(pa.string()),
        C.PARENT_ID: parent_ids.cast(pa.string()),
        "n_children": pa.array(n_children, pa.int64()),
        "child_ids": pa.array(child_id_lists if child_id_lists is not None else [[] for _ in range(k)],
                              pa.list_(pa.string())),
        C.STATUS: pa.array([CONSUMED] * k, pa.string()),
        ROLE: pa.array([CONSUMED] * k, pa.string()),
        SRC: pa.array(src, pa.int64()),
    })


class AggregateStage(GlobalStage[R], CreatingStage[R], Generic[R]):
    """Groups of rows become one row per group (e.g. one row per cluster, for naming it).

    `aggregate(table)` returns the group rows with a list column `_members` (input row indices of
    each group). Members are consumed; input rows in no group are dropped with `empty_reason`.
    """

    empty_reason: ClassVar[str] = "not_in_any_group"
    drop_reasons: ClassVar[dict[str, str]] = {"not_in_any_group": "the row belongs to no group"}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        declare_empty_reason(cls, "the row belongs to no group")

    def aggregate(self, table: pa.Table) -> pa.Table:
        raise NotImplementedError

    def process_table(self, table: pa.Table) -> pa.Table:
        return self(table)

    def __call__(self, batch: pa.Table) -> pa.Table:
        batch = self.prepare(batch)
        n = batch.num_rows
        groups = self.aggregate(batch) if n else pa.table({"_members": pa.array([], pa.list_(pa.int64()))})
        members = groups.column("_members").to_pylist()
        groups = groups.drop_columns(["_members"])
        seen = np.zeros(n, dtype=np.int64)
        for m in members:
            for i in m:
                seen[i] += 1
        if (seen > 1).any():
            raise StageError(f"aggregate stage '{self.name}' put a row in more than one group")
        parent_ids = batch.column(C.ID).cast(pa.string())
        if C.ID not in groups.schema.names:
            firsts = pa.array([parent_ids[m[0]].as_py() if m else "" for m in members], pa.string())
            groups = groups.append_column(C.ID, child_ids(firsts, np.zeros(len(members), dtype=np.int64), self.name))
        gids = groups.column(C.ID).to_pylist()
        groups = groups.append_column(C.PARENT_ID, pa.nulls(groups.num_rows, pa.string()))
        groups = mark_dropped(groups, self.name)
        groups = groups.append_column(ROLE, pa.array([CHILD] * groups.num_rows, pa.string()))
        groups = groups.append_column(SRC, pa.nulls(groups.num_rows, pa.int64()))
        parts = [groups]
        member_of = np.full(n, -1, dtype=np.int64)
        for g, m in enumerate(members):
            member_of[m] = g
        empty = np.flatnonzero(member_of < 0)
        if len(empty):
            dropped = batch.take(pa.array(empty))
            reasons = pa.array([str(self.empty_reason)] * len(empty), pa.string())
            dropped = mark_dropped(set_drop_reason(dropped, reasons), self.name)
            dropped = dropped.append_column(ROLE, pa.array([INPUT] * len(empty), pa.string()))
            parts.append(dropped.append_column(SRC, pa.array(empty, pa.int64())))
        full = np.flatnonzero(member_of >= 0)
        if len(full):
            parts.append(consumed_rows(parent_ids.take(pa.array(full)), np.ones(len(full), dtype=np.int64),
                                       [[gids[member_of[i]]] for i in full], full))
        return pa.concat_tables(parts, promote_options="permissive")


def is_creating(stage: Stage[Any]) -> bool:
    return bool(getattr(stage, "creates", False))


def role_counts(table: pa.Table) -> dict[str, int]:
    if ROLE not in table.schema.names:
        return {}
    return {str(k): int(v) for k, v in zip(*[a.to_pylist() for a in pc.value_counts(table.column(ROLE)).flatten()],
                                            strict=True)}


def declare_empty_reason(cls: Any, meaning: str) -> None:
    """A creating stage's `empty_reason` is one of its drop reasons, whatever its subclass calls it: a member of
    its reasons' enum (else the class is refused when it is made), or, for a class that declares its reasons by
    hand, added to its `drop_reasons`."""
    if cls.__pydantic_generic_metadata__["origin"] is not None:
        return  # `ExpandStage[ItsDrops]`, made on the way to the class that sets its empty_reason
    if cls.reason_type is not None:
        if str(cls.empty_reason) not in cls.reason_type.meanings():
            raise TypeError(f"{cls.__module__}.{cls.__name__}: its empty_reason {str(cls.empty_reason)!r} is not a "
                            f"member of its reasons {cls.reason_type.__name__}")
        return
    inherited = {getattr(b, "empty_reason", None) for b in cls.__mro__[1:]} - {cls.empty_reason}
    own = cls.__dict__.get("drop_reasons", {})
    kept = {k: v for k, v in cls.drop_reasons.items() if k in own or k not in inherited}
    cls.drop_reasons = {**kept, cls.empty_reason: kept.get(cls.empty_reason, meaning)}
