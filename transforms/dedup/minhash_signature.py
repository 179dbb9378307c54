"""MinHash signatures for a whole batch of texts at once, in numpy.

No Python loop runs per document or per shingle: the batch is decoded to one array of Unicode
code points, every character n-gram is hashed at once (a polynomial over the code points mod 2^32, then the
murmur3 32-bit finaliser), and each permutation is a universal hash
`a*x + b (mod 2^32)` applied to all shingles of a chunk of documents as one
`(num_perm, shingles)` uint32 matrix, reduced per document with `np.minimum.reduceat`. Chunks are a
few thousand shingles so the matrix stays in cache and its buffer is reused (this, more than the
arithmetic, decides the speed: see docs/minhash.md).

Why `mod 2^32` and not `mod (2^61 - 1)` as in datasketch: numpy has no 128-bit product, which the
Mersenne-prime form needs for 64-bit keys, and 32-bit lanes halve the memory traffic (measured
~2x faster than the same scheme in uint64). Multiply-add modulo a power of two is the
multiply-shift universal family (Dietzfelbinger et al.); the minimum is decided by the well-mixed
high bits. On 5,000 near-duplicate pairs (real questions, injected edits) the bias is +0.0002, RMSE 0.0296,
equal to the sqrt(J(1-J)/128) = 0.0295 that ideal permutations give; `tests/dedup/test_minhash.py`
checks it against exact Jaccard on real Korean questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.core.deps import require

_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_POLY = np.uint64(0x100000001B3)  # FNV-64 prime: odd, so the polynomial is a bijection per position
_BAND_MUL = np.uint64(0x9E3779B97F4A7C15)
_S33 = np.uint64(33)
_POLY32 = np.uint32(0x01000193)  # FNV-32 prime
_FMIX32_1 = np.uint32(0x85EBCA6B)
_FMIX32_2 = np.uint32(0xC2B2AE35)
_S16 = np.uint32(16)
_S13 = np.uint32(13)

# Shingles per chunk: (num_perm x chunk) uint32 = 4 MiB at 128 permutations. Measured on this
# machine: 4096-8192 are fastest; below 2048 the per-chunk Python overhead shows.
DEFAULT_CHUNK_SHINGLES = 8192


def fmix32(h: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finaliser, in place on a uint32 array."""
    h ^= h >> _S16
    h *= _FMIX32_1
    h ^= h >> _S13
    h *= _FMIX32_2
    h ^= h >> _S16
    return h


def fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser (a bijection with full avalanche), in place on a uint64 array."""
    h ^= h >> _S33
    h *= _FMIX1
    h ^= h >> _S33
    h *= _FMIX2
    h ^= h >> _S33
    return h


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The uint32 `(a, b)` coefficients of the `num_perm` hash functions; `a` is odd."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**32 - 1, size=num_perm, dtype=np.uint32, endpoint=True) | np.uint32(1)
    b = rng.integers(0, 2**32 - 1, size=num_perm, dtype=np.uint32, endpoint=True)
    return a, b


def _as_string_array(texts: pa.Array | pa.ChunkedArray | Sequence[str | None]) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if not isinstance(texts, pa.Array):
        texts = pa.array(texts, type=pa.large_string())
    if pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type):
        return texts.fill_null("")
    return texts.cast(pa.large_string()).fill_null("")


def shingle_hashes(texts: pa.Array | pa.ChunkedArray | Sequence[str | None], ngram: int = 5
                   ) -> tuple[np.ndarray, np.ndarray]:
    """uint32 hashes of every character n-gram of every text, flat, with per-text counts.

    A text shorter than `ngram` (or empty) counts as one shingle, itself padded with NUL, so every
    text has at least one shingle and a signature. Hashes within a text are not de-duplicated:
    repeats do not change a minimum.
    """
    if ngram < 1:
        raise ValueError("ngram must be >= 1")
    arr = pc.utf8_rpad(_as_string_array(texts), width=ngram, padding="\x00")
    n = len(arr)
    if n == 0:
        return np.empty(0, np.uint32), np.empty(0, np.int64)
    char_lens = pc.utf8_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    # One decode of the whole UTF-8 buffer; offsets are sliced so a sliced array works too.
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if pa.types.is_large_string(arr.type) else np.int32,
                            count=arr.offset + n + 1, offset=0)[arr.offset:]
    data = arr.buffers()[2]
    raw = memoryview(data)[int(offsets[0]):int(offsets[-1])] if data is not None else b""
    codepoints = np.frombuffer(bytes(raw).decode("utf-8").encode("utf-32-le"), dtype=np.uint32)

    windows = len(codepoints) - ngram + 1
    h = codepoints[:windows] * _POLY32
    for k in range(1, ngram):
        h += codepoints[k:windows + k]
        if k < ngram - 1:
            h *= _POLY32
    # Drop the windows that start in one text and end in the next: the last ngram-1 starts of each text.
    ends = np.cumsum(char_lens)
    crossing = (ends[:, None] - np.arange(1, ngram, dtype=np.int64)[None, :]).ravel()
    valid = np.ones(windows, dtype=bool)
    valid[crossing[crossing < windows]] = False
    return fmix32(h[valid]), char_lens - ngram + 1


def signatures_from_hashes(hashes: np.ndarray, counts: np.ndarray, a: np.ndarray, b: np.ndarray,
                           chunk_shingles: int = DEFAULT_CHUNK_SHINGLES) -> np.ndarray:
    """`(n, num_perm)` uint32 MinHash signatures from flat shingle hashes and per-text counts."""
    n, num_perm = len(counts), len(a)
    if n == 0:
        return np.empty((0, num_perm), np.uint32)
    if (counts < 1).any():
        raise ValueError("every text needs at least one shingle")
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    out = np.empty((num_perm, n), np.uint32)
    buf = np.empty((num_perm, max(chunk_shingles, int(counts.max()))), np.uint32)
    a_col, b_col = a[:, None], b[:, None]
    start = 0
    while start < n:
        # Texts [start, stop) whose shingles fit the chunk; at least one text even if it is longer.
        stop = int(np.searchsorted(bounds, bounds[start] + chunk_shingles, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        lo, hi = int(bounds[start]), int(bounds[stop])
        mat = buf[:, : hi - lo]
        np.multiply(a_col, hashes[lo:hi][None, :], out=mat)
        mat += b_col
        out[:, start:stop] = np.minimum.reduceat(mat, bounds[start:stop] - lo, axis=1)
        start = stop
    return np.ascontiguousarray(out.T)


def minhash_signatures(texts: pa.Array | pa.ChunkedArray | Sequence[str | None], *, num_perm: int = 128,
                       ngram: int = 5, seed: int = 42, chunk_shingles: int = DEFAULT_CHUNK_SHINGLES,
                       backend: Literal["auto", "numpy", "numba"] = "auto", out: np.ndarray | None = None
                       ) -> np.ndarray:
    """MinHash signatures of character `ngram`-shingle sets: `np.ndarray[n, num_perm]` of uint32.

    `backend="auto"` uses the fused numba kernel when numba is installed (the `fast` extra: raw
    UTF-8 to signature in one pass, 2-4x faster than numpy here, see docs/minhash.md) and numpy
    otherwise; both give identical signatures. `out` (C-contiguous uint32, at least `n` rows) is filled
    and its first `n` rows returned: a caller that goes through many batches reuses one buffer instead of
    touching fresh pages for each (page faults cost more than the copy on a VM).
    """
    if ngram < 1:
        raise ValueError("ngram must be >= 1")
    a, b = permutations(num_perm, seed)
    from transforms.dedup import minhash_numba

    if backend == "numba" or (backend == "auto" and minhash_numba.available()):
        if backend == "numba":
            require("numba", "fast", "the numba MinHash kernel")
        return minhash_numba.text_signatures_numba(_as_string_array(texts), ngram, _POLY32, a, b, out)
    hashes, counts = shingle_hashes(texts, ngram)
    sig = signatures_from_hashes(hashes, counts, a, b, chunk_shingles)
    if out is None:
        return sig
    out[:len(sig)] = sig
    return out[:len(sig)]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Fraction of equal signature positions (row-wise for 2-D input)."""
    return np.asarray((sig_a == sig_b).mean(axis=-1))


def band_keys(signatures: np.ndarray, bands: int, rows: int,
              backend: Literal["auto", "numpy", "numba"] = "auto", out: np.ndarray | None = None) -> np.ndarray:
    """`(n, bands)` uint64 bucket keys: band `i`'s `rows` values hashed together with `i`.

    The band index is folded into the key, so one key column identifies a (band, bucket) pair;
    two different bands collide with probability 2^-64 per pair. With numba (the `fast` extra) one
    kernel computes the same keys ~10x faster than the numpy passes below.
    """
    n, num_perm = signatures.shape
    if bands * rows > num_perm:
        raise ValueError(f"bands*rows = {bands * rows} exceeds num_perm = {num_perm}")
    from transforms.dedup import minhash_numba

    if backend == "numba" or (backend == "auto" and minhash_numba.available()):
        return minhash_numba.band_keys_numba(signatures, bands, rows, out)
    block = signatures[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    h = np.broadcast_to((np.arange(bands, dtype=np.uint64) + np.uint64(1)) * _BAND_MUL, (n, bands)).copy()
    for j in range(rows):
        h ^= block[:, :, j]
        h *= _POLY
    if out is None:
        return fmix64(h)
    out[:] = fmix64(h)
    return out
