"""The decisions of the embedding dedup stages on vectors, in numpy (no Arrow): which row a row duplicates
(`greedy_keep`, semantic_dedup and the review suggestions) and each row's semantic neighbours
(`semantic_neighbours`, review_neighbours). The stages call them on their embeddings; scripts/gpu_check.sh
calls them on a GPU machine that has torch but not pyarrow, to compare the decisions e5-torch makes on cuda
with the CPU's (scripts/gpu_dedup_check.py).
"""

from __future__ import annotations

import numpy as np

from transforms.embed.knn import KnnConfig, knn_search


def greedy_keep(n: int, pairs: np.ndarray, order: np.ndarray) -> np.ndarray:
    """duplicate_of index per row (-1 = kept), visiting rows in `order` (a permutation of range(n))."""
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    earlier: dict[int, list[int]] = {}
    for a, b in pairs.tolist():
        first, later = (a, b) if rank[a] < rank[b] else (b, a)
        earlier.setdefault(later, []).append(first)
    dup = np.full(n, -1, dtype=np.int64)
    for row in sorted(earlier, key=lambda r: rank[r]):
        kept = [j for j in earlier[row] if dup[j] < 0]
        if kept:
            dup[row] = min(kept, key=lambda j: rank[j])
    return dup


def semantic_neighbours(vectors: np.ndarray, k: int, m: int = 4,
                        knn: KnnConfig | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices, cosines, margins), each (n, k): every row's k best other rows, ranked by ratio margin.

    Cosines of e5 embeddings run high for any two Tamil items (the median item's nearest unrelated
    neighbour is at 0.94 on the bundled items), so a raw cosine cannot tell a paraphrase from a
    neighbour. The ratio margin (Artetxe & Schwenk, 2019) divides a pair's cosine by the mean cosine
    of both rows to their `m` nearest neighbours: a pair that stands out from its rows' usual
    neighbourhood scores above 1. Candidates are each row's `max(k, m)` nearest by cosine (`knn`: FAISS by
    default, torch on a GPU node).
    """
    n = len(vectors)
    width = min(k, n - 1) if n > 1 else 0
    if width == 0:
        return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float32), np.zeros((n, 0), np.float32)
    sims, idx = knn_search(vectors, min(max(k, m) + 1, n), knn)
    others = [[(float(s), int(j)) for s, j in zip(sims[r], idx[r], strict=True) if j != r and j >= 0]
              for r in range(n)]
    avg = np.array([np.mean([s for s, _ in row[:m]]) for row in others], dtype=np.float32)
    out_i = np.zeros((n, width), np.int64)
    out_c = np.zeros((n, width), np.float32)
    out_m = np.zeros((n, width), np.float32)
    for r, row in enumerate(others):
        ranked = sorted(((s / ((avg[r] + avg[j]) / 2), s, j) for s, j in row), reverse=True)[:width]
        out_m[r], out_c[r], out_i[r] = [x[0] for x in ranked], [x[1] for x in ranked], [x[2] for x in ranked]
    return out_i, out_c, out_m
