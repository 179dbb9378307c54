"""From LSH bucket keys to duplicate clusters: candidate edges, optional verification, union-find.

All three steps are columnar. `bucket_edges` sorts one partition of (key, id) rows and links every
member of a bucket with two or more members to the bucket's smallest id (a star: enough for
connectivity, and `members - 1` edges instead of `members^2 / 2`); `verify_edges` drops candidate
pairs whose signatures disagree. `cluster_duplicates` runs a
vectorised union-find (hook the larger root under the smaller, then pointer-jump) over the few
edges, so every cluster's root is its smallest id, which is the row we keep. Verification compares
full signatures of the edge endpoints only, so signatures never travel through the shuffle.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.dedup.minhash_signature import estimated_jaccard

KEY = "_mh_key"
ROW_ID = "_mh_id"
PART = "_mh_part"
SRC = "src"
DST = "dst"

EDGE_SCHEMA = pa.schema([pa.field(SRC, pa.string()), pa.field(DST, pa.string())])
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


def bucket_edges(rows: pa.Table) -> pa.Table:
    """Candidate edges (src = smallest id of the bucket, dst = another member) of one partition.

    `rows` has KEY (uint64) and ROW_ID (string). Every bucket must lie wholly inside `rows`: the
    caller partitions by KEY. The same pair found in several bands gives one edge.
    """
    if rows.num_rows < 2:
        return EDGE_SCHEMA.empty_table()
    # Most keys are unique: find the shared ones from the keys alone, and sort only those rows by
    # (key, id); string sorting of every row was the slowest step.
    shared = np.flatnonzero(shared_keys(rows.column(KEY).to_numpy()))
    if not len(shared):
        return EDGE_SCHEMA.empty_table()
    # one contiguous array per column first: Arrow's take on a column of many chunks (one per map task) resolves the
    # chunk of every index, and was the reducers' second-largest cost
    rows = rows.select([KEY, ROW_ID]).combine_chunks().take(pa.array(shared))
    rows = rows.sort_by([(KEY, "ascending"), (ROW_ID, "ascending")])
    keys = rows.column(KEY).to_numpy()
    starts_here = np.empty(len(keys), dtype=bool)
    starts_here[0] = True
    np.not_equal(keys[1:], keys[:-1], out=starts_here[1:])
    # Index of each row's bucket head (the bucket's smallest id, thanks to the sort).
    head = np.maximum.accumulate(np.where(starts_here, np.arange(len(keys)), 0))
    member = np.flatnonzero(~starts_here)
    ids = rows.column(ROW_ID)
    edges = pa.table({SRC: ids.take(pa.array(head[member])).cast(pa.string()),
                      DST: ids.take(pa.array(member)).cast(pa.string())}, schema=EDGE_SCHEMA)
    return unique_edges(edges)


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


def unique_edges(edges: pa.Table) -> pa.Table:
    if edges.num_rows < 2:
        return edges
    return edges.group_by([SRC, DST], use_threads=False).aggregate([]).select([SRC, DST])


class SignatureChunks:
    """Row-wise access to several signature matrices as if they were one, without copying them.

    The cluster task receives one signature table per block from the object store; concatenating
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


def verify_edges(edges: pa.Table, ids: pa.Array, signatures: np.ndarray | SignatureChunks, threshold: float,
                 chunk_edges: int = 1 << 16) -> pa.Table:
    """Keep the edges whose two signatures estimate a Jaccard similarity >= `threshold`.

    `ids[i]` is the id of signature row `i`; every edge endpoint must be among `ids`.
    """
    if edges.num_rows == 0:
        return edges
    sigs = signatures if isinstance(signatures, SignatureChunks) else SignatureChunks([signatures])
    ids = ids.cast(pa.string())
    src = pc.index_in(edges.column(SRC), value_set=ids).to_numpy(zero_copy_only=False)
    dst = pc.index_in(edges.column(DST), value_set=ids).to_numpy(zero_copy_only=False)
    # Compare in chunks: gathering both endpoints' signatures for every edge at once costs
    # 2 x 4 x num_perm bytes per edge (1 KiB at 128 permutations), which is the task's peak otherwise.
    keep = np.empty(len(src), dtype=bool)
    for lo in range(0, len(src), chunk_edges):
        hi = lo + chunk_edges
        keep[lo:hi] = estimated_jaccard(sigs.take(src[lo:hi]), sigs.take(dst[lo:hi])) >= threshold
    return edges.filter(pa.array(keep))


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


def cluster_duplicates(edges: pa.Table) -> pa.Table:
    """`id -> duplicate_of` for every clustered row except each cluster's kept (smallest) id.

    Only ids that appear in an edge take part, so this is small even for a huge dataset.
    """
    if edges.num_rows == 0:
        return DUPLICATE_MAP_SCHEMA.empty_table()
    src, dst = edges.column(SRC).combine_chunks(), edges.column(DST).combine_chunks()
    nodes = pc.unique(pa.concat_arrays([src, dst]))
    nodes = nodes.take(pc.sort_indices(nodes))  # node number order = id order: the root is the smallest id
    u = pc.index_in(src, value_set=nodes).to_numpy()
    v = pc.index_in(dst, value_set=nodes).to_numpy()
    root = union_find_min(u, v, len(nodes))
    dropped = np.flatnonzero(root != np.arange(len(nodes)))
    return pa.table({"id": nodes.take(pa.array(dropped)), "duplicate_of": nodes.take(pa.array(root[dropped]))},
                    schema=DUPLICATE_MAP_SCHEMA)


def id_hashes(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each id, column-wise (polars; stable across the processes of one environment)."""
    import polars as pl

    series = pl.from_arrow(ids.cast(pa.string()))
    assert isinstance(series, pl.Series)
    return series.hash(seed=0).to_numpy()


def sorted_search(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """`np.searchsorted(table, query)`, the queries looked up in sorted order: random 64-bit hashes searched as they
    come miss the cache at every step (on 2.9M crawl ids against 0.7M candidates 0.26 µs a query, 0.10 sorted)."""
    order = np.argsort(query)
    pos = np.empty(len(query), np.int64)
    pos[order] = np.searchsorted(table, query[order])
    return pos


class CandidateSet:
    """Which rows are endpoints of a candidate edge, as sorted 64-bit hashes of their ids.

    Every signature worker holds it, so it costs 8 bytes per candidate instead of the ids
    themselves. A hash collision only lets a non-candidate's signature through; verification
    looks signatures up by exact id, so that row is ignored there.
    """

    def __init__(self, hashes: np.ndarray):
        self.hashes = np.unique(np.asarray(hashes, dtype=np.uint64))

    @classmethod
    def of_edges(cls, edges: pa.Table) -> CandidateSet:
        return cls(np.concatenate([id_hashes(edges.column(SRC)), id_hashes(edges.column(DST))]))

    def contains(self, ids: pa.Array | pa.ChunkedArray) -> pa.Array:
        query = id_hashes(ids)
        if len(self.hashes) == 0:
            return pa.array(np.zeros(len(query), dtype=bool))
        pos = np.minimum(sorted_search(self.hashes, query), len(self.hashes) - 1)
        return pa.array(self.hashes[pos] == query)

    def __len__(self) -> int:
        return len(self.hashes)


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
