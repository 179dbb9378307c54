"""Semantic near-duplicate removal: embed a text column, pair rows above a cosine, keep one per group.

Two ways to find the pairs, one answer:

* `exact`: every pair above the threshold (FAISS `IndexFlatIP.range_search`, or the kNN backend
  configured in `knn`). O(n²·d) work: right up to a few hundred thousand rows.
* `clustered` (SemDeDup, Abbas et al. 2023): k-means the vectors into ~√n clusters and compare only
  inside each cluster (each row may join its `n_probe` nearest clusters to catch pairs on a
  border). O(n²·d / k) work, so millions of rows fit; the benchmark measures the recall it gives up.

Keeping is greedy in a deterministic order (smallest id, or input order): a row is dropped when
an earlier *kept* row is similar to it, and `duplicate_of` names that row. Unlike connected
components this never drops a row through a chain (a~b, b~c, but a≁c keeps c).

Languages the configured embedder does not serve raise `UnsupportedLanguageError` naming the model
to configure; `representation: char-ngrams` (TF-IDF over character 2-4-grams) is a model-free
fallback that catches reworded copies less well but works in any script.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from transforms.core import columns as C
from transforms.core.deps import require
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, StageError, set_duplicate_of
from transforms.dedup.neighbours import greedy_keep
from transforms.embed.base import Embedder, EmbedderConfig
from transforms.embed.knn import KnnConfig, similar_pairs


class SemanticDrops(DropReason):
    SEMANTIC_DUPLICATE = "semantic_duplicate", "an embedding near-duplicate of an earlier item (duplicate_of names it)"


class SemanticDedup(GlobalStage[SemanticDrops]):
    name: ClassVar[str] = "semantic_dedup"
    reads: ClassVar[tuple[str, ...]] = (C.ID,)
    writes: ClassVar[tuple[str, ...]] = (C.DUPLICATE_OF,)
    stateful: ClassVar[bool] = True

    column: str = Field("goal", description="Text column to compare.")
    threshold: float = Field(0.85, gt=0, le=1, description="Cosine at or above which two rows are duplicates.")
    representation: Literal["embedder", "char-ngrams"] = Field(
        "embedder", description="Sentence embeddings, or model-free character n-gram TF-IDF.")
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig, description="The embedding model and where it "
                                     "runs (backend, model, prefix, batch_size, threads, device, dtype, languages).")
    knn: KnnConfig = Field(default_factory=KnnConfig, description="Neighbour search (backend faiss-cpu, faiss-gpu, "
                           "cuml or torch; k, threads, device).")
    method: Literal["auto", "exact", "clustered"] = Field("auto", description="auto: clustered above "
                                                          "`clustered_above` rows, exact below.")
    clustered_above: int = Field(200_000, ge=1, description="With method auto: rows above which the search is "
                                 "clustered (k-means, `n_clusters`, `n_probe`) rather than exact.")
    n_clusters: int | None = Field(None, ge=1, description="k-means clusters (default √n).")
    n_probe: int = Field(1, ge=1, description="Clusters each row joins (more: higher recall, more work).")
    vector_column: str | None = Field(None, description="Column of precomputed unit vectors (list<float>); "
                                      "when present, rows are not embedded here (embed upstream on an actor pool).")
    keep: Literal["smallest_id", "first"] = Field("smallest_id", description="Which row of a group survives.")
    seed: int = Field(0, description="k-means seed: same seed, same clusters, same result.")

    _embedder: Embedder | None = PrivateAttr(None)

    def check_columns(self, schema: pa.Schema) -> None:
        super().check_columns(schema)
        if self.column not in schema.names:
            raise StageError(f"stage '{self.name}' needs column {self.column!r}, but the batch has {schema.names}")

    def process_table(self, table: pa.Table) -> pa.Table:
        dup = self.duplicate_of(table)
        reasons = [None if d is None else SemanticDrops.SEMANTIC_DUPLICATE for d in dup]
        return set_duplicate_of(self.drop(table, reasons), pa.array(dup, pa.string()))

    # -- the pure parts ---------------------------------------------------------------------------------
    def duplicate_of(self, table: pa.Table) -> list[str | None]:
        """For each row, the id of the kept row it duplicates, or None when it is kept."""
        ids = [str(x) for x in table.column(C.ID).to_pylist()]
        texts = ["" if t is None else str(t) for t in table.column(self.column).to_pylist()]
        if len(ids) < 2:
            return [None] * len(ids)
        if self.vector_column and self.vector_column in table.column_names:
            vectors = _matrix(table.column(self.vector_column))
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            pairs = self.find_pairs(vectors)
        elif self.representation == "char-ngrams":
            pairs = char_ngram_pairs(texts, self.threshold)
        else:
            if "lang" in table.column_names:
                for lang in sorted({str(x) for x in table.column("lang").to_pylist() if x is not None}):
                    self.embedder.check_language(lang)
            vectors = self.embed(texts)
            pairs = self.find_pairs(vectors)
        order = np.argsort(np.array(ids, dtype=object), kind="stable") if self.keep == "smallest_id" \
            else np.arange(len(ids))
        dup_index = greedy_keep(len(ids), pairs, order)
        return [None if j < 0 else ids[j] for j in dup_index]

    def setup(self) -> None:
        if self.representation == "embedder" and self._embedder is None:
            self._embedder = Embedder(self.embedder)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.setup()
        assert self._embedder is not None
        return self._embedder.encode(texts)

    def find_pairs(self, vectors: np.ndarray) -> np.ndarray:
        n = len(vectors)
        clustered = self.method == "clustered" or (self.method == "auto" and n > self.clustered_above)
        if not clustered:
            return similar_pairs(vectors, self.threshold, self.knn)
        return clustered_pairs(vectors, self.threshold, n_clusters=self.n_clusters, n_probe=self.n_probe,
                               seed=self.seed, knn=self.knn)


def clustered_pairs(vectors: np.ndarray, threshold: float, *, n_clusters: int | None = None, n_probe: int = 1,
                    seed: int = 0, knn: KnnConfig | None = None, niter: int = 20) -> np.ndarray:
    """SemDeDup: pairs above `threshold` among rows sharing one of their `n_probe` nearest centroids."""
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, d = x.shape
    k = max(1, min(n_clusters or int(round(np.sqrt(n))), n))
    assign = kmeans_assign(x, k, n_probe=min(n_probe, k), seed=seed, niter=niter)
    members = np.argsort(assign, axis=None, kind="stable")
    flat = assign.ravel()[members]
    rows = members // assign.shape[1]
    bounds = np.flatnonzero(np.diff(flat)) + 1
    found = []
    for group in np.split(rows, bounds):
        if len(group) < 2:
            continue
        local = similar_pairs(x[group], threshold, knn)
        if len(local):
            found.append(group[local])
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    pairs = np.concatenate(found)
    pairs.sort(axis=1)
    return np.unique(pairs, axis=0)


def kmeans_assign(x: np.ndarray, k: int, *, n_probe: int = 1, seed: int = 0, niter: int = 20) -> np.ndarray:
    """(n, n_probe) ids of each row's nearest spherical k-means centroids (FAISS k-means)."""
    faiss = require("faiss", "embed", "k-means clustering")
    km = faiss.Kmeans(x.shape[1], k, niter=niter, seed=seed, spherical=True, verbose=False,
                      max_points_per_centroid=256)
    km.train(x)
    _, assign = km.index.search(x, n_probe)
    return np.asarray(assign, dtype=np.int64)


def char_ngram_pairs(texts: list[str], threshold: float, chunk: int = 2048) -> np.ndarray:
    """Pairs whose character 2-4-gram TF-IDF cosine ≥ threshold (sparse, chunked; no model)."""
    text_mod: Any = require("sklearn.feature_extraction.text", "embed", "character n-gram similarity")
    x = text_mod.TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True).fit_transform(texts)
    found = []
    xt = x.T.tocsc()
    for start in range(0, x.shape[0], chunk):
        sims = (x[start:start + chunk] @ xt).tocoo()
        mask = (sims.data >= threshold - 1e-6) & (sims.row + start < sims.col)
        if mask.any():
            found.append(np.stack([sims.row[mask] + start, sims.col[mask]], axis=1).astype(np.int64))
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.concatenate(found), axis=0)


def _matrix(column: pa.ChunkedArray) -> np.ndarray:
    """A list<float> / fixed_size_list<float> column of equal-length vectors as an (n, d) float32 matrix."""
    values = column.combine_chunks()
    if len(values) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    if values.null_count:
        raise ValueError("precomputed vectors must not be null")
    lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    if (lengths != lengths[0]).any():
        raise ValueError(f"precomputed vectors differ in length ({sorted(set(lengths.tolist()))[:5]})")
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False).astype(np.float32)
    return flat.reshape(len(values), int(lengths[0]))


def near_duplicate_of(ids: list[str], texts: list[str], langs: list[str | None] | None, *, threshold: float,
                      representation: Literal["embedder", "char-ngrams"], embedder: EmbedderConfig) -> list[str | None]:
    """The release gate's near-duplicate rule (expectations `near_duplicates`), shared with the review batch's
    suggestions so that reviewers see every pair the gate would refuse: per row (in the given order, first kept)
    the id of the earlier row it duplicates, or None. An embedder that does not read every language present
    gives way to character n-grams at the same threshold (they work for any script)."""
    served = embedder.supported_languages() if representation == "embedder" else None
    if served is not None and {v for v in langs or [] if v} - served:
        representation = "char-ngrams"
    cols: dict[str, Any] = {C.ID: ids, "text": texts}
    if langs is not None:
        cols["lang"] = langs
    stage = SemanticDedup(column="text", threshold=threshold, representation=representation, embedder=embedder,
                          keep="first")
    return stage.duplicate_of(pa.table(cols))
