"""Nearest neighbours over L2-normalised vectors, one interface, four backends.

* `faiss-cpu` (default here): exact inner product; `range_search` returns every pair above a cosine.
* `faiss-gpu`: the same flat index on a GPU; GPU indexes have no range search, so pairs come from a
  k-nearest search filtered by the threshold (raise `k` when groups are larger than k).
* `cuml`: RAPIDS NearestNeighbors (brute force, cosine) on a GPU node.
* `sklearn`: brute-force radius search, no extra dependency beyond scikit-learn.

Every backend is imported inside the call that needs it, so importing this module is free.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.deps import require

Backend = Literal["faiss-cpu", "faiss-gpu", "cuml", "sklearn"]


class KnnConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Backend = Field("faiss-cpu", description="Search engine; the GPU ones need a GPU node.")
    k: int = Field(32, ge=2, description="Neighbours per row for backends without range search "
                   "(faiss-gpu, cuml): pairs beyond the k-th neighbour are not seen.")
    threads: int | None = Field(None, ge=1, description="OpenMP threads for faiss-cpu (default: all).")


def knn_search(vectors: np.ndarray, k: int, config: KnnConfig | None = None,
               queries: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, indices), each (n_queries, k), best first; cosine because inputs are unit length."""
    config = config or KnnConfig()
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    q = x if queries is None else np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, len(x))
    if config.backend in ("faiss-cpu", "faiss-gpu"):
        index = _faiss_index(x, config)
        sims, idx = index.search(q, k)
        return sims, idx.astype(np.int64)
    if config.backend == "cuml":
        nn_mod = require("cuml.neighbors", "cuml", "GPU nearest neighbours")
        nn = nn_mod.NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(x)
        dist, idx = nn.kneighbors(q)
        return 1.0 - np.asarray(dist, dtype=np.float32), np.asarray(idx, dtype=np.int64)
    neighbors = require("sklearn.neighbors", "embed", "nearest neighbours")
    nn = neighbors.NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(x)
    dist, idx = nn.kneighbors(q)
    return 1.0 - dist.astype(np.float32), idx.astype(np.int64)


def similar_pairs(vectors: np.ndarray, threshold: float, config: KnnConfig | None = None) -> np.ndarray:
    """Every pair (i, j), i < j, with cosine ≥ threshold, as an (m, 2) int64 array sorted by (i, j)."""
    config = config or KnnConfig()
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(x)
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    if config.backend == "faiss-cpu":
        index = _faiss_index(x, config)
        # range_search keeps sim > radius; nudge so that "≥ threshold" holds at float precision.
        lims, _, idx = index.range_search(x, float(np.nextafter(np.float32(threshold), np.float32(-1))))
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(lims.astype(np.int64)))
        cols = idx.astype(np.int64)
    elif config.backend == "sklearn":
        neighbors = require("sklearn.neighbors", "embed", "nearest neighbours")
        nn = neighbors.NearestNeighbors(metric="cosine", algorithm="brute").fit(x)
        dist, idx_list = nn.radius_neighbors(x, radius=1.0 - threshold + 1e-6)
        rows = np.concatenate([np.full(len(v), i, dtype=np.int64) for i, v in enumerate(idx_list)])
        cols = np.concatenate([np.asarray(v, dtype=np.int64) for v in idx_list])
    else:
        sims, idx = knn_search(x, config.k, config)
        mask = (sims >= threshold) & (idx >= 0)
        rows = np.nonzero(mask)[0].astype(np.int64)
        cols = idx[mask]
    keep = rows < cols
    pairs = np.stack([rows[keep], cols[keep]], axis=1)
    if len(pairs):
        pairs = np.unique(pairs, axis=0)
    return pairs.reshape(-1, 2)


def _faiss_index(x: np.ndarray, config: KnnConfig):  # type: ignore[no-untyped-def]
    faiss = require("faiss", "embed", "FAISS nearest neighbours")
    if config.threads:
        faiss.omp_set_num_threads(config.threads)
    index = faiss.IndexFlatIP(x.shape[1])
    if config.backend == "faiss-gpu":
        if not hasattr(faiss, "StandardGpuResources"):
            raise RuntimeError("backend 'faiss-gpu' needs the faiss-gpu build (conda/pip faiss-gpu on a GPU "
                               "node); this faiss is CPU-only. Use backend 'faiss-cpu' here.")
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    index.add(x)
    return index
