"""From LSH bucket keys to duplicate clusters, on integer row references; ids are read for candidates only.

A row is named by a 64-bit reference `ref = source << 32 | row` (`source`: the lake partition or block it was read
from, `row`: its position there), never by its id, until the very end. The steps, all columnar:

* `shared_buckets` keeps the (key, ref) rows of one partition's buckets with two or more members, grouped by key;
* `candidate_refs` is the set of their refs: the only rows whose ids (and, with verification, signatures) are
  read again, by the candidate-rows pass;
* `CandidateRows` holds those rows (ref, id, signature), `id_ranks` numbers them in id order (pyarrow's sort of the
  ids cast to string, byte order), `RefLookup` maps a bucket row's ref to its candidate's rank (a dense array over
  the sources' rows), and `cluster_buckets` links every bucket's member to the bucket's head (its
  member with the smallest rank, i.e. the smallest id: a star, `members - 1` edges instead of `members^2 / 2`),
  keeps the unique edges as rank pairs packed in one uint64, drops the pairs whose signatures estimate a Jaccard
  below the threshold (`verify_edges`), and runs a vectorised union-find (hook the larger root under the smaller,
  then pointer-jump) over the ranks: every cluster's root is its smallest rank, the smallest id, the row we keep.

Only the dropped rows' ids become strings again, in the duplicate map (`id -> duplicate_of`); `DuplicateLookup`
marks rows by id. The string-id version before (sorting and deduplicating id strings in every reducer, hashing
every row's id to find candidates) gave the same map; the tests compare both with a plain-Python definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.dedup.minhash_signature import estimated_jaccard

KEY = "_mh_key"
REF = "_mh_ref"
ROW_ID = "_mh_id"
PART = "_mh_part"
SIGNATURE = "_mh_signature"

ROW_BITS = 32
ROW_MASK = (1 << ROW_BITS) - 1
DUPLICATE_MAP_SCHEMA = pa.schema([pa.field("id", pa.string()), pa.field("duplicate_of", pa.string())])


@lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int, false_positive_weight: float = 0.5,
               false_negative_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimising the weighted false-positive and false-negative areas (datasketch).

    Cached: datasketch integrates numerically (~20 ms a call), and the stage asks once per batch.
    """
    from datasketch.lsh import _optimal_param

    bands, rows = _optimal_param(threshold, num_perm, false_positive_weight, false_negative_weight)
    return int(bands), int(rows)


def collision_probability(jaccard: float | np.ndarray, bands: int, rows: int) -> np.ndarray:
    """P(a pair with this Jaccard shares at least one bucket) = 1 - (1 - J^r)^b."""
    return np.asarray(1.0 - (1.0 - np.asarray(jaccard, dtype=float) ** rows) ** bands)


# -- row references ---------------------------------------------------------------------------------
def row_refs(rows: np.ndarray, source: int) -> np.ndarray:
    """`source << 32 | row` as int64 (sources up to 2^31, rows up to 2^32 a source)."""
    rows = np.asarray(rows, np.int64)
    if len(rows) and (rows.min() < 0 or rows.max() > ROW_MASK):
        raise ValueError("a row position does not fit in 32 bits: use smaller blocks or partitions")
    if not 0 <= source < 1 << 31:
        raise ValueError(f"source index {source} out of range")
    return rows | np.int64(source << ROW_BITS) if source else rows


def source_rows(refs: np.ndarray, source: int) -> np.ndarray:
    """The rows (int64, ascending) of `source` among the sorted refs `refs`."""
    lo, hi = np.searchsorted(refs, [source << ROW_BITS, (source + 1) << ROW_BITS])
    return refs[lo:hi] & np.int64(ROW_MASK)


# -- reducers -----------------------------------------------------------------------------------------
def shared_keys(keys: np.ndarray) -> np.ndarray:
    """Mask of the keys that occur more than once (numba hash pieces with the `fast` extra, else a numpy sort)."""
    from transforms.dedup import minhash_numba

    if minhash_numba.available():
        return minhash_numba.shared_keys_numba(keys)
    order = np.argsort(keys)
    same = keys[order[1:]] == keys[order[:-1]]
    shared = np.zeros(len(keys), dtype=bool)
    shared[order[1:][same]] = True
    shared[order[:-1][same]] = True
    return shared


def shared_rows(keys: np.ndarray) -> np.ndarray:
    """The rows of the keys that occur more than once, grouped: each key's rows one contiguous run.

    Every bucket must lie wholly inside `keys`: the caller partitions by key. Most keys are unique, so the
    shared ones are found from the keys alone; with the `fast` extra a numba kernel writes their rows grouped by
    key from a hash table (no sort), else they are sorted by key.
    """
    from transforms.dedup import minhash_numba

    keys = np.asarray(keys, np.uint64)
    if len(keys) < 2:
        return np.zeros(0, np.int64)
    if minhash_numba.available():
        return minhash_numba.shared_rows_numba(keys)
    rows = np.flatnonzero(shared_keys(keys))
    return rows[np.argsort(keys[rows], kind="stable")]


def shared_buckets(keys: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (key, ref) rows of the buckets with two or more members, grouped: each bucket one contiguous run
    (`shared_rows`). Numbers only."""
    keys = np.asarray(keys, np.uint64)
    rows = shared_rows(keys)
    return keys[rows], np.asarray(refs, np.int64)[rows]


def candidate_refs(refs: Sequence[np.ndarray]) -> np.ndarray:
    """The sorted unique refs of the shared buckets' rows: the rows whose ids (and signatures) are needed."""
    refs = [np.asarray(r, np.int64) for r in refs if len(r)]
    return np.unique(np.concatenate(refs)) if refs else np.zeros(0, np.int64)


# -- the cluster task ---------------------------------------------------------------------------------
class SignatureChunks:
    """Row-wise access to several signature matrices as if they were one, without copying them.

    The cluster task receives one signature table per source from the object store; concatenating
    them would hold every candidate signature twice.
    """

    def __init__(self, chunks: list[np.ndarray]):
        self.chunks = [c for c in chunks if len(c)]
        self.starts = np.cumsum([0] + [len(c) for c in self.chunks])
        self.width = self.chunks[0].shape[1] if self.chunks else 0

    @classmethod
    def of_column(cls, column: pa.ChunkedArray, num_perm: int) -> SignatureChunks:
        """One zero-copy (rows, num_perm) uint32 view per chunk of a fixed_size_binary signature column."""
        return cls([np.frombuffer(buf.buffers()[1], dtype=np.uint32)[
            buf.offset * num_perm:(buf.offset + len(buf)) * num_perm].reshape(len(buf), num_perm)
            for buf in column.chunks if len(buf)])

    def take(self, idx: np.ndarray) -> np.ndarray:
        if len(self.chunks) == 1:
            return self.chunks[0][idx]
        which = np.searchsorted(self.starts, idx, side="right") - 1
        out = np.empty((len(idx), self.width), dtype=self.chunks[0].dtype if self.chunks else np.uint32)
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(len(self.chunks) + 1))
        for c, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            if hi > lo:
                sel = order[lo:hi]
                out[sel] = self.chunks[c][idx[sel] - self.starts[c]]
        return out


def signature_column(signatures: np.ndarray) -> pa.Array:
    """A `(rows, num_perm)` uint32 matrix as a fixed_size_binary column, without a copy."""
    sig = np.ascontiguousarray(signatures, np.uint32)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(4 * sig.shape[1]), len(sig), [None, pa.py_buffer(sig)])


class CandidateRows:
    """The candidate rows' refs (sorted), ids (strings) and, when verifying, signatures, as the candidate-rows
    pass returns them (one table per source, REF / ROW_ID / SIGNATURE); read in place, never concatenated."""

    def __init__(self, refs: np.ndarray, ids: pa.Array | pa.ChunkedArray, signatures: SignatureChunks | None):
        refs = np.asarray(refs, np.int64)
        ids = ids.cast(pa.string())
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        if len(refs) > 1 and not bool((refs[1:] > refs[:-1]).all()):
            order = np.argsort(refs, kind="stable")
            refs, ids = refs[order], ids.take(pa.array(order))
            if signatures is not None:
                signatures = SignatureChunks([signatures.take(order)])
        self.refs, self.ids, self.signatures = refs, ids, signatures

    @classmethod
    def of_tables(cls, tables: Sequence[pa.Table], num_perm: int, verify: bool) -> CandidateRows:
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return cls(np.zeros(0, np.int64), pa.array([], pa.string()), None)
        table = pa.concat_tables(tables)
        refs = np.concatenate([c.to_numpy() for c in table.column(REF).chunks])
        sigs = SignatureChunks.of_column(table.column(SIGNATURE), num_perm) if verify else None
        return cls(refs, table.column(ROW_ID), sigs)

    def __len__(self) -> int:
        return len(self.refs)


def id_ranks(ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """`(rank of each row, row of each rank)`: the rows numbered in the order of their ids as strings (pyarrow's
    sort: byte order, "10" < "9"), the order in which the string-id code chose each bucket's head and each
    cluster's root. Ids must be unique (process_table checks; the runner's rows are after exact dedup)."""
    order = pc.sort_indices(ids).to_numpy().astype(np.int64, copy=False)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank, order


def star_pairs(keys: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """`star_edges` as `head << 32 | member` (uint64), sorted and unique."""
    if len(keys) < 2:
        return np.zeros(0, np.uint64)
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    heads = np.repeat(np.minimum.reduceat(ranks, starts), np.diff(np.append(starts, len(keys))))
    member = ranks != heads
    return np.unique((heads[member].astype(np.uint64) << np.uint64(ROW_BITS)) | ranks[member].astype(np.uint64))


def star_edges(keys: np.ndarray, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique candidate edges `(head rank, member rank)`, sorted: per bucket (a run of equal `keys`) its smallest
    rank to each other member. The same pair found in several bands or reducers gives one edge."""
    return unpack_pairs(star_pairs(keys, ranks))


def unpack_pairs(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (packed >> np.uint64(ROW_BITS)).astype(np.int64), (packed & np.uint64(ROW_MASK)).astype(np.int64)


def verify_edges(u: np.ndarray, v: np.ndarray, signatures: np.ndarray | SignatureChunks, threshold: float,
                 chunk_edges: int = 1 << 16) -> np.ndarray:
    """Mask of the edges `(u[i], v[i])` (signature rows) whose signatures estimate a Jaccard >= `threshold`.

    In chunks: gathering both endpoints' signatures for every edge at once costs 2 x 4 x num_perm bytes per
    edge (1 KiB at 128 permutations), which would be the cluster task's peak otherwise.
    """
    sigs = signatures if isinstance(signatures, SignatureChunks) else SignatureChunks([signatures])
    keep = np.empty(len(u), dtype=bool)
    for lo in range(0, len(u), chunk_edges):
        hi = lo + chunk_edges
        keep[lo:hi] = estimated_jaccard(sigs.take(u[lo:hi]), sigs.take(v[lo:hi])) >= threshold
    return keep


def union_find_min(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Root of every node 0..n-1 under the edges (u, v); each root is its component's smallest node.

    Vectorised union-find: hook every edge's larger root under its smaller root (parents only ever
    point to smaller nodes, so no cycles), then compress paths fully by pointer jumping; repeat
    until every edge joins one root. Rounds are few (logarithmic in practice) and each is O(edges).
    """
    parent: np.ndarray = np.arange(n, dtype=np.int64)
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    while True:
        ru, rv = parent[u], parent[v]
        split = ru != rv
        if not split.any():
            return parent
        lo, hi = np.minimum(ru[split], rv[split]), np.maximum(ru[split], rv[split])
        np.minimum.at(parent, hi, lo)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped


def sorted_search(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """`np.searchsorted(table, query)`, the queries looked up in sorted order: random 64-bit values searched as they
    come miss the cache at every step (on 2.9M crawl ids against 0.7M candidates 0.26 µs a query, 0.10 sorted)."""
    order = np.argsort(query)
    pos = np.empty(len(query), np.int64)
    pos[order] = np.searchsorted(table, query[order])
    return pos


class RefLookup:
    """A value for each ref of a sorted table of refs (the candidates: their rank), looked up many times.

    Through a dense int32 array over each source's rows up to its last candidate (4 bytes a row, one gather a
    query) when that is at most 8 bytes per expected query; else `sorted_search`, whose sort of the queries cost
    the cluster task more than anything else it did (5.4M queries at 3M rows). A ref missing from the table is
    an error."""

    def __init__(self, table: np.ndarray, values: np.ndarray, queries: int):
        self.table, self.values = table, values
        sources = table >> np.int64(ROW_BITS)
        self.n_sources = int(sources[-1]) + 1 if len(table) else 0
        ends = np.searchsorted(sources, np.arange(self.n_sources), side="right")  # past each source's last candidate
        self.extent = np.zeros(self.n_sources, np.int64)
        nonempty = ends > np.concatenate([[0], ends[:-1]]).astype(ends.dtype)
        self.extent[nonempty] = (table[ends[nonempty] - 1] & np.int64(ROW_MASK)) + 1
        self.offsets = np.concatenate([[0], np.cumsum(self.extent)]).astype(np.int64)
        self.dense: np.ndarray | None = None
        if 0 < self.offsets[-1] <= 2 * queries and len(table) < 1 << 31:
            self.dense = np.full(int(self.offsets[-1]), -1, np.int32)
            self.dense[self.offsets[sources] + (table & np.int64(ROW_MASK))] = np.arange(len(table), dtype=np.int32)

    def positions(self, refs: np.ndarray) -> np.ndarray:
        """Where each ref is in the table."""
        if not len(refs):
            return np.zeros(0, np.int64)
        missing = ValueError("a bucket row is missing from the candidate rows")
        if self.dense is None:
            pos = sorted_search(self.table, refs)
            if pos.max() >= len(self.table) or not np.array_equal(self.table[pos], refs):
                raise missing
            return pos
        src = refs >> np.int64(ROW_BITS)
        if src.min() < 0 or src.max() >= self.n_sources:
            raise missing
        row = refs & np.int64(ROW_MASK)
        if (row >= self.extent[src]).any():
            raise missing
        row += self.offsets[src]
        pos = self.dense[row]
        if pos.min() < 0:
            raise missing
        return pos

    def __call__(self, refs: np.ndarray) -> np.ndarray:
        return self.values[self.positions(refs)]


def ref_positions(refs: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The position of each ref in the sorted refs `table` (every ref must be there)."""
    return RefLookup(table, np.arange(len(table)), len(refs)).positions(refs)


def cluster_buckets(buckets: Sequence[tuple[np.ndarray, np.ndarray]], candidates: CandidateRows, threshold: float,
                    grouped: bool = True) -> pa.Table:
    """`id -> duplicate_of` (strings; every clustered row but each cluster's smallest id) from the shared buckets'
    rows, one (keys, refs) pair per reducer (each bucket a contiguous run inside one pair when `grouped`; else they
    are concatenated and sorted here), and the candidate rows. Edges are verified when `candidates` carries
    signatures. One reducer's rows at a time: the star edges of each are packed in one uint64 each."""
    buckets = [(np.asarray(k, np.uint64), np.asarray(r, np.int64)) for k, r in buckets if len(k)]
    if not buckets or len(candidates) == 0:
        return DUPLICATE_MAP_SCHEMA.empty_table()
    if not grouped:
        keys, refs = np.concatenate([b[0] for b in buckets]), np.concatenate([b[1] for b in buckets])
        order = np.argsort(keys, kind="stable")
        buckets = [(keys[order], refs[order])]
    rank, row_of_rank = id_ranks(candidates.ids)
    rank_of = RefLookup(candidates.refs, rank, sum(len(b[0]) for b in buckets))
    u, v = unpack_pairs(np.unique(np.concatenate([star_pairs(keys, rank_of(refs)) for keys, refs in buckets])))
    if candidates.signatures is not None and len(u):
        keep = verify_edges(row_of_rank[u], row_of_rank[v], candidates.signatures, threshold)
        u, v = u[keep], v[keep]
    if not len(u):
        return DUPLICATE_MAP_SCHEMA.empty_table()
    # Union-find on the ranks of the verified edges' endpoints only (numbered again, in rank order).
    nodes = np.unique(np.concatenate([u, v]))
    root = union_find_min(np.searchsorted(nodes, u), np.searchsorted(nodes, v), len(nodes))
    dropped = np.flatnonzero(root != np.arange(len(nodes)))
    ids = candidates.ids
    return pa.table({"id": ids.take(pa.array(row_of_rank[nodes[dropped]])),
                     "duplicate_of": ids.take(pa.array(row_of_rank[nodes[root[dropped]]]))},
                    schema=DUPLICATE_MAP_SCHEMA)


# -- marking --------------------------------------------------------------------------------------------
def id_hashes(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each id, column-wise (polars; stable across the processes of one environment)."""
    import polars as pl

    series = pl.from_arrow(ids.cast(pa.string()))
    assert isinstance(series, pl.Series)
    return series.hash(seed=0).to_numpy()


class DuplicateLookup:
    """Look ids up in a duplicate map without rebuilding a hash table per batch.

    The map is sorted by a 64-bit hash of its ids; a batch's ids are hashed column-wise, found by
    `searchsorted`, and a hit counts only if the id itself is equal, so a hash collision cannot
    mark a row. (Converting every batch's ids to a numpy string array cost more than the rest of
    the marking.)
    """

    def __init__(self, duplicate_map: pa.Table):
        ids = duplicate_map.column("id").cast(pa.string()).combine_chunks()
        hashes = id_hashes(ids)
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        self.ids = ids.take(pa.array(order))
        self.reps = duplicate_map.column("duplicate_of").cast(pa.string()).combine_chunks().take(pa.array(order))
        # Two map ids with one hash would need a search of the run; exact string lookup instead.
        self.hash_collision = len(self.hashes) > 1 and bool((self.hashes[1:] == self.hashes[:-1]).any())

    def __len__(self) -> int:
        return len(self.ids)

    def duplicate_of(self, ids: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The kept id for each duplicate in `ids`, null for rows that are kept."""
        if len(self.ids) == 0:
            return pa.nulls(len(ids), pa.string())
        ids = ids.cast(pa.string())
        if self.hash_collision:
            return self.reps.take(pc.index_in(ids, value_set=self.ids))
        query = id_hashes(ids)
        pos = np.minimum(sorted_search(self.hashes, query), len(self.hashes) - 1)
        maybe = np.flatnonzero(self.hashes[pos] == query)
        found = pc.equal(ids.take(pa.array(maybe)), self.ids.take(pa.array(pos[maybe]))).to_numpy(zero_copy_only=False)
        take = np.full(len(query), -1, np.int64)
        take[maybe[found]] = pos[maybe[found]]
        return self.reps.take(pa.array(take, mask=take < 0))
