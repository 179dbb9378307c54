"""Near-duplicate removal with MinHash LSH, clustered globally.

Phases (each a pure function in minhash_signature / minhash_cluster, so the Ray path and the
in-memory `process_table` path run the same code). A row travels as a number, `ref = source << 32 | row`
(its lake partition or block, and its position there), not as its id, until the duplicate map:

1. bands      per source (a Ray task): text only -> signatures -> one (bucket key, row) pair per (text, band),
              in reducer order (`key % shuffle_partitions`, K reducers): one object per map task on one node,
              one per reducer on several. Empty texts get no band.
2. buckets    K reduce tasks: reducer i takes slice i of every map output and keeps the rows of the buckets
              with >= 2 members as (key, ref), each bucket contiguous (numbers only). This is a hash shuffle
              over the dataset's sources with plain Ray tasks; `shuffle="ray_data"` uses Ray Data's
              groupby(partition).map_groups instead (same result, more fixed overhead).
3. candidates the refs in those buckets (a minority of the rows), sorted, one object; a pass over the same
              sources takes each source's range of them: ref, id (as a string) and, with `verify`, the
              signature. Signatures and ids never go through the shuffle.
4. cluster    one task: the candidates' ids are sorted once (their rank is their id order); each bucket
              links its members to its smallest-id member (a star), edges are verified on the signatures
              (estimated Jaccard >= threshold), union-find on the ranks -> id -> duplicate_of (smallest id).
5. mark       Ray Data map_batches: rows in the map get drop_reason `near_duplicate` and `duplicate_of`.

The driver holds only object references; the Ray tasks are in minhash_tasks.py. See docs/minhash.md
for measured speed, precision/recall and the memory model at 100M rows.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr, model_validator

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, Resources, set_duplicate_of
from transforms.dedup.minhash_cluster import (
    KEY,
    PART,
    REF,
    ROW_ID,
    SIGNATURE,
    CandidateRows,
    DuplicateLookup,
    candidate_refs,
    cluster_buckets,
    lsh_params,
    row_refs,
    shared_buckets,
    signature_column,
)
from transforms.dedup.minhash_signature import band_keys, minhash_signatures
from transforms.dedup.minhash_tasks import (
    Buckets,
    _band_partitions,
    _band_partitions_of,
    _band_parts,
    _band_parts_of,
    _band_table,
    _bucket_table,
    _candidate_rows,
    _candidate_rows_of,
    _candidates,
    _cluster,
    _mark,
    _reduce_buckets,
)

log = logging.getLogger("piqaforge")

__all__ = ["KEY", "NEAR_DUPLICATE", "PART", "REF", "ROW_ID", "SIGNATURE", "MinHashDedup"]


def alive_nodes() -> int:
    """How many nodes this Ray cluster has (the map tasks' output form depends on it)."""
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive"))


class MinHashDrops(DropReason):
    NEAR_DUPLICATE = "near_duplicate", "a MinHash near-duplicate of an earlier row (duplicate_of names it)"


NEAR_DUPLICATE = MinHashDrops.NEAR_DUPLICATE


class MinHashDedup(GlobalStage[MinHashDrops]):
    """Drop near-duplicate texts (character n-gram Jaccard >= threshold), keeping the smallest id."""

    name: ClassVar[str] = "minhash_dedup"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = (C.DUPLICATE_OF,)

    ngram: int = Field(5, ge=1, description="Character n-gram (shingle) length.")
    num_perm: int = Field(128, ge=8, le=1024, description="MinHash permutations (signature length).")
    threshold: float = Field(0.7, gt=0, lt=1, description="Jaccard similarity at which two texts are duplicates.")
    bands: int | None = Field(None, ge=1, description="LSH bands; unset picks datasketch's optimum.")
    rows: int | None = Field(None, ge=1, description="Rows per band; unset picks datasketch's optimum.")
    false_negative_weight: float = Field(
        0.9, ge=0, le=1, description="Weight of missed pairs vs false candidates when choosing bands/rows "
        "(datasketch optimal_param). Above 0.5 finds more pairs near the threshold; `verify` then "
        "removes the extra false candidates.")
    seed: int = Field(42, description="Seed of the permutations (same seed, same signatures).")
    signature_backend: Literal["auto", "numpy", "numba"] = Field(
        "auto", description="Signature kernel: numba (the `fast` extra: raw UTF-8 to signature in one pass, "
        "faster per core than numpy and than rensa's bulk API, docs/minhash.md) when installed, else numpy; "
        "both give identical signatures.")
    verify: bool = Field(True, description="Keep a candidate pair only if its signatures estimate a "
                         "Jaccard >= threshold (protects precision against chance band collisions).")
    shuffle_partitions: int = Field(16, ge=1, description="Hash partitions of the bucket shuffle; aim for "
                                    "a few million band rows per partition (rows * bands / partitions).")
    shuffle: Literal["tasks", "ray_data"] = Field(
        "tasks", description="How band rows are grouped by bucket: `tasks` is a hash shuffle with plain Ray "
        "tasks (B map tasks x K outputs, K reduce tasks); `ray_data` is Ray Data's groupby(...).map_groups, "
        "whose hash-shuffle aggregator actors add a fixed start-up the task shuffle does not have, which "
        "dominates on small inputs (docs/minhash.md).")
    rows_per_block: int = Field(65_536, ge=1, description="Rows per map task of the `tasks` shuffle.")
    local_max_rows: int = Field(50_000, ge=0, description="Datasets up to this many rows run `process_table` in "
                                "one Ray task (same result, a fraction of the scheduling overhead); 0 always "
                                "runs the distributed path.")
    resources: Resources = Field(default_factory=lambda: Resources(batch_size=8192),
                                 description="Per-task resources of the signature and marking passes.")
    _lsh: tuple[tuple[Any, ...], tuple[int, int]] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_bands(self) -> MinHashDedup:
        bands, rows = self.lsh_bands()
        if bands * rows > self.num_perm:
            raise ValueError(f"bands*rows = {bands}*{rows} exceeds num_perm = {self.num_perm}")
        return self

    def lsh_bands(self) -> tuple[int, int]:
        # Resolved once where the stage is built and pickled with it: a Ray worker then never imports
        # datasketch and scipy (~1 CPU-s a worker process) to integrate the same numbers again.
        key = (self.threshold, self.num_perm, self.false_negative_weight, self.bands, self.rows)
        if self._lsh is None or self._lsh[0] != key:
            self._lsh = (key, self._resolve_lsh_bands())
        return self._lsh[1]

    def _resolve_lsh_bands(self) -> tuple[int, int]:
        if self.bands and self.rows:
            return self.bands, self.rows
        bands, rows = lsh_params(self.threshold, self.num_perm, 1 - self.false_negative_weight,
                                 self.false_negative_weight)
        if self.bands:
            return self.bands, min(rows, self.num_perm // self.bands)
        if self.rows:
            return min(bands, self.num_perm // self.rows), self.rows
        return bands, rows

    def describe(self) -> dict[str, Any]:
        bands, rows = self.lsh_bands()
        return {**super().describe(), "lsh": {"bands": bands, "rows": rows}}

    # -- phases ----------------------------------------------------------------------------------
    def signatures(self, texts: pa.Array | pa.ChunkedArray, out: np.ndarray | None = None) -> np.ndarray:
        return minhash_signatures(texts, num_perm=self.num_perm, ngram=self.ngram, seed=self.seed,
                                  backend=self.signature_backend, out=out)

    def content_band_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """The `(texts, bands)` bucket keys of the texts with content, and each such text's row in `batch`.

        Signatures are computed `resources.batch_size` rows at a time into one reused buffer, so a large block
        never holds all its signatures at once; only the keys (8 bytes a band) are kept.
        """
        text = batch.column(C.TEXT)
        rows = np.flatnonzero(pc.fill_null(pc.greater(pc.utf8_length(text), 0), False).to_numpy(zero_copy_only=False))
        texts = text.take(pa.array(rows)) if len(rows) < batch.num_rows else text
        bands, per_band = self.lsh_bands()
        step = self.resources.batch_size or len(rows) or 1
        keys = np.empty((len(rows), bands), np.uint64)
        sig = np.empty((min(step, len(rows)), self.num_perm), np.uint32)
        for i in range(0, len(rows), step):
            band_keys(self.signatures(texts.slice(i, step), out=sig), bands, per_band, out=keys[i:i + step])
        return keys, rows

    def bucket_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Every bucket key of the texts with content (text 0's bands, text 1's...) and each key's row in `batch`."""
        keys, rows = self.content_band_keys(batch)
        return keys.ravel(), np.repeat(rows, keys.shape[1])

    def band_rows(self, batch: pa.Table, source: int = 0) -> pa.Table:
        """One row per (text with content, band): bucket key, shuffle partition and the row's ref
        (`source << 32 | row in batch`)."""
        keys, rows = self.bucket_keys(batch)
        return pa.table({KEY: pa.array(keys, pa.uint64()),
                         PART: pa.array((keys % np.uint64(self.shuffle_partitions)).astype(np.int32)),
                         REF: pa.array(row_refs(rows, source), pa.int64())})

    def candidate_rows(self, batch: pa.Table, rows: np.ndarray, source: int = 0) -> pa.Table:
        """Ref, id (as a string) and, with `verify`, signature of the candidate rows `rows` (positions in `batch`)."""
        rows = np.asarray(rows, np.int64)
        picked = batch.select([C.ID, C.TEXT]).take(pa.array(rows)) if len(rows) else None
        ids = picked.column(C.ID).cast(pa.string()) if picked is not None else pa.array([], pa.string())
        columns: dict[str, Any] = {REF: pa.array(row_refs(rows, source), pa.int64()), ROW_ID: ids}
        if self.verify:
            sig = (self.signatures(picked.column(C.TEXT)) if picked is not None
                   else np.zeros((0, self.num_perm), np.uint32))
            columns[SIGNATURE] = signature_column(sig)
        return pa.table(columns)

    def cluster(self, buckets: list[Buckets], candidate_rows: list[pa.Table], grouped: bool = True) -> pa.Table:
        """`id -> duplicate_of` from the reducers' shared buckets (key, ref) and the candidate rows (ref, id,
        signature): stars from each bucket's smallest id, verified (when asked), union-find. `grouped`: each
        bucket is one contiguous run of the concatenated buckets (the reducers' output; Ray Data's groups are not)."""
        candidates = CandidateRows.of_tables(candidate_rows, self.num_perm, self.verify)
        return cluster_buckets(buckets, candidates, self.threshold, grouped=grouped)

    def mark(self, batch: pa.Table, lookup: DuplicateLookup) -> pa.Table:
        dup_of = lookup.duplicate_of(batch.column(C.ID).cast(pa.string()))
        return self.drop_where(set_duplicate_of(batch, dup_of), pc.is_valid(dup_of), MinHashDrops.NEAR_DUPLICATE)

    # -- in memory (unit tests, small tables) ------------------------------------------------------
    def find_duplicates(self, table: pa.Table) -> pa.Table:
        """`id -> duplicate_of` for a whole table, in this process (one source: a row's ref is its row number)."""
        table = table.select([C.ID, C.TEXT])
        keys, rows = self.bucket_keys(table)
        buckets = shared_buckets(keys, rows)
        rows = candidate_refs([buckets[1]])
        return self.cluster([buckets], [self.candidate_rows(table, rows)])

    def process_table(self, table: pa.Table) -> pa.Table:
        ids = table.column(C.ID)
        if ids.null_count or pc.count_distinct(ids).as_py() != table.num_rows:
            raise ValueError("minhash_dedup needs unique, non-null ids (run exact dedup or fix the id mapping)")
        return self.mark(table, DuplicateLookup(self.find_duplicates(table)))

    # -- on Ray ------------------------------------------------------------------------------------
    def run_partitions(self, ds: Any, partitions: list[Any]) -> Any:
        """On the lake's partitions (the runner's path): the `tasks` shuffle's map tasks read the text and the
        candidate-rows tasks id and text from the Parquet files themselves, so no block of text is held in (or
        spilled from) the object store; 3M crawl rows: docs/minhash.md. Anything else goes to `run_dataset`."""
        import pyarrow.parquet as pq

        if self.shuffle != "tasks" or not partitions:
            return self.run_dataset(ds)
        self.check_columns(pq.read_schema(partitions[0].units[0][0]))
        if self.local_max_rows and sum(p.rows for p in partitions) <= self.local_max_rows:
            return super().run_dataset(ds)
        return self._distributed(ds, partitions, from_lake=True)

    def run_dataset(self, ds: Any) -> Any:
        self.check_columns(ds.schema())
        if self.local_max_rows and ds.count() <= self.local_max_rows:
            return super().run_dataset(ds)
        return self._distributed(ds, [], from_lake=False)

    def _distributed(self, ds: Any, partitions: list[Any], from_lake: bool) -> Any:
        import ray

        started = time.perf_counter()
        batch_args: dict[str, Any] = {"batch_format": "pyarrow", "batch_size": self.resources.batch_size,
                                      **self.resources.ray_remote_args()}
        args = self.resources.ray_remote_args()
        sources: list[Any] = partitions  # a row's ref names its source by the index in this list
        if not from_lake:  # blocks of bounded size, held in the object store (spilled to disk if need be)
            texts = ds.select_columns([C.ID, C.TEXT])
            if self.shuffle == "tasks":
                texts = texts.repartition(target_num_rows_per_block=self.rows_per_block)
            sources = texts.to_arrow_refs()
            log.info("minhash_dedup: %d blocks materialised in %.1fs", len(sources), time.perf_counter() - started)
        grouped = self.shuffle == "tasks"
        if grouped:
            bucket_refs = self._task_shuffle(sources, from_lake)
        else:
            band_task = ray.remote(**args)(_band_table)
            band_tables: list[Any] = [band_task.remote(block, self, i) for i, block in enumerate(sources)]
            bands = ray.data.from_arrow_refs(band_tables)
            bucket_refs = bands.groupby(PART, num_partitions=self.shuffle_partitions).map_groups(
                _bucket_table, batch_format="pyarrow").to_arrow_refs()
        # The candidate refs (one object), then each source's candidate rows' ids and signatures, read again.
        cands = ray.remote(num_cpus=0.5)(_candidates).remote(*bucket_refs)
        rows_task = ray.remote(**args)(_candidate_rows_of if from_lake else _candidate_rows)
        cand_refs = [rows_task.remote(source, self, i, cands) for i, source in enumerate(sources)]
        del sources, cands
        map_ref, n_ref = ray.remote(num_cpus=1, num_returns=2)(_cluster).remote(
            self, len(bucket_refs), grouped, *bucket_refs, *cand_refs)
        n_dups = ray.get(n_ref)
        log.info("minhash_dedup: %d near-duplicate rows to drop; signatures, shuffle, verification and "
                 "clustering took %.1fs", n_dups, time.perf_counter() - started)
        if from_lake:
            # Whole blocks (the lake's row groups, at most 16,384 rows): with a batch size Ray Data cannot fuse the
            # marking into the read tasks, and every column of every row goes through the object store between
            # them (at 3M crawl rows ~3 GB written and read back). Fused, the runner's write joins the same task.
            batch_args["batch_size"] = None
        return ds.map_batches(_mark, fn_kwargs={"stage": self, "lookup_ref": [map_ref]}, **batch_args)

    def _task_shuffle(self, sources: list[Any], from_lake: bool) -> list[Any]:
        """Hash shuffle of band rows (key, row) with plain Ray tasks: B map tasks -> K reduce tasks; a map task takes
        a block (an object reference) or a lake partition it reads itself, and its index. On one node a map task
        returns one object with every reducer's slice (reducer i maps slice i of each: B objects, not B x K); on
        several, one object per reducer, so that no node fetches the other reducers' slices."""
        import ray

        k = self.shuffle_partitions
        args = self.resources.ray_remote_args()
        reduce = ray.remote(**args)(_reduce_buckets)
        if alive_nodes() <= 1:
            split = ray.remote(**args)(_band_partitions_of if from_lake else _band_partitions)
            outputs: list[Any] = [split.remote(source, self, i) for i, source in enumerate(sources)]
            # The driver holds B + K references, never the band rows themselves.
            return [reduce.remote(i, *outputs) for i in range(k)]
        split_k: Any = ray.remote(num_returns=k, **args)(_band_parts_of if from_lake else _band_parts)
        parts: list[Any] = [split_k.remote(source, self, i) for i, source in enumerate(sources)]
        parts = [p if k > 1 else [p] for p in parts]
        return [reduce.remote(i, *[p[i] for p in parts]) for i in range(k)]
