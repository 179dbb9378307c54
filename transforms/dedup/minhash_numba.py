"""Optional numba kernels for MinHash signatures (the `fast` extra).

Two kernels, both bit-identical to the numpy path in `minhash_signature.py` (tests/dedup/test_minhash.py
checks): `signatures_numba` takes flat shingle hashes, `text_signatures_numba` starts from the
Arrow string column itself: it decodes each text's UTF-8, hashes its character n-grams and folds
them into the signature in one pass per document, so no array of code points or shingle hashes is
ever materialised (the stage uses this one). Large scratch arrays are allocated in numpy and passed in (numpy
asks the kernel for transparent huge pages; numba's own allocations fault 4 KiB at a time). A third, `shared_rows_numba`, finds the rows of the LSH bucket keys
that occur more than once (the reducers' step), grouped by key, without sorting them all. Two more serve the map task
of the shuffle: `band_keys_numba` hashes each band of a signature into its bucket key (bit-identical
to `minhash_signature.band_keys`, whose numpy form copies the signatures to uint64 and makes six passes
over them: as slow as the signatures themselves), and `split_by_partition_numba` puts the keys in
reducer order with one counting sort instead of an argsort and two gathers.

Why the arithmetic is written in uint32: every permutation is `a*x + b (mod 2^32)` and the
minimum is taken over uint32 values, so the inner loop over the `num_perm` lanes compiles to 32-bit
SIMD (`vpmulld`, `vpaddd`, `vpminud`: 8 lanes per AVX2 instruction). The first version of this
kernel widened to uint64 and masked, and branched on `v < row[p]`: LLVM then emitted 4-lane 64-bit
multiplies and a compare-and-select, and on this machine's CPU (LLVM: znver1, AVX2 as 2x128-bit
halves) it ran at ~110k rows/CPU-s, *slower* than numpy. Writing `min(row[p], uint32(a*x + b))`
gives ~450k rows/CPU-s for the signature step alone (docs/minhash.md has the side-by-side run).
`fastmath` does not apply (integer code) and `parallel` is not used: Ray already runs one task
per core, and "per core" is what is measured. numba is an optional extra because vLLM's
environment pins its own numba; without it the numpy path runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from transforms.core.deps import is_available

_KERNELS: dict[str, Any] = {}


def available() -> bool:
    return is_available("numba")


def _compile() -> dict[str, Any]:
    import numba

    u32 = np.uint32
    full = u32(0xFFFFFFFF)
    u64 = np.uint64
    band_mul, poly64 = u64(0x9E3779B97F4A7C15), u64(0x100000001B3)  # minhash_signature's _BAND_MUL, _POLY
    fmix1, fmix2, s33 = u64(0xFF51AFD7ED558CCD), u64(0xC4CEB9FE1A85EC53), u64(33)

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def from_hashes(hashes: np.ndarray, bounds: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        num_perm = a.shape[0]
        for d in range(bounds.shape[0] - 1):
            row = out[d]
            row[:] = full
            for s in range(bounds[d], bounds[d + 1]):
                x = hashes[s]
                for p in range(num_perm):
                    row[p] = min(row[p], u32(a[p] * x + b[p]))

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def from_utf8(data: np.ndarray, offsets: np.ndarray, ngram: int, poly: np.uint32, a: np.ndarray,
                  b: np.ndarray, out: np.ndarray) -> None:
        num_perm = a.shape[0]
        cps = np.empty(256, u32)
        row = np.empty(num_perm, u32)
        m6 = u32(0x3F)
        for d in range(offsets.shape[0] - 1):
            lo, hi = offsets[d], offsets[d + 1]
            if hi - lo + ngram > cps.shape[0]:
                cps = np.empty(2 * (hi - lo + ngram), u32)
            # UTF-8 -> code points (Arrow has validated the bytes).
            m = 0
            i = lo
            while i < hi:
                c0 = u32(data[i])
                if c0 < 0x80:
                    cp = c0
                    i += 1
                elif c0 < 0xE0:
                    cp = ((c0 & u32(0x1F)) << u32(6)) | (u32(data[i + 1]) & m6)
                    i += 2
                elif c0 < 0xF0:
                    cp = (((c0 & u32(0x0F)) << u32(12)) | ((u32(data[i + 1]) & m6) << u32(6))
                          | (u32(data[i + 2]) & m6))
                    i += 3
                else:
                    cp = (((c0 & u32(0x07)) << u32(18)) | ((u32(data[i + 1]) & m6) << u32(12))
                          | ((u32(data[i + 2]) & m6) << u32(6)) | (u32(data[i + 3]) & m6))
                    i += 4
                cps[m] = cp
                m += 1
            while m < ngram:  # a short text is one shingle padded with NUL
                cps[m] = 0
                m += 1
            row[:] = full
            for s in range(m - ngram + 1):
                # The polynomial of shingle_hashes: ((c0*P + c1)*P + ...)*P + c_{n-1}, then fmix32.
                h = u32(cps[s] * poly)
                for k in range(1, ngram):
                    h = u32(h + cps[s + k])
                    if k < ngram - 1:
                        h = u32(h * poly)
                h ^= h >> u32(16)
                h = u32(h * u32(0x85EBCA6B))
                h ^= h >> u32(13)
                h = u32(h * u32(0xC2B2AE35))
                h ^= h >> u32(16)
                for p in range(num_perm):
                    row[p] = min(row[p], u32(a[p] * h + b[p]))
            out[d, :] = row

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def groups(keys: np.ndarray, bits: int, out_rows: np.ndarray, piece_keys: np.ndarray, piece_rows: np.ndarray
               ) -> int:
        # Counting sort by the top `bits` bits (keys are fmix64 output: uniform), then, per piece, an
        # open-addressing table on the low bits holding each key's first row: a key met again is chained
        # behind it. The rows of every key met more than once are written out together (its rows in input
        # order), piece by piece; returns how many.
        n = keys.shape[0]
        shift = np.uint64(64 - bits)
        starts = np.zeros((1 << bits) + 1, np.int64)
        for i in range(n):
            starts[(keys[i] >> shift) + 1] += 1
        for j in range(1 << bits):
            starts[j + 1] += starts[j]
        fill = starts[:-1].copy()
        for i in range(n):
            j = keys[i] >> shift
            piece_keys[fill[j]] = keys[i]
            piece_rows[fill[j]] = i
            fill[j] += 1
        widest = 2
        for j in range(1 << bits):
            widest = max(widest, starts[j + 1] - starts[j])
        size = 1
        while size < 2 * widest:
            size *= 2
        table = np.empty(size, np.int32)
        nxt = np.empty(widest, np.int32)  # the next row of the same key in the piece, -1 at the end
        last = np.empty(widest, np.int32)  # a first row's chain end
        count = np.empty(widest, np.int32)  # rows of the key at its first row, 0 at the others
        m = 0
        for j in range(1 << bits):
            lo, hi = starts[j], starts[j + 1]
            if hi - lo < 2:
                continue
            mask = 1
            while mask < 2 * (hi - lo):
                mask *= 2
            mask -= 1
            table[:mask + 1] = -1
            repeated = False
            for t in range(hi - lo):
                key = piece_keys[lo + t]
                slot = np.int64(key & np.uint64(mask))
                nxt[t] = -1
                while True:
                    first = table[slot]
                    if first < 0:
                        table[slot] = t
                        count[t] = 1
                        last[t] = t
                        break
                    if piece_keys[lo + first] == key:
                        nxt[last[first]] = t
                        last[first] = t
                        count[first] += 1
                        count[t] = 0
                        repeated = True
                        break
                    slot = (slot + 1) & mask
            if not repeated:
                continue
            for t in range(hi - lo):
                if count[t] > 1:
                    c = t
                    while c >= 0:
                        out_rows[m] = piece_rows[lo + c]
                        m += 1
                        c = nxt[c]
        return m

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def bands(sig: np.ndarray, rows: int, out: np.ndarray) -> None:
        # minhash_signature.band_keys, one key at a time: h = (j+1)*M; per row h = (h ^ v)*P; fmix64.
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                h = u64(j + 1) * band_mul
                for k in range(rows):
                    h = (h ^ u64(sig[i, j * rows + k])) * poly64
                h ^= h >> s33
                h *= fmix1
                h ^= h >> s33
                h *= fmix2
                h ^= h >> s33
                out[i, j] = h

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def split(keys: np.ndarray, text_rows: np.ndarray, k: int, out_keys: np.ndarray, out_rows: np.ndarray,
              bounds: np.ndarray, part: np.ndarray) -> None:
        # keys is (texts, bands) flattened; a stable counting sort by key % k. The partition of each key is
        # computed once (a mask when k is a power of two: a 64-bit modulo is a division) and the text's row is
        # read once per text, not divided out of the key's index.
        n = text_rows.shape[0]
        nb = keys.shape[0] // max(n, 1)
        kk = u64(k)
        mask = u64(k - 1)
        pow2 = (k & (k - 1)) == 0
        for i in range(keys.shape[0]):
            q = np.int32(keys[i] & mask) if pow2 else np.int32(keys[i] % kk)
            part[i] = q
            bounds[q + 1] += 1
        for p in range(k):
            bounds[p + 1] += bounds[p]
        fill = bounds[:-1].copy()
        i = 0
        for t in range(n):
            row = text_rows[t]
            for _ in range(nb):
                q = part[i]
                f = fill[q]
                out_keys[f] = keys[i]
                out_rows[f] = row
                fill[q] = f + 1
                i += 1

    return {"from_hashes": from_hashes, "from_utf8": from_utf8, "groups": groups, "bands": bands, "split": split}


def _kernel(name: str) -> Any:
    if not _KERNELS:
        _KERNELS.update(_compile())
    return _KERNELS[name]


def _rows_of(out: np.ndarray, n: int, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """The first `n` rows of a caller's buffer, checked: the kernels write through it."""
    if out.dtype != dtype or out.shape[1:] != shape or len(out) < n or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous {np.dtype(dtype)} of shape (>= {n}, {shape})")
    return out[:n]


def signatures_numba(hashes: np.ndarray, counts: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`(n, num_perm)` uint32 signatures, like `signatures_from_hashes`, in one fused pass."""
    n = len(counts)
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    out = np.empty((n, len(a)), np.uint32)
    _kernel("from_hashes")(np.ascontiguousarray(hashes, np.uint32), bounds, np.ascontiguousarray(a, np.uint32),
                           np.ascontiguousarray(b, np.uint32), out)
    return out


def shared_rows_numba(keys: np.ndarray) -> np.ndarray:
    """The rows of the (well-mixed) uint64 keys that occur more than once, grouped: each key's rows together, in
    input order (the groups in no particular order). One pass over hashed pieces, no sort."""
    keys = np.ascontiguousarray(keys, np.uint64)
    out = np.empty(len(keys), np.int64)
    if len(keys) < 2:
        return out[:0]
    # Pieces of ~16k keys: each piece's table (32k slots, 128 KiB) stays in L2; measured 16-20 ns a key on 4M keys
    # against 122 for a numpy argsort.
    bits = int(min(20, max(1, np.ceil(np.log2(len(keys) / 16_384)))))
    # Scratch arrays from numpy, not inside the kernel: numpy asks for transparent huge pages on large arrays, numba's
    # allocator does not, and 4 KiB page faults on fresh memory were most of the reducers' system time (228k faults,
    # ~1 CPU-s at 3M rows, on this VM).
    piece_rows = np.empty(len(keys), np.int32 if len(keys) < 1 << 31 else np.int64)
    return out[:_kernel("groups")(keys, bits, out, np.empty(len(keys), np.uint64), piece_rows)]


def shared_keys_numba(keys: np.ndarray) -> np.ndarray:
    """Which of these (well-mixed) uint64 keys occur more than once: a bool mask, like the numpy sort."""
    out = np.zeros(len(keys), dtype=np.bool_)
    out[shared_rows_numba(keys)] = True
    return out


def text_signatures_numba(arr: pa.Array, ngram: int, poly: np.uint32, a: np.ndarray, b: np.ndarray,
                          out: np.ndarray | None = None) -> np.ndarray:
    """`(n, num_perm)` uint32 signatures straight from a null-free (large_)string Arrow array (written into the
    first `n` rows of `out` when given)."""
    n = len(arr)
    out = np.empty((n, len(a)), np.uint32) if out is None else _rows_of(out, n, (len(a),), np.uint32)
    if n == 0:
        return out
    large = pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32,
                            count=arr.offset + n + 1)[arr.offset:].astype(np.int64)
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    _kernel("from_utf8")(data, offsets, ngram, np.uint32(poly), np.ascontiguousarray(a, np.uint32),
                         np.ascontiguousarray(b, np.uint32), out)
    return out


def band_keys_numba(signatures: np.ndarray, bands: int, rows: int, out: np.ndarray | None = None) -> np.ndarray:
    """`(n, bands)` uint64 bucket keys, bit-identical to `minhash_signature.band_keys` (its numpy form), written into
    `out` when given."""
    n = signatures.shape[0]
    out = np.empty((n, bands), np.uint64) if out is None else _rows_of(out, n, (bands,), np.uint64)
    if len(out):
        _kernel("bands")(np.ascontiguousarray(signatures, np.uint32), rows, out)
    return out


def split_by_partition_numba(keys: np.ndarray, text_rows: np.ndarray, k: int
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `(texts, bands)` keys flattened, in reducer order (`key % k`, stable), each key's row in `text_rows`
    order (int64 or uint32, as given), and the `k + 1` bounds of each reducer's slice: what an argsort by partition
    and two gathers give."""
    keys = np.ascontiguousarray(keys, np.uint64).ravel()
    text_rows = np.ascontiguousarray(text_rows)
    if text_rows.dtype not in (np.int64, np.uint32):
        text_rows = text_rows.astype(np.int64)
    out_keys, out_rows = np.empty(len(keys), np.uint64), np.empty(len(keys), text_rows.dtype)
    bounds = np.zeros(k + 1, np.int64)
    if len(keys):
        _kernel("split")(keys, text_rows, k, out_keys, out_rows, bounds, np.empty(len(keys), np.int32))
    return out_keys, out_rows, bounds
