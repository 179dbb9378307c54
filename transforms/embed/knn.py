"""Nearest neighbours over L2-normalised vectors, one interface, five backends.

* `faiss-cpu` (default here): exact inner product; `range_search` returns every pair above a cosine.
* `faiss-gpu`: the same flat index on a GPU; GPU indexes have no range search, so pairs come from a
  k-nearest search filtered by the threshold (raise `k` when groups are larger than k).
* `cuml`: RAPIDS NearestNeighbors (brute force, cosine) on a GPU node.
* `sklearn`: brute-force radius search, no extra dependency beyond scikit-learn.
* `torch`: exact cosine by blocked matrix products on whatever device torch has (`device`, default
  cuda when available), for GPU nodes with torch but neither faiss-gpu nor cuML. Threshold pairs
  come from the blocks themselves (every sim ≥ threshold of rows i < j), so there is no k limit.
  A block holds `block_mb` of similarities. Checked against faiss-cpu in tests/embed/test_knn_torch.py and,
  on a GPU, by scripts/gpu_check.sh.

Every backend is imported inside the call that needs it, so importing this module is free.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.deps import require

Backend = Literal["faiss-cpu", "faiss-gpu", "cuml", "sklearn", "torch"]


class KnnConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Backend = Field("faiss-cpu", description="Search engine; the GPU ones need a GPU node.")
    k: int = Field(32, ge=2, description="Neighbours per row for backends without range search "
                   "(faiss-gpu, cuml): pairs beyond the k-th neighbour are not seen.")
    threads: int | None = Field(None, ge=1, description="OpenMP threads for faiss-cpu (default: all).")
    device: str | None = Field(None, description="torch backend: 'cuda', 'cuda:1', 'cpu'; unset: cuda when "
                               "available, else cpu.")
    block_mb: int = Field(512, ge=1, description="torch backend: MiB of similarities per block product.")


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
    if config.backend == "torch":
        return _torch_knn(x, q, k, config)
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
    elif config.backend == "torch":
        rows, cols = _torch_pairs(x, threshold, config)
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


def _torch_setup(config: KnnConfig):  # type: ignore[no-untyped-def]
    torch = require("torch", "embed", "the torch nearest-neighbour backend")
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if config.threads and device == "cpu":
        torch.set_num_threads(config.threads)
    return torch, device


@contextmanager
def _full_float32(torch: Any) -> Iterator[None]:
    """Exact cosine: no TF32 in the block products, whatever another library set globally."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _block_rows(n_cols: int, config: KnnConfig) -> int:
    return max(1, (config.block_mb << 20) // (4 * max(n_cols, 1)))


def _torch_knn(x: np.ndarray, q: np.ndarray, k: int, config: KnnConfig) -> tuple[np.ndarray, np.ndarray]:
    torch, device = _torch_setup(config)
    xt = torch.from_numpy(x).to(device)
    sims_out, idx_out = [], []
    step = _block_rows(len(x), config)
    with torch.inference_mode(), _full_float32(torch):
        for start in range(0, len(q), step):
            block = torch.from_numpy(q[start:start + step]).to(device)
            sims, idx = torch.topk(block @ xt.T, k, dim=1)  # sorted, best first
            sims_out.append(sims.cpu().numpy())
            idx_out.append(idx.cpu().numpy())
    return np.concatenate(sims_out).astype(np.float32), np.concatenate(idx_out).astype(np.int64)


def _torch_pairs(x: np.ndarray, threshold: float, config: KnnConfig) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of every sim ≥ threshold with row < column: block i of rows against the
    columns from i's first row on, so each pair is computed once and only the hits leave the device."""
    torch, device = _torch_setup(config)
    xt = torch.from_numpy(x).to(device)
    n = len(x)
    rows_out, cols_out = [], []
    step = _block_rows(n, config)
    with torch.inference_mode(), _full_float32(torch):
        for start in range(0, n, step):
            block = xt[start:start + step]
            sims = block @ xt[start:].T
            r, c = torch.nonzero(sims >= np.float32(threshold), as_tuple=True)
            keep = r < c  # c counts from `start`, so r < c means i < j and drops the diagonal
            rows_out.append((r[keep] + start).cpu().numpy())
            cols_out.append((c[keep] + start).cpu().numpy())
    return (np.concatenate(rows_out).astype(np.int64) if rows_out else np.zeros(0, np.int64),
            np.concatenate(cols_out).astype(np.int64) if cols_out else np.zeros(0, np.int64))
