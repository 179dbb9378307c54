"""Read JSONL crawls into the common schema, streaming, one Ray task per byte range.

Bad records are not errors: a line that is not JSON, not UTF-8, or has no text becomes a row with
a drop_reason and whatever could be recovered, so the read stage's counts add up to the lines seen.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.manifest import fingerprint_file


class ColumnMapping(BaseModel):
    """Which input field fills each common-schema column."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, description="Input id field; unset derives '<file>:<line>'.")
    text: str = Field("text", description="Field holding the question text.")
    source: str | None = Field(None, description="Field naming the source; unset uses the file name.")
    url: str | None = None
    title: str | None = None
    body: str | None = None


class CrawlInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(..., min_length=1, description="Files or directories of the crawl.")
    format: str = Field("auto", description="jsonl | parquet | csv | auto (by extension).")
    columns: ColumnMapping = Field(default_factory=ColumnMapping)
    max_record_bytes: int = Field(1 << 20, description="Records above this size are rejected as oversized.")
    block_bytes: int = Field(32 << 20, description="Bytes per read task.")


def list_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {raw}")
    if not files:
        raise FileNotFoundError(f"no input files under {paths}")
    return files


def _byte_ranges(path: Path, block: int) -> list[dict[str, Any]]:
    size = path.stat().st_size
    return [{"path": str(path), "start": s, "end": min(s + block, size)} for s in range(0, max(size, 1), block)]


def _row(mapping: ColumnMapping, record: dict[str, Any], fallback_id: str, source: str) -> dict[str, Any]:
    def get(field: str | None) -> Any:
        if field is None:
            return None
        value = record.get(field)
        return None if value is None else str(value)

    row = {
        C.ID: get(mapping.id) or fallback_id,
        C.TEXT: get(mapping.text),
        C.SOURCE: get(mapping.source) or source,
        "url": get(mapping.url),
        "title": get(mapping.title),
        "body": get(mapping.body),
        C.DROP_REASON: None,
    }
    if row[C.TEXT] is None:
        row[C.DROP_REASON] = "missing_text" if mapping.text not in record else "null_text"
    return row


def read_jsonl_range(task: dict[str, Any], mapping: ColumnMapping, max_bytes: int) -> list[dict[str, Any]]:
    """Lines that *start* inside [start, end) belong to this range (Hadoop-style splits)."""
    path, start, end = task["path"], task["start"], task["end"]
    name = os.path.basename(path)
    rows = []
    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()
        pos = f.tell()
        lineno = None
        while pos < end:
            raw = f.readline()
            if not raw:
                break
            line_start, pos = pos, f.tell()
            rid = f"{name}@{line_start}"  # byte offset: unique and stable without counting lines
            if lineno is None:
                lineno = 0
            if not raw.strip():
                continue
            if len(raw) > max_bytes:
                rows.append(_bad(rid, name, "oversized_record", f"{len(raw)} bytes"))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                rows.append(_bad(rid, name, "invalid_utf8", str(err)[:200]))
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                rows.append(_bad(rid, name, "malformed_json", f"{err.msg} at col {err.colno}: {text[:200]}"))
                continue
            if not isinstance(record, dict):
                rows.append(_bad(rid, name, "malformed_json", f"not an object: {text[:200]}"))
                continue
            rows.append(_row(mapping, record, rid, name))
    return rows


def _bad(rid: str, source: str, reason: str, detail: str) -> dict[str, Any]:
    return {C.ID: rid, C.TEXT: None, C.SOURCE: source, "url": None, "title": None, "body": detail,
            C.DROP_REASON: reason}


class CrawlSource:
    """The read stage of a crawl job."""

    name = "read"

    def __init__(self, spec: CrawlInput):
        self.spec = spec
        self.files = list_files(spec.paths)

    def describe(self) -> dict[str, Any]:
        return self.spec.model_dump()

    def fingerprints(self) -> list[dict[str, Any]]:
        return [fingerprint_file(f) for f in self.files]

    def read(self) -> Any:
        import ray

        tasks = [r for f in self.files for r in _byte_ranges(f, self.spec.block_bytes)]
        mapping, max_bytes = self.spec.columns, self.spec.max_record_bytes
        schema = CRAWL_WITH_REASON

        def read_batch(batch: pa.Table) -> pa.Table:
            rows = []
            for task in batch.to_pylist():
                rows += read_jsonl_range(task, mapping, max_bytes)
            return pa.Table.from_pylist(rows, schema=schema)

        return ray.data.from_items(tasks, override_num_blocks=len(tasks)).map_batches(
            read_batch, batch_format="pyarrow", batch_size=1)


CRAWL_WITH_REASON = C.CRAWL_SCHEMA.append(pa.field(C.DROP_REASON, pa.string()))
