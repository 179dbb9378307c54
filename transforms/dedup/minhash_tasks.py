"""The Ray tasks of MinHashDedup's distributed path (transforms/dedup/minhash.py `run_dataset`): band rows
split per reducer, edge reduction, the candidate set, clustering, signature rows and marking.

Module-level functions so Ray serialises a reference to code, plus the stage's fields; each lookup a task
needs is fetched and indexed once per worker process.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from transforms.core import columns as C
from transforms.core.planning import read_partition_columns
from transforms.dedup.minhash_cluster import (
    DST,
    KEY,
    ROW_ID,
    SRC,
    CandidateSet,
    DuplicateLookup,
    bucket_edges,
)


class MinHashDedup(Protocol):
    """What these tasks use of transforms/dedup/minhash.py's stage (a protocol: that module imports this one)."""

    shuffle_partitions: int

    def band_rows(self, batch: pa.Table) -> pa.Table: ...
    def bucket_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]: ...
    def content_band_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]: ...
    def signature_rows(self, batch: pa.Table, candidates: CandidateSet) -> pa.Table: ...
    def cluster(self, edges: pa.Table, signature_rows: pa.Table | None) -> pa.Table: ...
    def mark(self, batch: pa.Table, lookup: DuplicateLookup) -> pa.Table: ...

def _band_rows(batch: pa.Table, stage: MinHashDedup) -> pa.Table:
    return stage.band_rows(batch)


def _edges(group: pa.Table) -> pa.Table:
    return bucket_edges(group)


def split_by_partition(keys: np.ndarray, text_rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(texts, bands)` keys flattened in reducer order (`key % k`, stable), each key's row, and the reducers'
    `k + 1` bounds: one counting sort in numba (the `fast` extra), else a stable argsort and two gathers."""
    from transforms.dedup import minhash_numba

    if minhash_numba.available():
        return minhash_numba.split_by_partition_numba(keys, text_rows, k)
    flat = keys.ravel()
    # A partition number of 16 bits or less lets numpy's stable argsort run as a radix sort (~4x faster than int32).
    part = (flat % np.uint64(k)).astype(np.uint16 if k <= 1 << 16 else np.uint32)
    order = np.argsort(part, kind="stable")
    rows = np.repeat(text_rows, keys.shape[1] if keys.ndim == 2 else 1)
    return flat[order], rows[order], np.searchsorted(part[order], np.arange(k + 1))


def _band_partitions(block: pa.Table, stage: MinHashDedup) -> tuple[pa.Table, ...] | pa.Table:
    """The block's band rows (key, id), split by `key % shuffle_partitions` into one table per reducer."""
    keys, rows = stage.content_band_keys(block)
    k = stage.shuffle_partitions
    keys, rows, bounds = split_by_partition(keys, rows, k)
    # the ids are gathered once, in partition order
    bands = pa.table({KEY: pa.array(keys), ROW_ID: _string_ids(block).take(pa.array(rows))})
    out = tuple(bands.slice(int(lo), int(hi - lo)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))
    return out if len(out) > 1 else out[0]


def _band_partitions_of(part: Any, stage: MinHashDedup) -> tuple[pa.Table, ...] | pa.Table:
    """`_band_partitions` of a lake partition's id and text, read in this task (no block in the object store)."""
    return _band_partitions(read_partition_columns(part, [C.ID, C.TEXT]), stage)


def _signature_rows_of(part: Any, stage: MinHashDedup, lookup_ref: list[Any]) -> pa.Table:
    return _signature_rows(read_partition_columns(part, [C.ID, C.TEXT]), stage, lookup_ref)


def _string_ids(batch: pa.Table) -> pa.Array:
    ids = batch.column(C.ID)
    ids = ids.combine_chunks() if ids.num_chunks != 1 else ids.chunk(0)
    return ids if pa.types.is_string(ids.type) else ids.cast(pa.string())


def _reduce_edges(*parts: pa.Table) -> pa.Table:
    return bucket_edges(pa.concat_tables(parts))


def _concat(tables: tuple[pa.Table, ...]) -> pa.Table | None:
    tables = tuple(t for t in tables if t.num_rows)
    return pa.concat_tables(tables) if tables else None


def _candidates(*edge_tables: pa.Table) -> np.ndarray:
    """The candidate set every signature task filters its block with, as 8-byte id hashes."""
    edges = _concat(edge_tables)
    return CandidateSet.of_edges(edges).hashes if edges is not None else np.zeros(0, dtype=np.uint64)


def _cluster(stage: MinHashDedup, n_edge_tables: int, *tables: pa.Table) -> tuple[pa.Table, int]:
    """The duplicate map and its length (two returns: the driver fetches the count alone, with no task of its own)."""
    edges = _concat(tables[:n_edge_tables])
    if edges is None:
        edges = pa.table({SRC: pa.array([], pa.string()), DST: pa.array([], pa.string())})
    duplicates = stage.cluster(edges, None if edges.num_rows == 0 else _concat(tables[n_edge_tables:]))
    return duplicates, duplicates.num_rows


_LOOKUPS: dict[str, CandidateSet | DuplicateLookup] = {}


def _lookup(ref: Any) -> CandidateSet | DuplicateLookup:
    import ray

    # Fetched and indexed once per worker process, not once per batch.
    key = ref.hex()
    if key not in _LOOKUPS:
        if len(_LOOKUPS) > 4:
            _LOOKUPS.clear()
        value = ray.get(ref)
        _LOOKUPS[key] = CandidateSet(value) if isinstance(value, np.ndarray) else DuplicateLookup(value)
    return _LOOKUPS[key]


def _signature_rows(batch: pa.Table, stage: MinHashDedup, lookup_ref: list[Any]) -> pa.Table:
    candidates = _lookup(lookup_ref[0])
    assert isinstance(candidates, CandidateSet)
    return stage.signature_rows(batch, candidates)


def _mark(batch: pa.Table, stage: MinHashDedup, lookup_ref: list[Any]) -> pa.Table:
    lookup = _lookup(lookup_ref[0])
    assert isinstance(lookup, DuplicateLookup)
    return stage.mark(batch, lookup)
