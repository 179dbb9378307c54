"""Intake of human-written PIQA items: a folder of writer files (CSV, TSV, JSONL, XLSX) → item rows.

Every record a writer sent becomes one row. A row that cannot be used is rejected with a reason
(and a detail naming the field), never skipped, and the writer gets a feedback file listing
which row was rejected and why. Checks, in order, all reported (the first one is `drop_reason`):

* encoding: `invalid_utf8` (bytes that are not UTF-8), `stray_bom` (U+FEFF inside a value),
  `replacement_char` (U+FFFD: the text was already damaged by a lossy conversion) and `mojibake`
  (UTF-8 read as cp1252/latin-1, e.g. "à®…" for "அ"; the detail shows what it should read);
  a byte-order mark at the very start of a file is removed (Excel writes one) and noted;
* form: `malformed_row` (wrong field count, a line that is not a JSON object), `missing_column`
  (the file lacks a mapped column), `empty_field`, `bad_label` (not 0/1), `duplicate_id`;
* content: `not_in_script` (fewer than `min_script_share` of a field's letters are in the
  language's script, e.g. Tamil block U+0B80–U+0BFF) and `identical_solutions`.

The writer is the mapped `writer` column when a row has it, else the file's name without extension.

A `malformed_row` (a line cut in the middle, a broken JSON line) means the file itself is damaged, so by
default the files are refused whole (`RefusedInputError`, exit 2) naming every such file:line, before
anything is written; `allow_malformed: true` keeps the rest and says how many lines were set aside.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.io.common import (
    DROP_DETAIL,
    ColumnMappingError,
    EmptyInputError,
    InputFormatError,
    RefusedInputError,
)
from transforms.text import textcheck as tc

log = logging.getLogger("piqaforge")

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".xlsx": "xlsx"}
WRITER, SOURCE_FILE, SOURCE_ROW = "writer_id", "source_file", "source_row"
FILE_NOTE = "file_note"
_CP1252 = {ch: b for b in range(0x80, 0xA0) for ch in [bytes([b]).decode("cp1252", errors="ignore")] if ch}


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


class WritersIntake(SourceStage):
    """Source stage: read every writer file under `path` into item rows (see the module docstring)."""

    name: ClassVar[str] = "writers_intake"
    drop_reasons: ClassVar[dict[str, str]] = {
        "malformed_row": "a line that cannot be read (with --allow-malformed)",
        "mojibake": "UTF-8 read as cp1252/latin-1",
        "not_in_script": "too few letters in the language's script",
        "empty_field": "goal, sol1 or sol2 is empty",
        "bad_label": "the label is not 0 or 1",
        "identical_solutions": "sol1 and sol2 are the same text",
        "duplicate_id": "an id already used by an earlier row",
    }
    extras: ClassVar[tuple[str, ...]] = ("review",)

    path: str = Field(..., description="Folder of writer files (or one file).")
    columns: WriterColumns = Field(default_factory=WriterColumns, description="Column mapping of every file.")
    file_columns: dict[str, WriterColumns] = Field(default_factory=dict, description="Per-file mapping "
                                                   "overrides, keyed by file name.")
    lang: str = Field("ta", description="Language of the items (ISO 639-1); its script is checked.")
    min_script_share: float = Field(0.8, ge=0, le=1, description="Least share of a field's letters in the "
                                    "language's script (Latin-script loanwords and numbers are allowed).")
    source: str = Field("writers", description="`source` of rows when the files have no source column.")
    sheet: str | None = Field(None, description="XLSX sheet to read; unset reads the first sheet.")
    feedback_dir: str | None = Field(None, description="Where to write one feedback file per writer "
                                     "(the job points it next to the run's outputs); unset writes none.")
    allow_malformed: bool = Field(False, description="A malformed line (cut in the middle, broken JSON) refuses "
                                  "the files whole (exit 2, file:line, nothing written); true keeps the rest, the "
                                  "line rejected as `malformed_row`, and says how many were set aside.")
    records: dict[str, str] = Field(default_factory=dict, description="Read only these records of a file: "
                                    "1-based positions in file order, e.g. '1-30,151-159', keyed by file name, "
                                    "'*' for files not named; unset reads every record (a slice for quick runs).")

    def files(self) -> list[Path]:
        root = Path(self.path)
        if not root.exists():
            raise FileNotFoundError(f"writer files not found: {root}")
        found = [root] if root.is_file() else sorted(
            f for f in root.iterdir() if f.is_file() and f.suffix.lower() in FORMATS and not f.name.startswith("."))
        if not found:
            raise EmptyInputError(f"no writer files ({', '.join(FORMATS)}) under {root}")
        for f in found:
            if f.suffix.lower() not in FORMATS:
                raise InputFormatError(f"{f}: writer files must be {', '.join(FORMATS)}")
        return found

    def fingerprints(self) -> list[dict[str, Any]]:
        from transforms.core.manifest import fingerprint_file

        self.malformed_lines()  # the runner asks for these first, in the driver: a damaged file stops the run here
        return [fingerprint_file(f) for f in self.files()]

    def malformed_lines(self) -> list[str]:
        """'file:line: why' of every malformed line; raises `RefusedInputError` unless `allow_malformed`."""
        found = []
        for path in self.files():
            records, _, _ = read_writer_file(path, self.file_columns.get(path.name, self.columns), self.sheet)
            found += [f"{path.name}:{r['row']}: {d}" for r in records for reason, d in r["problems"]
                      if reason == "malformed_row"]
        if found and not self.allow_malformed:
            raise RefusedInputError(
                f"{len(found)} malformed line(s) in the writers' files under {self.path}; nothing was read "
                f"(fix the files, or keep the rest with `piqaforge run ... --allow-malformed`, allow_malformed: true): "
                + "; ".join(found[:10]) + (f" (+{len(found) - 10} more)" if len(found) > 10 else ""))
        return found

    def rows(self) -> pa.Table:
        malformed = self.malformed_lines()
        if malformed:
            log.warning("writers' files: %d malformed line(s) set aside as malformed_row (--allow-malformed): %s",
                        len(malformed), "; ".join(malformed[:5]))
        records: list[dict[str, Any]] = []
        notes: list[dict[str, Any]] = []
        usable_files = 0
        for path in self.files():
            mapping = self.file_columns.get(path.name, self.columns)
            file_records, file_notes, header_ok = read_writer_file(path, mapping, self.sheet)
            spec = self.records.get(path.name, self.records.get("*"))
            if spec is not None:
                wanted = record_positions(spec)
                file_records = [r for k, r in enumerate(file_records, 1) if k in wanted]
            usable_files += header_ok
            notes += file_notes
            records += [self._item(path, mapping, r) for r in file_records]
        if records and not usable_files:
            raise ColumnMappingError(f"no writer file under {self.path} has the mapped columns "
                                     f"{self.columns.required()}: {records[0]['drop_detail']}")
        _mark_duplicate_ids(records)
        table = items_table(records, self.columns.keep)
        if self.feedback_dir:
            write_feedback(table, notes, self.feedback_dir)
        return table

    def _item(self, path: Path, mapping: WriterColumns, rec: dict[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = rec["values"]
        problems: list[tuple[str, str]] = list(rec["problems"])
        writer = str(values.get(mapping.writer) or "").strip() if mapping.writer else ""
        writer = writer or path.stem
        own_id = str(values.get(mapping.id) or "").strip() if mapping.id else ""
        item: dict[str, Any] = {
            C.ID: f"{writer}-{own_id}" if own_id else f"{writer}-{path.stem}-r{rec['row']:04d}",
            "lang": self.lang, WRITER: writer, SOURCE_FILE: path.name, SOURCE_ROW: rec["row"],
            C.SOURCE: (str(values.get(mapping.source) or "").strip() if mapping.source else "") or self.source,
            "label": None}
        for key, col in mapping.required().items():
            raw = values.get(col)
            text = "" if raw is None else str(raw).strip()
            if key != "label":
                item[key] = text or None
                problems += text_problems(key, text, self.lang, self.min_script_share) if text else []
        for col in mapping.keep:
            item[col] = values.get(col)
        if not problems:  # form checks only on rows whose bytes are sound
            problems += form_problems(item, values.get(mapping.label))
        if not problems:
            item["label"] = int(str(values.get(mapping.label)).strip().split(".")[0])
        item[C.DROP_REASON] = problems[0][0] if problems else None
        item[DROP_DETAIL] = "; ".join(f"{r}: {d}" for r, d in problems) if problems else None
        return item


# -- reading files -------------------------------------------------------------------------------------
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
            mapped = any(r["values"] and all(p[0] != "missing_column" for p in r["problems"]) for r in records)
            return records, notes, mapped or not records
        header, raw_rows = _delimited_rows(text, "\t" if fmt == "tsv" else ",")
    wanted = [*mapping.required().values()]
    missing = [c for c in wanted if c not in header]
    records = []
    for row_no, cells in raw_rows:
        problems: list[tuple[str, str]] = []
        if missing:
            problems.append(("missing_column", f"the file has no column(s) {missing}; its header is {header}"))
        elif cells and cells[-1] is CUT_SHORT:
            cells = cells[:-1]
            problems.append(("malformed_row", f"{path.name}:{row_no}: a quoted field is not closed at the end of "
                                              f"the file (the file looks cut short)"))
        elif len(cells) != len(header):
            problems.append(("malformed_row", f"expected {len(header)} fields, got {len(cells)}"))
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
        problems: list[tuple[str, str]] = []
        values: dict[str, Any] = {}
        if _has_surrogates(line):
            problems.append(("invalid_utf8", f"line {line_no} has bytes that are not UTF-8"))
        else:
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError as err:
                parsed = None
                problems.append(("malformed_row", f"not JSON ({err.msg} at column {err.colno})"))
            if parsed is not None and not isinstance(parsed, dict):
                problems.append(("malformed_row", "a JSON value that is not an object"))
            elif isinstance(parsed, dict):
                values = {k: v if v is None or isinstance(v, str) else json.dumps(v) for k, v in parsed.items()}
                missing = [c for c in mapping.required().values() if c not in values]
                if missing:
                    problems.append(("missing_column", f"the record has no field(s) {missing}"))
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


# -- checks (pure) -------------------------------------------------------------------------------------
def _has_surrogates(text: str) -> bool:
    return any(0xDC80 <= ord(ch) <= 0xDCFF for ch in text)


def unmojibake(text: str) -> str | None:
    """What `text` reads as when it is UTF-8 that was decoded as cp1252 (or latin-1); None if it is not."""
    if text.isascii() or not any(0x80 <= ord(ch) <= 0xFF or ch in _CP1252 for ch in text):
        return None
    raw = bytearray()
    for ch in text:
        if ch in _CP1252:
            raw.append(_CP1252[ch])
        elif ord(ch) <= 0xFF:
            raw.append(ord(ch))
        else:
            return None
    try:
        fixed = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return fixed if fixed != text else None


def text_problems(field: str, text: str, lang: str, min_share: float) -> list[tuple[str, str]]:
    """Encoding and script problems of one text field."""
    if _has_surrogates(text):
        bad = next(i for i, ch in enumerate(text) if 0xDC80 <= ord(ch) <= 0xDCFF)
        return [("invalid_utf8", f"{field}: bytes that are not UTF-8 at character {bad}")]
    if "\ufeff" in text:
        return [("stray_bom", f"{field}: a byte-order mark (U+FEFF) inside the text")]
    if "\ufffd" in text:
        return [("replacement_char", f"{field}: U+FFFD (the text was damaged by an earlier conversion)")]
    fixed = unmojibake(text)
    if fixed is not None:
        return [("mojibake", f"{field}: UTF-8 read as cp1252/latin-1; it should read {fixed[:60]!r}")]
    if lang in tc.SCRIPT_RANGES:
        share = tc.script_share(text, lang)
        if share < min_share:
            return [("not_in_script", f"{field}: {share:.0%} of its letters are in the {lang} script "
                                      f"(at least {min_share:.0%} needed)")]
    return []


def form_problems(item: dict[str, Any], label: Any) -> list[tuple[str, str]]:
    problems = [("empty_field", f"{k} is empty") for k in ("goal", "sol1", "sol2") if not item.get(k)]
    text = "" if label is None else str(label).strip()
    if text not in ("0", "1", "0.0", "1.0"):
        problems.append(("bad_label", f"label {text!r} is not 0 (sol1 correct) or 1 (sol2 correct)"))
    if item.get("sol1") and item.get("sol1") == item.get("sol2"):
        problems.append(("identical_solutions", "sol1 and sol2 are the same text"))
    return problems


def _mark_duplicate_ids(records: list[dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for r in records:
        first = seen.setdefault(r[C.ID], f"{r[SOURCE_FILE]} row {r[SOURCE_ROW]}")
        if first != f"{r[SOURCE_FILE]} row {r[SOURCE_ROW]}":
            detail = f"duplicate_id: id {r[C.ID]!r} was already used at {first}"
            r[C.DROP_REASON] = r[C.DROP_REASON] or "duplicate_id"
            r[DROP_DETAIL] = f"{r[DROP_DETAIL]}; {detail}" if r[DROP_DETAIL] else detail


def items_table(records: list[dict[str, Any]], keep: list[str]) -> pa.Table:
    fields = [pa.field(C.ID, pa.string()), pa.field("lang", pa.string()), pa.field("goal", pa.string()),
              pa.field("sol1", pa.string()), pa.field("sol2", pa.string()), pa.field("label", pa.int64()),
              pa.field(C.SOURCE, pa.string()), pa.field("is_cultural", pa.bool_()),
              pa.field(WRITER, pa.string()), pa.field(SOURCE_FILE, pa.string()), pa.field(SOURCE_ROW, pa.int64()),
              *[pa.field(k, pa.string()) for k in keep],
              pa.field(C.DROP_REASON, pa.string()), pa.field(DROP_DETAIL, pa.string())]
    schema = pa.schema(fields)
    for r in records:  # surrogate escapes cannot go into Arrow strings: they are replaced, the row is rejected
        for k, v in r.items():
            if isinstance(v, str) and _has_surrogates(v):
                r[k] = v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return pa.Table.from_pylist(records, schema=schema)


# -- feedback -------------------------------------------------------------------------------------------
def write_feedback(table: pa.Table, notes: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Any]:
    """One `<writer>.csv` per writer (file, row, item id, reason, detail) and `summary.json`.

    The CSVs start with a byte-order mark so that spreadsheet programs show Tamil text correctly.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = table.select([WRITER, SOURCE_FILE, SOURCE_ROW, C.ID, C.DROP_REASON, DROP_DETAIL]).to_pylist()
    writers = sorted({r[WRITER] for r in rows})
    file_writers: dict[str, set[str]] = {}
    for r in rows:
        file_writers.setdefault(r[SOURCE_FILE], set()).add(r[WRITER])
    summary: dict[str, Any] = {}
    for writer in writers:
        mine = [r for r in rows if r[WRITER] == writer]
        bad = [r for r in mine if r[C.DROP_REASON]]
        with open(out / f"{writer}.csv", "w", encoding="utf-8-sig", newline="") as f:
            w = csv.writer(f)
            w.writerow(["file", "row", "item_id", "reason", "detail"])
            for note in notes:
                if writer in file_writers.get(note["file"], set()):
                    w.writerow([note["file"], "", "", FILE_NOTE, note["note"]])
            for r in bad:
                w.writerow([r[SOURCE_FILE], r[SOURCE_ROW], r[C.ID], r[C.DROP_REASON], r[DROP_DETAIL]])
        summary[writer] = {"rows": len(mine), "accepted": len(mine) - len(bad), "rejected": len(bad),
                           "reasons": dict(Counter(r[C.DROP_REASON] for r in bad))}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return summary
