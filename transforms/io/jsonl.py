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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from transforms.core import columns as C
from transforms.core.drop_reasons import reason_array
from transforms.io.common import (
    ColumnMapping,
    CrawlDrops,
    InputFormatError,
    bad_records,
    mapping_error,
    to_common,
)

log = logging.getLogger("piqaforge")

ROWS_PER_TABLE = 8192
NEWLINE, BRACE = ord("\n"), ord("{")


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


def read_jsonl_range(task: dict[str, Any], mapping: ColumnMapping, max_bytes: int,
                     fast: bool = True) -> Iterator[pa.Table]:
    """Yield tables for the lines that *start* inside [start, end), `ROWS_PER_TABLE` lines at a time.

    The range is read in one piece and cut into lines with numpy. A chunk of lines that is plainly clean (every
    line an object starting at its first byte, none over `max_bytes`, valid UTF-8, every mapped field a string
    or null, the text present) is parsed by Arrow's JSON reader in C++ (≈ 4× less CPU than `json.loads` per
    line, docs/front_half.md); any other chunk, and every chunk with `fast=False`, goes line by line through
    `_parse_line`, which names what is wrong with each bad line. Both give the same rows (tests/io/test_jsonl_fast.py).
    """
    path, start, end = task["path"], task["start"], task["end"]
    name = os.path.basename(path)
    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                f.readline()
        base = f.tell()
        if base >= end:
            return
        buf = f.read(end - base)
        if buf and not buf.endswith(b"\n"):
            buf += f.readline()  # the last line started inside the range: read it to its end
    if not buf:
        return
    ends = np.flatnonzero(np.frombuffer(buf, np.uint8) == NEWLINE) + 1
    if not ends.size or ends[-1] != len(buf):
        ends = np.append(ends, len(buf))
    starts = np.concatenate([[0], ends[:-1]])
    for lo in range(0, len(starts), ROWS_PER_TABLE):
        s, e = starts[lo:lo + ROWS_PER_TABLE], ends[lo:lo + ROWS_PER_TABLE]
        table = _fast_table(buf, s, e, base, name, mapping, max_bytes) if fast else None
        if table is not None:
            yield table
        else:
            yield from _tables_line_by_line(buf, s, e, base, name, mapping, max_bytes)


def _fast_table(buf: bytes, starts: np.ndarray, ends: np.ndarray, base: int, name: str, mapping: ColumnMapping,
                max_bytes: int) -> pa.Table | None:
    """The chunk's rows parsed by Arrow, or None when any line needs `_parse_line`'s judgement."""
    if int((ends - starts).max()) > max_bytes or not bool(np.all(np.frombuffer(buf, np.uint8)[starts] == BRACE)):
        return None  # oversized, blank or not an object at its first byte (a BOM, an array, a stray newline)
    chunk = memoryview(buf)[int(starts[0]):int(ends[-1])]
    try:  # Arrow does not check the UTF-8 of fields it ignores; json.loads would refuse the whole line
        pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, len(chunk)], np.int32)),
                                    pa.py_buffer(chunk)).validate(full=True)
    except pa.ArrowInvalid:
        return None
    fields = list(dict.fromkeys(mapping.fields().values()))
    schema = pa.schema([(f, pa.string()) for f in fields])
    try:  # a number, object or list in a mapped field, a repeated key, bad JSON: Arrow refuses, the lines decide
        raw = pj.read_json(pa.BufferReader(pa.py_buffer(chunk)),
                           read_options=pj.ReadOptions(use_threads=False, block_size=len(chunk) + 1),
                           parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if raw.num_rows != len(starts) or raw.column(mapping.text).null_count:
        return None  # two objects on a line, or a text that is null or missing (two different reasons)
    ids = pc.binary_join_element_wise(pa.scalar(f"{name}@"), pa.array(starts + base).cast(pa.string()), "")
    return to_common(raw.select(fields), mapping, ids, name, max_bytes)


def _tables_line_by_line(buf: bytes, starts: np.ndarray, ends: np.ndarray, base: int, name: str,
                         mapping: ColumnMapping, max_bytes: int) -> Iterator[pa.Table]:
    good: list[dict[str, Any]] = []
    good_ids: list[str] = []
    bad: tuple[list[str], list[CrawlDrops], list[str]] = ([], [], [])
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        rid = f"{name}@{base + s}"
        reason, detail, record = _parse_line(buf[s:e], max_bytes)
        if reason is None:
            good.append(record)
            good_ids.append(rid)
        else:
            bad[0].append(rid)
            bad[1].append(reason)
            bad[2].append(detail)
    if good:
        yield _records_table(good, good_ids, mapping, name, max_bytes)
    if bad[0]:
        yield bad_records(bad[0], name, bad[1], bad[2])


def _parse_line(raw: bytes, max_bytes: int) -> tuple[CrawlDrops | None, str, dict[str, Any]]:
    if not raw.strip():
        return CrawlDrops.BLANK_LINE, "", {}
    if len(raw) > max_bytes:
        # Not parsed: the point of the limit is not to build a huge object; the id locates it.
        return CrawlDrops.OVERSIZED_RECORD, f"{len(raw)} bytes > max_record_bytes={max_bytes}", {}
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return CrawlDrops.INVALID_UTF8, str(err)[:200], {}
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return CrawlDrops.MALFORMED_JSON, f"{err.msg} at col {err.colno}: {line[:200]}", {}
    except RecursionError:
        return CrawlDrops.MALFORMED_JSON, f"nested too deeply for Python's parser: {line[:200]}", {}
    if not isinstance(record, dict):
        return CrawlDrops.MALFORMED_JSON, f"not a JSON object: {line[:200]}", {}
    return None, "", record


def _records_table(records: list[dict[str, Any]], ids: list[str], mapping: ColumnMapping, name: str,
                   max_bytes: int) -> pa.Table:
    fields = mapping.fields()
    reasons: list[CrawlDrops | None] = [None] * len(records)
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
                    reasons[i] = CrawlDrops.INVALID_TEXT_TYPE
            else:  # numbers and booleans: their JSON spelling
                values.append(json.dumps(value))
        columns[field] = values
    for i, record in enumerate(records):
        if reasons[i] is None and mapping.text not in record:
            reasons[i] = CrawlDrops.MISSING_TEXT
    raw = pa.table({field: pa.array(values, pa.string()) for field, values in columns.items()})
    return to_common(raw, mapping, pa.array(ids, pa.string()), name, max_bytes,
                     reasons=reason_array(reasons))
