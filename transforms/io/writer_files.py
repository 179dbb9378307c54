"""Writer files read into records: CSV, TSV, JSONL and XLSX, with the column mapping of their fields.

A record is a row number, the row's values by column, and the problems found while reading it
(`invalid_utf8`, `malformed_row`, `missing_column`); the content checks are in writer_checks.py.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from transforms.io.writer_checks import IntakeDrops, Problem, has_surrogates

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".xlsx": "xlsx"}
WRITER, SOURCE_FILE, SOURCE_ROW = "writer_id", "source_file", "source_row"


class WriterColumns(BaseModel):
    """Which column of a writer file holds each item field."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field("goal", description="Column with the prompt (goal).")
    sol1: str = Field("sol1", description="Column with the first solution.")
    sol2: str = Field("sol2", description="Column with the second solution.")
    label: str = Field("label", description="Column with the correct solution: 0 (sol1) or 1 (sol2).")
    id: str | None = Field(None, description="Column with the writer's own item number; unset uses the row number.")
    writer: str | None = Field("writer", description="Column with the writer id; rows without one take the "
                               "file name (without extension).")
    source: str | None = Field(None, description="Column naming where the item came from; unset uses `source`.")
    keep: list[str] = Field(default_factory=list, description="Other columns to carry through unchanged.")

    def required(self) -> dict[str, str]:
        return {"goal": self.goal, "sol1": self.sol1, "sol2": self.sol2, "label": self.label}


def read_writer_file(path: Path, mapping: WriterColumns, sheet: str | None = None
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """(records, file notes, header has the mapped columns). A record: row number, values, problems."""
    fmt = FORMATS[path.suffix.lower()]
    notes: list[dict[str, Any]] = []
    if fmt == "xlsx":
        header, raw_rows = _xlsx_rows(path, sheet)
    else:
        data = path.read_bytes()
        text, note = decode_bytes(data)
        if note:
            notes.append({"file": path.name, "note": note})
        if fmt == "jsonl":
            records = _jsonl_records(text, path, mapping)
            mapped = any(r["values"] and all(p[0] != IntakeDrops.MISSING_COLUMN for p in r["problems"])
                         for r in records)
            return records, notes, mapped or not records
        header, raw_rows = _delimited_rows(text, "\t" if fmt == "tsv" else ",")
    wanted = [*mapping.required().values()]
    missing = [c for c in wanted if c not in header]
    records = []
    for row_no, cells in raw_rows:
        problems: list[Problem] = []
        if missing:
            problems.append((IntakeDrops.MISSING_COLUMN,
                             f"the file has no column(s) {missing}; its header is {header}"))
        elif cells and cells[-1] is CUT_SHORT:
            cells = cells[:-1]
            problems.append((IntakeDrops.MALFORMED_ROW, f"{path.name}:{row_no}: a quoted field is not closed at the "
                                                        f"end of the file (the file looks cut short)"))
        elif len(cells) != len(header):
            problems.append((IntakeDrops.MALFORMED_ROW, f"expected {len(header)} fields, got {len(cells)}"))
        values = dict(zip(header, cells, strict=False))
        records.append({"row": row_no, "values": values, "problems": problems})
    return records, notes, not missing


CUT_SHORT = "\x00cut-short"  # marks a row that ends inside an unclosed quote (identity-compared)


def decode_bytes(data: bytes) -> tuple[str, str | None]:
    """Text of a file, invalid UTF-8 kept as surrogate escapes (found per row later), BOM handled."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16"), "the file is UTF-16 (read as such); please save as UTF-8"
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="surrogateescape"), "byte-order mark at the start removed"
    if len(data) >= 4 and (data[1] == data[3] == 0) != (data[0] == data[2] == 0):  # UTF-16 without its BOM
        enc = "utf-16-le" if data[1] == 0 else "utf-16-be"
        try:
            return data.decode(enc), "the file is UTF-16 without a byte-order mark (read as such); please save as UTF-8"
        except UnicodeDecodeError:
            pass
    return data.decode("utf-8", errors="surrogateescape"), None


def _delimited_rows(text: str, delimiter: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = [h.strip().lstrip("\ufeff") for h in next(reader, [])]
    rows: list[tuple[int, list[str]]] = []
    start = reader.line_num + 1
    for cells in reader:
        if any(c.strip() for c in cells):
            rows.append((start, cells))  # the line a spreadsheet user would look at
        start = reader.line_num + 1
    if text.count('"') % 2 and rows:  # cut inside a quoted field: the last row swallowed the rest of the file
        rows[-1] = (rows[-1][0], [*rows[-1][1], CUT_SHORT])
    return header, rows


def _jsonl_records(text: str, path: Path, mapping: WriterColumns) -> list[dict[str, Any]]:
    records = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        problems: list[Problem] = []
        values: dict[str, Any] = {}
        if has_surrogates(line):
            problems.append((IntakeDrops.INVALID_UTF8, f"line {line_no} has bytes that are not UTF-8"))
        else:
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError as err:
                parsed = None
                problems.append((IntakeDrops.MALFORMED_ROW, f"not JSON ({err.msg} at column {err.colno})"))
            if parsed is not None and not isinstance(parsed, dict):
                problems.append((IntakeDrops.MALFORMED_ROW, "a JSON value that is not an object"))
            elif isinstance(parsed, dict):
                values = {k: v if v is None or isinstance(v, str) else json.dumps(v) for k, v in parsed.items()}
                missing = [c for c in mapping.required().values() if c not in values]
                if missing:
                    problems.append((IntakeDrops.MISSING_COLUMN, f"the record has no field(s) {missing}"))
        records.append({"row": line_no, "values": values, "problems": problems})
    return records


def _xlsx_rows(path: Path, sheet: str | None) -> tuple[list[str], list[tuple[int, list[str]]]]:
    from transforms.core.deps import require

    openpyxl = require("openpyxl", "review", "reading XLSX writer files")
    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        ws = wb[sheet] if sheet else wb.worksheets[0]
        it = ws.iter_rows(values_only=True)
        header = [str(h).strip() if h is not None else "" for h in next(it, ())]
        rows = []
        for row_no, cells in enumerate(it, 2):
            values = ["" if c is None else (str(int(c)) if isinstance(c, float) and c.is_integer() else str(c))
                      for c in cells]
            if any(v.strip() for v in values):
                rows.append((row_no, values[:len(header)] + [""] * (len(header) - len(values))))
        return header, rows
    finally:
        wb.close()


def record_positions(spec: str) -> set[int]:
    """'1-30,151-159' → {1..30, 151..159} (1-based record positions)."""
    out: set[int] = set()
    for part in (p.strip() for p in str(spec).split(",") if p.strip()):
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()) or int(lo) < 1:
            raise ValueError(f"record selection {spec!r}: expected positions like '1-30,151-159'")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
