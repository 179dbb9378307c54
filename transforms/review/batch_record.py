"""A review batch's record: `<lake>/review/<batch>/batch.json` (BatchRecord) and the exported rows it
fingerprints, `items.parquet`; loading a batch checks the rows were not changed after export."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from transforms.core.lake import Lake
from transforms.review.consensus import ConsensusRule
from transforms.review.vocabulary import VERDICTS, ReviewError

SHOWN = ("goal", "sol1", "sol2")

class BatchRecord(BaseModel):
    batch: str = Field(..., description="Batch name: the folder under <lake>/review/.")
    created_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    parent_run: str | None = Field(None, description="Run whose curated items were exported.")
    parent_batch: str | None = Field(None, description="Batch whose disagreement queue this batch re-exports.")
    parent_review_run: str | None = Field(None, description="For a requeued batch: the review run of the batch it "
                                          "came from; the import's run has it as parent (adjudication round).")
    dataset: str = ""
    recipe: str = ""
    format: Literal["labelstudio", "csv"] = "labelstudio"
    annotators: list[str] = Field(default_factory=list, description="Annotator names (or slots ann_1..ann_N).")
    named_annotators: bool = Field(False, description="True when `annotators` are real names: judgments by "
                                   "anyone else are rejected. Slots accept any name, up to N per item.")
    rule: ConsensusRule = Field(default_factory=ConsensusRule)
    automatic: bool = Field(False, description="Filled by LLM annotators (review=auto), not people.")
    n_items: int = 0
    item_ids: list[str] = Field(default_factory=list)
    fingerprint: str = Field("", description="sha256 of the exported rows (id, goal, sol1, sol2, label).")
    verdicts: list[str] = Field(default_factory=lambda: list(VERDICTS))
    files: dict[str, str] = Field(default_factory=dict)
    labelstudio: dict[str, Any] = Field(default_factory=dict, description="url and project id after push.")
    imports: list[dict[str, Any]] = Field(default_factory=list, description="One entry per import.")

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "batch.json.tmp"
        tmp.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(folder / "batch.json")


def batch_dir(lake: Lake, batch: str) -> Path:
    return lake.root / "review" / batch


def load_batch(lake: Lake, batch: str) -> tuple[BatchRecord, pa.Table]:
    folder = batch_dir(lake, batch)
    if not (folder / "batch.json").exists():
        known = sorted(p.name for p in (lake.root / "review").glob("*") if (p / "batch.json").exists())
        raise ReviewError(f"no review batch {batch!r} under {lake.root / 'review'}; batches: {known}")
    record = BatchRecord.model_validate_json((folder / "batch.json").read_text(encoding="utf-8"))
    items = pq.read_table(folder / "items.parquet")
    if fingerprint(items) != record.fingerprint:
        raise ReviewError(f"{folder / 'items.parquet'} no longer matches the batch's fingerprint: the exported "
                          "rows were changed after export")
    return record, items


def fingerprint(items: pa.Table) -> str:
    """sha256 over the exported rows in order, as canonical JSON lines of the reviewed fields."""
    cols = [c for c in ("id", *SHOWN, "label") if c in items.schema.names]
    h = hashlib.sha256()
    for row in items.select(cols).to_pylist():
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


def judgment_id(batch: str, item_id: str, annotator: str) -> str:
    return f"{batch}/{item_id}/{annotator}"
