"""Exact deduplication on the normalised text.

Rows with the same text form a group; the row with the smallest id is kept (deterministic
whatever the block order) and the others get `drop_reason = exact_duplicate` and
`duplicate_of = <kept id>`.

The key of a text is 128 bits: two seeded 64-bit polars hashes, computed column-wise (stable
across processes of one polars version, which is all one run needs). Rows with null text get no
key and are never grouped.

On Ray nothing is gathered in the driver, and the shuffle is plain Ray tasks (as in MinHash):

1. keys     Ray Data map over the input: (key_hi, key_lo, id) per row with text, ~40 bytes a row.
2. split    one task per key block, `num_returns = num_partitions`: rows by `key_hi % K`.
3. reduce   K tasks: each partition's groups of two or more rows -> (key, smallest id).
4. mark     Ray Data map over the input again: the repeated groups (~40 bytes per repeated text)
            are fetched once per worker process and looked up by binary search (`strategy:
            broadcast`), or hash-joined onto the rows (`strategy: join`: no per-worker table, for
            crawls with tens of millions of repeated texts).

The first version ran the grouping as a Ray Data `groupby().aggregate()` on string keys: on this
2-core machine that cost ~53 s for 1M rows (sort-shuffle start-up and scheduling), where hashing
and grouping the keys takes about a second (docs/front_half.md has the measurements).
`process_table` is the same logic on one in-memory table, for unit tests and small inputs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, set_duplicate_of

KEY_HI = "_key_hi"
KEY_LO = "_key_lo"
KEEP_ID = "_keep_id"


def text_keys(texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hi, lo, has_text): the two uint64 halves of each text's 128-bit key, and a bool mask of
    the rows whose text is not null (the keys of null rows are meaningless)."""
    s = pl.Series("t", texts.cast(pa.large_string()))
    return (s.hash(seed=0).to_numpy(), s.hash(seed=1).to_numpy(), s.is_not_null().to_numpy())


def key_rows(batch: pa.Table) -> pa.Table:
    """(key_hi, key_lo, id) of the rows with text."""
    hi, lo, has_text = text_keys(batch.column(C.TEXT))
    ids = batch.column(C.ID).cast(pa.string())
    if not has_text.all():
        hi, lo, ids = hi[has_text], lo[has_text], ids.filter(pa.array(has_text))
    return pa.table({KEY_HI: hi, KEY_LO: lo, C.ID: ids})


def repeated_groups(keys: pa.Table) -> pa.Table:
    """(key_hi, key_lo, keep_id) of every key held by two or more rows; keep_id = smallest id."""
    df = pl.from_arrow(keys)
    assert isinstance(df, pl.DataFrame)
    out = (df.group_by([KEY_HI, KEY_LO]).agg(pl.col(C.ID).cast(pl.String).min().alias(KEEP_ID), pl.len().alias("n"))
           .filter(pl.col("n") > 1).select(KEY_HI, KEY_LO, KEEP_ID))
    return out.to_arrow().cast(pa.schema([(KEY_HI, pa.uint64()), (KEY_LO, pa.uint64()), (KEEP_ID, pa.string())]))


class GroupLookup:
    """The repeated groups sorted by key, looked up by binary search (no hash table per batch)."""

    _PAIR = np.dtype([("hi", "<u8"), ("lo", "<u8")])

    def __init__(self, groups: pa.Table):
        hi = groups.column(KEY_HI).to_numpy()
        lo = groups.column(KEY_LO).to_numpy()
        order = np.lexsort((lo, hi))
        self.hi, self.lo = hi[order], lo[order]
        self.keep = groups.column(KEEP_ID).cast(pa.string()).combine_chunks().take(pa.array(order))
        # Two repeated texts whose keys share the high 64 bits (odds ~ groups^2 / 2^65): search on
        # all 128 bits then (10x slower in numpy), so the answer is exact either way.
        self.pairs: np.ndarray | None = None
        if len(self.hi) > 1 and bool((self.hi[1:] == self.hi[:-1]).any()):
            self.pairs = self._pack(self.hi, self.lo)

    @classmethod
    def _pack(cls, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        out = np.empty(len(hi), cls._PAIR)
        out["hi"], out["lo"] = hi, lo
        return out

    def keep_ids(self, texts: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The kept id of each text's group, null when the text is unique or null."""
        return self.lookup(*text_keys(texts))

    def lookup(self, hi: np.ndarray, lo: np.ndarray, has_text: np.ndarray) -> pa.Array:
        """The kept id of each key's group, null where there is none or `has_text` is False."""
        if not len(self.hi):
            return pa.nulls(len(hi), pa.string())
        pos = np.searchsorted(self.hi, hi) if self.pairs is None else np.searchsorted(self.pairs, self._pack(hi, lo))
        pos = np.minimum(pos, len(self.hi) - 1)
        found = (self.hi[pos] == hi) & (self.lo[pos] == lo) & has_text
        return pc.if_else(pa.array(found), self.keep.take(pa.array(pos)), pa.scalar(None, pa.string()))


def mark_duplicates(batch: pa.Table, keep: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Set duplicate_of and the drop reason from each row's group's kept id (null: unique text)."""
    ids = batch.column(C.ID).cast(pa.string())
    keep = keep.cast(pa.string())
    is_dup = pc.fill_null(pc.not_equal(keep, ids), False)
    batch = batch.drop_columns([c for c in (KEY_HI, KEY_LO, KEEP_ID) if c in batch.schema.names])
    batch = set_duplicate_of(batch, pc.if_else(is_dup, keep, pa.scalar(None, pa.string())))
    return ExactDedup.drop_where(batch, is_dup, ExactDrops.EXACT_DUPLICATE)


class ExactDrops(DropReason):
    EXACT_DUPLICATE = "exact_duplicate", "the same normalised text as an earlier row (duplicate_of names it)"


class ExactDedup(GlobalStage[ExactDrops]):
    name: ClassVar[str] = "exact_dedup"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = (C.DUPLICATE_OF,)

    num_partitions: int = Field(4, ge=1, description="Hash partitions of the key shuffle (and of the join).")
    strategy: Literal["broadcast", "join"] = Field(
        "broadcast", description="How rows meet their group's kept id: 'broadcast' ships the table of repeated "
        "texts (key + id, ~40 bytes per repeated text) to every worker process, which binary-searches it; "
        "'join' hash-joins it onto the rows (Ray Data join: two more shuffles, no per-worker table) for crawls "
        "with tens of millions of repeats.")
    gather_below_rows: int = Field(
        50_000, ge=0, description="Inputs with fewer rows are deduplicated in one worker task instead of by "
        "the distributed shuffle (same result, less scheduling); 0 always distributes.")

    def process_table(self, table: pa.Table) -> pa.Table:
        return mark_duplicates(table, GroupLookup(repeated_groups(key_rows(table))).keep_ids(table.column(C.TEXT)))

    def run_partitions(self, ds: Any, partitions: list[Any]) -> Any:
        """On the lake's partitions (the runner's path): each key task reads only id and text from its partition's
        Parquet row groups, instead of a block of every column from Ray Data."""
        import pyarrow.parquet as pq
        import ray

        if not partitions:
            return self.run_dataset(ds)
        self.check_columns(pq.read_schema(partitions[0].units[0][0]))
        if self.gather_below_rows and sum(p.rows for p in partitions) < self.gather_below_rows:
            return super().run_dataset(ds)
        keys = ray.remote(**self.resources.ray_remote_args())(_keys_of)
        return self._distributed(ds, [keys.remote(part) for part in partitions])

    def run_dataset(self, ds: Any) -> Any:
        self.check_columns(ds.schema())
        if self.gather_below_rows and ds.count() < self.gather_below_rows:
            # A small input is cheaper in one worker task (GlobalStage's default: gathered in a
            # task, never in the driver).
            return super().run_dataset(ds)
        # Keys per input block (batch_size=None: one key table per block, so few tasks below).
        key_refs = ds.select_columns([C.ID, C.TEXT]).map_batches(
            key_rows, batch_format="pyarrow", batch_size=None, **self.resources.ray_remote_args()).to_arrow_refs()
        return self._distributed(ds, key_refs)

    def _distributed(self, ds: Any, key_refs: list[Any]) -> Any:
        import ray

        remote = self.resources.ray_remote_args()
        batch_size = self.resources.batch_size
        k = self.num_partitions
        split = ray.remote(num_returns=k, **remote)(_split_keys)
        parts: list[Any] = [split.remote(ref, k) for ref in key_refs]
        parts = [p if k > 1 else [p] for p in parts]
        reduce = ray.remote(**remote)(_reduce_groups)
        # The driver holds object references only: B*K key slices, then K group tables.
        group_refs = [reduce.remote(*[p[i] for p in parts]) for i in range(k)]
        del parts, key_refs
        if self.strategy == "join":
            groups = ray.data.from_arrow_refs(group_refs)
            keyed = ds.map_batches(_add_keys, batch_format="pyarrow", batch_size=batch_size, **remote)
            joined = keyed.join(groups, join_type="left_outer", num_partitions=k, on=(KEY_HI, KEY_LO))
            return joined.map_batches(_finish_join, batch_format="pyarrow", batch_size=batch_size)
        return ds.map_batches(_mark_from_groups, batch_format="pyarrow", batch_size=batch_size,
                              fn_kwargs={"group_refs": group_refs}, **remote)


# Module-level functions so Ray serialises a reference to code.
def _keys_of(part: Any) -> pa.Table:
    from transforms.core.planning import read_partition_columns

    return key_rows(read_partition_columns(part, [C.ID, C.TEXT]))


def _split_keys(keys: pa.Table, k: int) -> tuple[pa.Table, ...] | pa.Table:
    part = (keys.column(KEY_HI).to_numpy() % np.uint64(k)).astype(np.int64)
    order = np.argsort(part, kind="stable")
    keys = keys.take(pa.array(order))
    bounds = np.searchsorted(part[order], np.arange(k + 1))
    out = tuple(keys.slice(int(lo), int(hi - lo)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))
    return out if k > 1 else out[0]


def _reduce_groups(*parts: pa.Table) -> pa.Table:
    return repeated_groups(pa.concat_tables(parts))


def _add_keys(batch: pa.Table) -> pa.Table:
    hi, lo, has_text = text_keys(batch.column(C.TEXT))
    # A null text gets a key no group has (hi = lo = 0 would be a real, if unlikely, key: mask instead).
    valid = pa.array(has_text)
    return (batch.append_column(KEY_HI, pc.if_else(valid, pa.array(hi), pa.scalar(None, pa.uint64())))
            .append_column(KEY_LO, pc.if_else(valid, pa.array(lo), pa.scalar(None, pa.uint64()))))


def _finish_join(batch: pa.Table) -> pa.Table:
    if KEEP_ID not in batch.schema.names:  # an empty block from the join
        batch = batch.append_column(KEEP_ID, pa.nulls(batch.num_rows, pa.string()))
    return mark_duplicates(batch, batch.column(KEEP_ID))


# Per worker process: the repeated-groups lookup, built once per run rather than once per batch.
_LOOKUP_CACHE: dict[str, GroupLookup] = {}


def _mark_from_groups(batch: pa.Table, group_refs: list[Any]) -> pa.Table:
    import ray

    key = ",".join(ref.hex() for ref in group_refs)
    if key not in _LOOKUP_CACHE:
        _LOOKUP_CACHE.clear()
        tables = [t for t in ray.get(group_refs) if t.num_rows]
        _LOOKUP_CACHE[key] = GroupLookup(pa.concat_tables(tables) if tables else repeated_groups(
            pa.table({KEY_HI: pa.array([], pa.uint64()), KEY_LO: pa.array([], pa.uint64()),
                      C.ID: pa.array([], pa.string())})))
    return mark_duplicates(batch, _LOOKUP_CACHE[key].keep_ids(batch.column(C.TEXT)))
