"""Near-duplicate removal with MinHash LSH, clustered globally.

Phases (each a pure function in minhash_signature / minhash_cluster, so the Ray path and the
in-memory `process_table` path run the same code):

1. bands    per block (a Ray task): signatures -> one row per (text, band): bucket key, id,
            split into K hash partitions by `key % shuffle_partitions`. Empty texts get no band.
2. edges    K reduce tasks, one per partition: each gets every row of its buckets and groups
            them in numpy (sort by key, id) -> star edges of buckets with >= 2 members. This is a
            hash shuffle over the dataset's blocks with plain Ray tasks; `shuffle="ray_data"` uses
            Ray Data's groupby(partition).map_groups instead (same result, more fixed overhead).
3. verify   the candidate ids (few) are broadcast; a pass over the same blocks recomputes the
            signatures of those rows only, and one task drops edges whose signatures estimate a
            Jaccard below the threshold. Signatures never go through the shuffle.
4. cluster  the same task runs union-find over the edges -> id -> duplicate_of (smallest id).
5. mark     Ray Data map_batches: rows in the map get drop_reason `near_duplicate` and
            `duplicate_of`.

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
from transforms.core.stage import GlobalStage, Resources, set_drop_reason, set_duplicate_of
from transforms.dedup.minhash_cluster import (
    KEY,
    PART,
    ROW_ID,
    CandidateSet,
    DuplicateLookup,
    SignatureChunks,
    bucket_edges,
    cluster_duplicates,
    lsh_params,
    unique_edges,
    verify_edges,
)
from transforms.dedup.minhash_signature import band_keys, minhash_signatures
from transforms.dedup.minhash_tasks import (
    _band_partitions,
    _band_partitions_of,
    _band_rows,
    _candidates,
    _cluster,
    _edges,
    _mark,
    _reduce_edges,
    _signature_rows,
    _signature_rows_of,
    _string_ids,
)

log = logging.getLogger("piqaforge")

NEAR_DUPLICATE = "near_duplicate"
SIGNATURE = "_mh_signature"


class MinHashDedup(GlobalStage):
    """Drop near-duplicate texts (character n-gram Jaccard >= threshold), keeping the smallest id."""

    name: ClassVar[str] = "minhash_dedup"
    drop_reasons: ClassVar[dict[str, str]] = {
        "near_duplicate": "a MinHash near-duplicate of an earlier row (duplicate_of names it)",
    }
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
        "whose aggregator actors cost ~25 s of fixed start-up on a 2-core machine (docs/minhash.md).")
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
    def signatures(self, texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        return minhash_signatures(texts, num_perm=self.num_perm, ngram=self.ngram, seed=self.seed,
                                  backend=self.signature_backend)

    def content_band_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """The `(texts, bands)` bucket keys of the texts with content, and each such text's row in `batch`.

        Signatures are computed `resources.batch_size` rows at a time, so a large block never holds
        all its signatures at once; only the keys (8 bytes a band) are kept.
        """
        text = batch.column(C.TEXT)
        rows = np.flatnonzero(pc.fill_null(pc.greater(pc.utf8_length(text), 0), False).to_numpy(zero_copy_only=False))
        texts = text.take(pa.array(rows)) if len(rows) < batch.num_rows else text
        bands, per_band = self.lsh_bands()
        step = self.resources.batch_size or len(rows) or 1
        keys = [band_keys(self.signatures(texts.slice(i, step)), bands, per_band) for i in range(0, len(rows), step)]
        return (np.concatenate(keys) if keys else np.zeros((0, bands), np.uint64)), rows

    def bucket_keys(self, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Every bucket key of the texts with content (text 0's bands, text 1's...) and each key's row in `batch`."""
        keys, rows = self.content_band_keys(batch)
        return keys.ravel(), np.repeat(rows, keys.shape[1])

    def band_rows(self, batch: pa.Table) -> pa.Table:
        """One row per (text with content, band): bucket key, shuffle partition and id."""
        keys, rows = self.bucket_keys(batch)
        return pa.table({KEY: pa.array(keys),
                         PART: pa.array((keys % np.uint64(self.shuffle_partitions)).astype(np.int32)),
                         ROW_ID: _string_ids(batch).take(pa.array(rows))})

    def signature_rows(self, batch: pa.Table, candidates: CandidateSet) -> pa.Table:
        """(id, signature) of the rows that are endpoints of a candidate edge."""
        ids = batch.column(C.ID).cast(pa.string())
        batch = batch.filter(candidates.contains(ids))
        sig = self.signatures(batch.column(C.TEXT))
        return pa.table({ROW_ID: batch.column(C.ID).cast(pa.string()),
                         SIGNATURE: pa.FixedSizeBinaryArray.from_buffers(
                             pa.binary(4 * self.num_perm), len(sig), [None, pa.py_buffer(np.ascontiguousarray(sig))])})

    def cluster(self, edges: pa.Table, signature_rows: pa.Table | None) -> pa.Table:
        """Verify (when asked) and cluster candidate edges into `id -> duplicate_of`."""
        edges = unique_edges(edges)
        if self.verify and signature_rows is not None and edges.num_rows:
            # Read the signature tables in place (they sit in the object store): no concatenated copy.
            sigs = SignatureChunks.of_column(signature_rows.column(SIGNATURE), self.num_perm)
            edges = verify_edges(edges, signature_rows.column(ROW_ID).combine_chunks(), sigs, self.threshold)
        return cluster_duplicates(edges)

    def mark(self, batch: pa.Table, lookup: DuplicateLookup) -> pa.Table:
        dup_of = lookup.duplicate_of(batch.column(C.ID).cast(pa.string()))
        reason = pc.if_else(pc.is_valid(dup_of), pa.scalar(NEAR_DUPLICATE), pa.scalar(None, pa.string()))
        return set_drop_reason(set_duplicate_of(batch, dup_of), reason)

    # -- in memory (unit tests, small tables) ------------------------------------------------------
    def find_duplicates(self, table: pa.Table) -> pa.Table:
        """`id -> duplicate_of` for a whole table, in this process."""
        table = table.select([C.ID, C.TEXT])
        edges = bucket_edges(self.band_rows(table))
        sig_rows = self.signature_rows(table, CandidateSet.of_edges(edges)) if self.verify else None
        return self.cluster(edges, sig_rows)

    def process_table(self, table: pa.Table) -> pa.Table:
        ids = table.column(C.ID)
        if ids.null_count or pc.count_distinct(ids).as_py() != table.num_rows:
            raise ValueError("minhash_dedup needs unique, non-null ids (run exact dedup or fix the id mapping)")
        return self.mark(table, DuplicateLookup(self.find_duplicates(table)))

    # -- on Ray ------------------------------------------------------------------------------------
    def run_partitions(self, ds: Any, partitions: list[Any]) -> Any:
        """On the lake's partitions (the runner's path): the `tasks` shuffle's map and signature tasks read id and
        text from the Parquet files themselves, so no block of text is held in (or spilled from) the object store;
        3M crawl rows: docs/minhash.md. Anything else goes to `run_dataset`."""
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
        texts = ds.select_columns([C.ID, C.TEXT])
        sources: list[Any] = partitions
        if self.shuffle == "ray_data":
            bands = texts.map_batches(_band_rows, fn_kwargs={"stage": self}, **batch_args)
            edge_refs = bands.groupby(PART, num_partitions=self.shuffle_partitions).map_groups(
                _edges, batch_format="pyarrow").to_arrow_refs()
            sources = texts.to_arrow_refs() if self.verify else []
        else:
            if not from_lake:  # blocks of bounded size, held in the object store (spilled to disk if need be)
                sources = texts.repartition(target_num_rows_per_block=self.rows_per_block).to_arrow_refs()
                log.info("minhash_dedup: %d blocks materialised in %.1fs", len(sources),
                         time.perf_counter() - started)
            edge_refs = self._task_shuffle(sources, _band_partitions_of if from_lake else _band_partitions)
        sig_refs: list[Any] = []
        if self.verify:
            candidates = ray.remote(num_cpus=0.5)(_candidates).remote(*edge_refs)
            sig_task = ray.remote(**self.resources.ray_remote_args())(
                _signature_rows_of if from_lake else _signature_rows)
            sig_refs = [sig_task.remote(source, self, [candidates]) for source in sources]
        del sources
        map_ref, n_ref = ray.remote(num_cpus=1, num_returns=2)(_cluster).remote(self, len(edge_refs), *edge_refs,
                                                                               *sig_refs)
        n_dups = ray.get(n_ref)
        log.info("minhash_dedup: %d near-duplicate rows to drop; signatures, shuffle, verification and "
                 "clustering took %.1fs", n_dups, time.perf_counter() - started)
        if from_lake:
            # Whole blocks (the lake's row groups, at most 16,384 rows): with a batch size Ray Data cannot fuse the
            # marking into the read tasks, and every column of every row goes through the object store between
            # them (at 3M crawl rows ~3 GB written and read back). Fused, the runner's write joins the same task.
            batch_args["batch_size"] = None
        return ds.map_batches(_mark, fn_kwargs={"stage": self, "lookup_ref": [map_ref]}, **batch_args)

    def _task_shuffle(self, sources: list[Any], band_task: Any) -> list[Any]:
        """Hash shuffle of band rows with plain Ray tasks: B map tasks x K outputs -> K reduce tasks; a map task
        takes a block (an object reference) or a lake partition it reads itself."""
        import ray

        k = self.shuffle_partitions
        args = self.resources.ray_remote_args()
        split = ray.remote(num_returns=k, **args)(band_task)
        parts: list[Any] = [split.remote(source, self) for source in sources]
        parts = [p if k > 1 else [p] for p in parts]
        reduce = ray.remote(**args)(_reduce_edges)
        # The driver holds B*K references, never the band rows themselves.
        return [reduce.remote(*[p[i] for p in parts]) for i in range(k)]
