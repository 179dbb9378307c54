"""Files that people and spreadsheets make, read and checked as a whole before anything is imported.

A review import (filled CSV/TSV, Label Studio JSON, long-format JSONL), a Tamil writers' intake file,
a seed labels file or a lexicon either reads completely or fails with one line naming the file, the
line (or task id) and the problem; nothing is imported from a file that fails. What is handled:

* encodings: UTF-8 with or without a BOM, UTF-16 LE/BE (Excel's "Unicode text", with its BOM or
  without), Windows line ends; anything else is an error naming the file;
* truncation: a JSON export cut short, a CSV cut inside a quoted field (both errors with the line);
* spreadsheet damage: trailing blank rows are ignored; header names compared without case, spaces or
  a BOM; Excel's text marker (a leading apostrophe) and `="..."` cells are unwrapped; a formula that is
  more than a quoted string is an error; a column that is missing is named, with the columns found.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class InputFileError(ValueError):
    """A human input file cannot be read as a whole; the message is one line naming file and line."""


def decode(path: str | Path, data: bytes | None = None) -> str:
    """The file's text: UTF-8 (BOM or not) or UTF-16 (BOM, or the NUL pattern of ASCII in UTF-16)."""
    path = Path(path)
    data = path.read_bytes() if data is None else data
    if data.startswith(codecs.BOM_UTF8):
        data, enc = data[3:], "utf-8"
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        enc = "utf-16"
    elif len(data) >= 4 and data[1] == 0 and data[3] == 0 and data[0] != 0:
        enc = "utf-16-le"
    elif len(data) >= 4 and data[0] == 0 and data[2] == 0 and data[1] != 0:
        enc = "utf-16-be"
    else:
        enc = "utf-8"
    try:
        text = data.decode(enc)
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1 if enc == "utf-8" else "?"
        raise InputFileError(f"{path}:{line}: not {enc.upper()} text (byte {err.start}); save it as UTF-8 "
                             f"(CSV UTF-8) or UTF-16 (Unicode text)") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def header_key(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.replace("\ufeff", "").strip().lower())


_FORMULA_STRING = re.compile(r'^=\s*"(.*)"\s*$', re.S)


def unformat(value: str | None) -> str | None:
    """A cell as its author typed it: Excel's text marker (') and ="..." removed; None when empty."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.startswith("'") and len(text) > 1:  # Excel's text marker, or ours on export (batch.spreadsheet_safe)
        text = text[1:]
    m = _FORMULA_STRING.match(text)
    if m:
        text = m.group(1).replace('""', '"')
    return text


def is_formula(value: str | None) -> bool:
    return bool(value) and str(value).startswith("=") and not _FORMULA_STRING.match(str(value).strip())


@dataclass
class Sheet:
    """A delimited file read whole: canonical column names, rows as dicts, each row's first line."""

    path: Path
    columns: list[str]
    rows: list[dict[str, str | None]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)

    def where(self, i: int) -> str:
        return f"{self.path}:{self.lines[i]}"


def read_sheet(path: str | Path, known: dict[str, str] | None = None) -> Sheet:
    """Read a CSV/TSV whole (delimiter sniffed from the header). `known`: header_key -> column name, so a
    header spelt `Verdict` or ` item id ` maps to the column; unknown headers are kept as written."""
    path = Path(path)
    text = decode(path)
    if not text.strip():
        raise InputFileError(f"{path}: the file is empty")
    first = text.split("\n", 1)[0]
    counts = {sep: first.count(sep) for sep in ("\t", ";", ",")}
    sep = max(counts, key=lambda s: counts[s]) if any(counts.values()) else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True)
    try:
        header = next(reader)
        raw_rows = []
        for values in reader:
            raw_rows.append((reader.line_num, values))
    except csv.Error as err:
        raise InputFileError(f"{path}:{reader.line_num}: {err} (a quoted field is not closed: the file looks "
                             f"cut short or a cell holds a stray quote)") from None
    if text.count('"') % 2:  # the csv module closes a quote at end of file without complaint
        last = raw_rows[-1][0] if raw_rows else 1
        raise InputFileError(f"{path}:{last}: a quoted field is not closed at the end of the file (the file "
                             f"looks cut short)")
    known = known or {}
    columns, renamed = [], {}
    for name in header:
        canon = known.get(header_key(name), name.replace("\ufeff", "").strip())
        if canon != name:
            renamed[name] = canon
        columns.append(canon)
    dupes = sorted({c for c in columns if columns.count(c) > 1})
    if dupes:
        raise InputFileError(f"{path}:1: column(s) {', '.join(dupes)} appear twice in the header")
    sheet = Sheet(path, columns, renamed=renamed)
    start = 2
    for end, values in raw_rows:
        line, start = start, end + 1
        if not any(v.strip() for v in values):
            continue  # blank rows (a spreadsheet's trailing lines)
        if len(values) > len(columns) and any(v.strip() for v in values[len(columns):]):
            raise InputFileError(f"{path}:{line}: {len(values)} cells in a row under a header of {len(columns)} "
                                 f"columns (a delimiter inside an unquoted cell?)")
        values = values + [""] * (len(columns) - len(values))
        sheet.rows.append({c: v for c, v in zip(columns, values, strict=False)})
        sheet.lines.append(line)
    return sheet


def require_columns(sheet: Sheet, required: list[list[str]], what: str) -> None:
    """Each entry of `required` is a set of alternatives, one of which must be a column."""
    for options in required:
        if not any(o in sheet.columns for o in options):
            raise InputFileError(f"{sheet.path}:1: no {' or '.join(repr(o) for o in options)} column in this {what} "
                                 f"(columns: {', '.join(sheet.columns)}); a column renamed in a spreadsheet must get "
                                 f"its name back")


def read_json(path: str | Path) -> Any:
    """A JSON file, with a truncated or broken file named with its line and column."""
    path = Path(path)
    text = decode(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        cut = err.pos >= len(text.rstrip()) - 1
        raise InputFileError(f"{path}:{err.lineno}: not valid JSON at column {err.colno} ({err.msg})"
                             + ("; the file ends there: it looks cut short (export it again)" if cut else "")) from None


def read_jsonl(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, object) for every non-blank line of a JSONL file."""
    path = Path(path)
    out = []
    for n, line in enumerate(decode(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputFileError(f"{path}:{n}: not a JSON object ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict):
            raise InputFileError(f"{path}:{n}: a line must hold a JSON object, not {type(obj).__name__}")
        out.append((n, obj))
    return out
