"""Optional numba kernel for the MinHash inner loop (the `fast` extra).

numpy needs three passes over a `(num_perm, chunk)` temporary (multiply, add, segmented min);
this kernel does one pass with no temporary: for each shingle, `a*x + b (mod 2^32)` for every
permutation, folded into the running minimum of its document. Same arithmetic, same result as
`signatures_from_hashes` (tests/test_minhash.py checks they are equal). numba is an optional
extra because vLLM's environment pins its own numba; without it the numpy path runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transforms.core.deps import is_available

_KERNEL: Any = None


def available() -> bool:
    return is_available("numba")


def _compile() -> Any:
    import numba

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def kernel(hashes: np.ndarray, bounds: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        num_perm = a.shape[0]
        mask = np.uint64(0xFFFFFFFF)
        a64 = a.astype(np.uint64)
        b64 = b.astype(np.uint64)
        row = np.empty(num_perm, np.uint64)
        for d in range(bounds.shape[0] - 1):
            row[:] = mask
            for s in range(bounds[d], bounds[d + 1]):
                x = np.uint64(hashes[s])
                for p in range(num_perm):
                    v = (a64[p] * x + b64[p]) & mask
                    if v < row[p]:
                        row[p] = v
            for p in range(num_perm):
                out[d, p] = np.uint32(row[p])

    return kernel


def signatures_numba(hashes: np.ndarray, counts: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`(n, num_perm)` uint32 signatures, like `signatures_from_hashes`, in one fused pass."""
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _compile()
    n = len(counts)
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    out = np.empty((n, len(a)), np.uint32)
    _KERNEL(np.ascontiguousarray(hashes, np.uint32), bounds, a, b, out)
    return out
