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

Reading the files is in writer_files.py, the checks of one item in writer_checks.py, the writers'
feedback files in writer_feedback.py; here the stage turns records into item rows.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.io.common import (
    DROP_DETAIL,
    ColumnMappingError,
    EmptyInputError,
    InputFormatError,
    RefusedInputError,
)
from transforms.io.writer_checks import (  # noqa: F401 (re-exported)
    IntakeDrops,
    Problem,
    form_problems,
    has_surrogates,
    text_problems,
    unmojibake,
)
from transforms.io.writer_feedback import FILE_NOTE, write_feedback  # noqa: F401 (re-exported)
from transforms.io.writer_files import (  # noqa: F401 (re-exported)
    CUT_SHORT,
    FORMATS,
    SOURCE_FILE,
    SOURCE_ROW,
    WRITER,
    WriterColumns,
    decode_bytes,
    read_writer_file,
    record_positions,
)

log = logging.getLogger("piqaforge")


class WritersIntake(SourceStage[IntakeDrops]):
    """Source stage: read every writer file under `path` into item rows (see the module docstring)."""

    name: ClassVar[str] = "writers_intake"
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
                      if reason == IntakeDrops.MALFORMED_ROW]
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
        problems: list[Problem] = list(rec["problems"])
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


def _mark_duplicate_ids(records: list[dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for r in records:
        first = seen.setdefault(r[C.ID], f"{r[SOURCE_FILE]} row {r[SOURCE_ROW]}")
        if first != f"{r[SOURCE_FILE]} row {r[SOURCE_ROW]}":
            detail = f"duplicate_id: id {r[C.ID]!r} was already used at {first}"
            r[C.DROP_REASON] = r[C.DROP_REASON] or IntakeDrops.DUPLICATE_ID
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
            if isinstance(v, str) and has_surrogates(v):
                r[k] = v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return pa.Table.from_pylist(records, schema=schema)


