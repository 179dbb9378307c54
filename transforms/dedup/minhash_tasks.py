"""The Ray tasks of MinHashDedup's distributed path (transforms/dedup/minhash.py `_distributed`): band rows split
per reducer, the reducers' shared buckets, the candidate refs and each source's candidate rows, clustering and
marking.

Everything between the map tasks and the cluster task is numbers: a band row is (key uint64, row uint32) in the
shuffle, its source (a lake partition or a block, by its index in the stage's list) said once per map output, and
from the reducers on a row is `ref = source << 32 | row` (int64). Every byte of the shuffle is written into the
object store once and mapped by a reducer once, page by page: 12 bytes a band row instead of 16 saves a quarter of
those page faults (on this VM a fresh page costs microseconds). A source is read the same way twice
(`read_partition_columns` of the same row groups, or the same block in the object store), so the candidate-rows pass
finds the rows by position.

Module-level functions so Ray serialises a reference to code, plus the stage's fields; the duplicate map is
fetched and indexed once per marking worker process.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from transforms.core import columns as C
from transforms.core.planning import read_partition_columns
from transforms.dedup.minhash_cluster import (
    KEY,
    REF,
    ROW_BITS,
    ROW_MASK,
    DuplicateLookup,
    candidate_refs,
    shared_buckets,
    shared_rows,
    source_rows,
)

Buckets = tuple[np.ndarray, np.ndarray]  # (keys uint64, refs int64): a reducer's output
BandPart = tuple[np.ndarray, np.ndarray, int]  # (keys uint64, rows uint32, source): a map task's band rows for a reducer
# A map task's output, one object: (keys in reducer order, their rows, the K + 1 bounds of each reducer's slice, source)
BandRows = tuple[np.ndarray, np.ndarray, np.ndarray, int]


class MinHashDedup(Protocol):
    """What these tasks use of transforms/dedup/minhash.py's stage (a protocol: that module imports this one)."""

    shuffle_partitions: int

    def band_rows(self, batch: pa.Table, source: int = 0) -> pa.Table: ...
    def content_band_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]: ...
    def candidate_rows(self, batch: pa.Table, rows: np.ndarray, source: int = 0) -> pa.Table: ...
    def cluster(self, buckets: list[Buckets], candidate_rows: list[pa.Table], grouped: bool = True) -> pa.Table: ...
    def mark(self, batch: pa.Table, lookup: DuplicateLookup) -> pa.Table: ...


def split_by_partition(keys: np.ndarray, text_rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(texts, bands)` keys flattened in reducer order (`key % k`, stable), each key's row (or ref), and the
    reducers' `k + 1` bounds: one counting sort in numba (the `fast` extra), else a stable argsort and two gathers."""
    from transforms.dedup import minhash_numba

    if minhash_numba.available():
        return minhash_numba.split_by_partition_numba(keys, text_rows, k)
    flat = keys.ravel()
    # A partition number of 16 bits or less lets numpy's stable argsort run as a radix sort (~4x faster than int32).
    part = (flat % np.uint64(k)).astype(np.uint16 if k <= 1 << 16 else np.uint32)
    order = np.argsort(part, kind="stable")
    rows = np.repeat(text_rows, keys.shape[1] if keys.ndim == 2 else 1)
    return flat[order], rows[order], np.searchsorted(part[order], np.arange(k + 1))


def _band_partitions(block: pa.Table, stage: MinHashDedup, source: int) -> BandRows:
    """The block's band rows, split by `key % shuffle_partitions`: keys and rows in reducer order and each reducer's
    bounds, as one object (on one node: each object costs the object store and the raylet a create, a seal and a
    release, and a reducer maps only the pages of its own slice). No id is read: a row is its position in the
    block."""
    keys, rows = stage.content_band_keys(block)
    if len(rows) and rows[-1] > ROW_MASK:
        raise ValueError("a source of more than 2^32 rows: use smaller blocks or partitions")
    keys, rows, bounds = split_by_partition(keys, rows.astype(np.uint32), stage.shuffle_partitions)
    return keys, rows, bounds, source


def _band_partitions_of(part: Any, stage: MinHashDedup, source: int) -> BandRows:
    """`_band_partitions` of a lake partition's text, read in this task (no block in the object store)."""
    return _band_partitions(read_partition_columns(part, [C.TEXT]), stage, source)


def _band_parts(block: pa.Table, stage: MinHashDedup, source: int) -> tuple[BandPart, ...] | BandPart:
    """`_band_partitions` as one object per reducer (several nodes: a reducer elsewhere fetches whole objects, so
    one per map task would send every reducer's slice to every node)."""
    band_rows = _band_partitions(block, stage, source)
    out = tuple(band_part(band_rows, i) for i in range(stage.shuffle_partitions))
    return out if len(out) > 1 else out[0]


def _band_parts_of(part: Any, stage: MinHashDedup, source: int) -> tuple[BandPart, ...] | BandPart:
    return _band_parts(read_partition_columns(part, [C.TEXT]), stage, source)


def band_part(band_rows: BandRows | BandPart, reducer: int) -> BandPart:
    """Reducer `reducer`'s slice of a map task's band rows (views: a reducer maps only its own pages); a per-reducer
    output is its own slice already."""
    if len(band_rows) == 3:
        return band_rows  # type: ignore[return-value]
    keys, rows, bounds, source = band_rows  # type: ignore[misc]
    lo, hi = int(bounds[reducer]), int(bounds[reducer + 1])
    return keys[lo:hi], rows[lo:hi], source


def _band_table(block: pa.Table, stage: MinHashDedup, source: int) -> pa.Table:
    """The block's band rows as a table (key, partition, ref): the `ray_data` shuffle's input."""
    return stage.band_rows(block, source)


def _bucket_arrays(part: Buckets | pa.Table) -> Buckets:
    if isinstance(part, pa.Table):
        return (part.column(KEY).to_numpy(), part.column(REF).to_numpy())
    return part


def _reduce_buckets(reducer: int, *band_rows: BandRows | BandPart) -> Buckets:
    """One reducer: the rows of its buckets with two or more members, each bucket contiguous, as (key, ref)."""
    return shared_bucket_refs([band_part(b, reducer) for b in band_rows])


def shared_bucket_refs(parts: list[BandPart]) -> Buckets:
    """The shared buckets' (key, ref) rows of one reducer's band rows, each bucket contiguous."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    keys = np.concatenate([p[0] for p in parts])
    picked = shared_rows(keys)
    # refs for the shared rows only: the row within its part, the source of the part it came from
    starts = np.cumsum([0] + [len(p[0]) for p in parts])
    part = np.searchsorted(starts, picked, side="right") - 1
    rows = np.concatenate([p[1] for p in parts])[picked].astype(np.int64)
    sources = np.array([p[2] for p in parts], np.int64)[part]
    return keys[picked], (sources << np.int64(ROW_BITS)) | rows


def _bucket_table(group: pa.Table) -> pa.Table:
    """`_reduce_buckets` of one Ray Data group (one partition's band rows), as a table."""
    keys, refs = shared_buckets(group.column(KEY).to_numpy(), group.column(REF).to_numpy())
    return pa.table({KEY: pa.array(keys, pa.uint64()), REF: pa.array(refs, pa.int64())})


def _candidates(*buckets: Buckets | pa.Table) -> np.ndarray:
    """The candidate refs (every ref in a shared bucket), sorted: one object that each candidate-rows task reads its
    own source's range of (`source_rows`), rather than one object per source."""
    return candidate_refs([_bucket_arrays(b)[1] for b in buckets])


def _candidate_rows(block: pa.Table, stage: MinHashDedup, source: int, refs: np.ndarray) -> pa.Table:
    return stage.candidate_rows(block, source_rows(refs, source), source)


def _candidate_rows_of(part: Any, stage: MinHashDedup, source: int, refs: np.ndarray) -> pa.Table:
    """`_candidate_rows` of a lake partition, read in this task; a partition without candidates is not read."""
    rows = source_rows(refs, source)
    if not len(rows):
        return stage.candidate_rows(pa.table({}), rows, source)
    return stage.candidate_rows(read_partition_columns(part, [C.ID, C.TEXT]), rows, source)


def _cluster(stage: MinHashDedup, n_buckets: int, grouped: bool, *parts: Any) -> tuple[pa.Table, int]:
    """The duplicate map and its length (two returns: the driver fetches the count alone, with no task of its own)."""
    duplicates = stage.cluster([_bucket_arrays(b) for b in parts[:n_buckets]], list(parts[n_buckets:]), grouped)
    return duplicates, duplicates.num_rows


_LOOKUPS: dict[str, DuplicateLookup] = {}


def _lookup(ref: Any) -> DuplicateLookup:
    import ray

    # Fetched and indexed once per worker process, not once per batch.
    key = ref.hex()
    if key not in _LOOKUPS:
        if len(_LOOKUPS) > 4:
            _LOOKUPS.clear()
        _LOOKUPS[key] = DuplicateLookup(ray.get(ref))
    return _LOOKUPS[key]


def _mark(batch: pa.Table, stage: MinHashDedup, lookup_ref: list[Any]) -> pa.Table:
    return stage.mark(batch, _lookup(lookup_ref[0]))
