"""The torch kNN backend (exact cosine by blocked matrix products) against faiss-cpu on the same
vectors: the same neighbours and the same threshold pairs. On a GPU (`-m gpu`, scripts/gpu_check.sh)
the reference is faiss-cpu's answer computed beforehand and carried as a file when faiss is absent."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gpuutil import gpu_device

from transforms.embed.knn import KnnConfig, knn_search, similar_pairs

torch = pytest.importorskip("torch")

THRESHOLD = 0.9
K = 8
REFERENCE_ENV = "PIQAFORGE_KNN_REFERENCE"  # .npz written by `reference()` (scripts/gpu_check.sh --prepare)


def clustered_vectors(n: int = 3000, dim: int = 64, seed: int = 0) -> np.ndarray:
    """Unit vectors in tight clusters, so a 0.9 threshold finds many pairs (as near-duplicates do)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n // 6, dim)).astype(np.float32)
    x = centers[rng.integers(0, len(centers), n)] + 0.25 * rng.standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def reference(path: Path | None = None, n: int = 3000) -> dict[str, np.ndarray]:
    """faiss-cpu's pairs and neighbours of `clustered_vectors(n)`, saved to `path` when given."""
    x = clustered_vectors(n)
    sims, idx = knn_search(x, K, KnnConfig(backend="faiss-cpu"))
    ref = {"vectors": x, "pairs": similar_pairs(x, THRESHOLD, KnnConfig(backend="faiss-cpu")),
           "sims": sims, "idx": idx}
    if path is not None:
        np.savez_compressed(path, **ref)
    return ref


def load_reference() -> dict[str, np.ndarray]:
    path = os.environ.get(REFERENCE_ENV)
    if path:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    pytest.importorskip("faiss")
    return reference()


def near_threshold(x: np.ndarray, pairs: np.ndarray, tol: float = 1e-5) -> set[tuple[int, int]]:
    sims = np.einsum("ij,ij->i", x[pairs[:, 0]], x[pairs[:, 1]]) if len(pairs) else np.zeros(0)
    return {tuple(p) for p, s in zip(pairs.tolist(), sims, strict=True) if abs(s - THRESHOLD) < tol}


def check_against(ref: dict[str, np.ndarray], config: KnnConfig) -> None:
    x = ref["vectors"]
    got = similar_pairs(x, THRESHOLD, config)
    want = ref["pairs"]
    assert len(want) > 100
    diff = {tuple(p) for p in got.tolist()} ^ {tuple(p) for p in want.tolist()}
    # Summation order differs between libraries: only pairs within float error of the cut may differ.
    assert diff <= near_threshold(x, np.array(sorted(diff), dtype=np.int64).reshape(-1, 2))
    assert np.all(got[:-1, 0] <= got[1:, 0])  # sorted by (i, j), as the other backends
    sims, idx = knn_search(x, K, config)
    assert sims.shape == idx.shape == ref["idx"].shape and idx.dtype == np.int64
    np.testing.assert_allclose(sims, ref["sims"], atol=1e-5)
    # Neighbour ids agree except where two neighbours tie in similarity.
    same = (idx == ref["idx"]).mean()
    assert same > 0.999


def test_torch_backend_matches_faiss_cpu():
    pytest.importorskip("faiss")
    check_against(reference(), KnnConfig(backend="torch", device="cpu", block_mb=1))  # many blocks


def test_torch_backend_small_inputs():
    x = clustered_vectors(12)
    assert similar_pairs(x[:1], THRESHOLD, KnnConfig(backend="torch", device="cpu")).shape == (0, 2)
    sims, idx = knn_search(x, 50, KnnConfig(backend="torch", device="cpu"))
    assert sims.shape == (12, 12) and (idx[:, 0] == np.arange(12)).all()


@pytest.mark.gpu
def test_torch_backend_on_cuda_matches_faiss_cpu():
    check_against(load_reference(), KnnConfig(backend="torch", device=gpu_device()))
