"""JSON Lines: one task per byte range of a file (Hadoop-style splits), tables of a few thousand
lines at a time. Every line is a row: bad lines (not JSON, not UTF-8, not an object, blank,
oversized) become rejected rows whose id is `<file>@<byte offset>`, so they can be found again."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.core import columns as C
from transforms.io.common import ColumnMapping, InputFormatError, bad_records, mapping_error, to_common

log = logging.getLogger("piqaforge")

ROWS_PER_TABLE = 8192


def jsonl_tasks(path: Path, block_bytes: int) -> list[dict[str, Any]]:
    size = path.stat().st_size
    return [{"format": "jsonl", "path": str(path), "start": s, "end": min(s + block_bytes, size)}
            for s in range(0, size, block_bytes)]


def check_jsonl_mapping(path: Path, mapping: ColumnMapping, sample_lines: int = 1000) -> None:
    """Fail early when the mapped text (or id) field appears in none of the first records."""
    seen: set[str] = set()
    parsed = 0
    with open(path, "rb") as f:
        first = f.readline().strip()
    if first.startswith(b"[") and not _parses(first):
        raise InputFormatError(f"{path} looks like one JSON array, not JSON Lines (one object per line); "
                               f"convert it (e.g. `jq -c '.[]'`) or export JSONL.")
    with open(path, "rb") as f:
        for _, raw in zip(range(sample_lines), f, strict=False):
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(record, dict):
                parsed += 1
                seen.update(record)
    if not parsed:
        return  # nothing parseable up front: every line becomes a rejected row with its reason
    required = {"text": mapping.text, **({"id": mapping.id} if mapping.id else {})}
    missing = {k: v for k, v in required.items() if v not in seen}
    if missing:
        raise mapping_error(f"{path}: none of the first {parsed} records has field(s)", missing,
                            f"fields seen: {sorted(seen)}")
    for key in ("source", "url", "title", "body"):
        field = getattr(mapping, key)
        if field is not None and field not in seen:
            log.warning("%s: mapped field %s=%r is absent from the first %d records", path, key, field, parsed)


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def read_jsonl_range(task: dict[str, Any], mapping: ColumnMapping, max_bytes: int) -> Iterator[pa.Table]:
    """Yield tables for the lines that *start* inside [start, end)."""
    path, start, end = task["path"], task["start"], task["end"]
    name = os.path.basename(path)
    good: list[dict[str, Any]] = []
    good_ids: list[str] = []
    bad: tuple[list[str], list[str], list[str]] = ([], [], [])

    def flush() -> Iterator[pa.Table]:
        if good:
            yield _records_table(good, good_ids, mapping, name, max_bytes)
        if bad[0]:
            yield bad_records(bad[0], name, bad[1], bad[2])
        good.clear()
        good_ids.clear()
        for lst in bad:
            lst.clear()

    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()
        pos = f.tell()
        while pos < end:
            raw = f.readline()
            if not raw:
                break
            rid = f"{name}@{pos}"
            pos += len(raw)
            reason, detail, record = _parse_line(raw, max_bytes)
            if reason is None:
                good.append(record)
                good_ids.append(rid)
            else:
                bad[0].append(rid)
                bad[1].append(reason)
                bad[2].append(detail)
            if len(good) + len(bad[0]) >= ROWS_PER_TABLE:
                yield from flush()
    yield from flush()


def _parse_line(raw: bytes, max_bytes: int) -> tuple[str | None, str, dict[str, Any]]:
    if not raw.strip():
        return "blank_line", "", {}
    if len(raw) > max_bytes:
        # Not parsed: the point of the limit is not to build a huge object; the id locates it.
        return "oversized_record", f"{len(raw)} bytes > max_record_bytes={max_bytes}", {}
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return "invalid_utf8", str(err)[:200], {}
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return "malformed_json", f"{err.msg} at col {err.colno}: {line[:200]}", {}
    if not isinstance(record, dict):
        return "malformed_json", f"not a JSON object: {line[:200]}", {}
    return None, "", record


def _records_table(records: list[dict[str, Any]], ids: list[str], mapping: ColumnMapping, name: str,
                   max_bytes: int) -> pa.Table:
    fields = mapping.fields()
    reasons: list[str | None] = [None] * len(records)
    columns: dict[str, list[Any]] = {}
    for common, field in fields.items():
        values: list[Any] = []
        for i, record in enumerate(records):
            value = record.get(field)
            if value is None or isinstance(value, str):
                values.append(value)
            elif isinstance(value, dict | list):
                values.append(None)
                if common == C.TEXT:
                    reasons[i] = "invalid_text_type"
            else:  # numbers and booleans: their JSON spelling
                values.append(json.dumps(value))
        columns[field] = values
    for i, record in enumerate(records):
        if reasons[i] is None and mapping.text not in record:
            reasons[i] = "missing_text"
    raw = pa.table({field: pa.array(values, pa.string()) for field, values in columns.items()})
    return to_common(raw, mapping, pa.array(ids, pa.string()), name, max_bytes,
                     reasons=pa.array(reasons, pa.string()))
