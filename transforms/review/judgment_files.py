"""Judgment files read into one long table and checked against their batch as wholes.

Files: Label Studio JSON exports (full or JSON-MIN), the batch's filled CSV, or judgments already in
the long format (JSONL / Parquet: item_id, annotator, label or verdict, *_edit, comment). A file that
cannot be read whole, belongs to another batch, contradicts itself or was cut short raises
InputFileError (one line) before any judgment counts; single judgments are judged in review/validate.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.io.input_files import (
    InputFileError,
    is_formula,
    read_json,
    read_jsonl,
    read_sheet,
    require_columns,
    unformat,
)
from transforms.review.batch_record import BatchRecord

LONG_COLUMNS = ["judgment_id", "item_id", "annotator", "label", "goal_edit", "sol1_edit", "sol2_edit",
                "comment", "skipped", "origin"]
CSV_HEADERS = {c: c for c in ("judgment_id", "item_id", "annotator", "verdict", "label", "goal", "sol1", "sol2",
                                "goal_edit", "sol1_edit", "sol2_edit", "comment")}
_TEXT_CELLS = ("judgment_id", "item_id", "annotator", "label", "goal_edit", "sol1_edit", "sol2_edit", "comment")


def _sheet_rows(path: Path) -> list[dict[str, Any]]:
    """A filled CSV/TSV checked as a whole: encoding, truncation, columns, formulas (input_files.py)."""
    sheet = read_sheet(path, CSV_HEADERS)
    if "verdict" in sheet.columns and "label" not in sheet.columns:
        sheet.columns = ["label" if c == "verdict" else c for c in sheet.columns]
        sheet.rows = [{("label" if k == "verdict" else k): v for k, v in r.items()} for r in sheet.rows]
    require_columns(sheet, [["item_id"], ["annotator"], ["label", "verdict"]], "judgments file")
    rows = []
    for i, row in enumerate(sheet.rows):
        for col in _TEXT_CELLS:
            if is_formula(row.get(col)):
                raise InputFileError(f"{sheet.where(i)}: the {col} cell holds a spreadsheet formula "
                                     f"({str(row[col])[:40]!r}); type the value instead")
        cells = {c: unformat(row.get(c)) for c in _TEXT_CELLS}
        rows.append({**cells, "skipped": False, "origin": sheet.where(i)})
    return rows


def read_judgment_files(files: list[str | Path], users: dict[int, str] | None = None) -> pa.Table:
    """Every file's judgments in the long format (all text columns; `skipped` bool; `origin` = the file
    and line or Label Studio task). A file that cannot be read whole raises InputFileError (one line)."""
    from transforms.review.judgments import read_table
    from transforms.review.labelstudio import parse_export

    rows: list[dict[str, Any]] = []
    for path in map(Path, files):
        if not path.exists():
            raise InputFileError(f"{path}: no such judgments file")
        suffix = path.suffix.lower()
        if suffix == ".json":
            data = read_json(path)
            if not isinstance(data, list):
                raise InputFileError(f"{path}: a Label Studio JSON export is a list of tasks, not a "
                                     f"{type(data).__name__}")
            for n, task in enumerate(data):
                if not isinstance(task, dict):
                    raise InputFileError(f"{path}: task {n} is a {type(task).__name__}, not an object")
                rows += parse_export([task], users, origin=f"{path}#task{task.get('id', n)}")
            continue
        if suffix in (".jsonl", ".ndjson"):
            for n, obj in read_jsonl(path):
                label = obj.get("label", obj.get("verdict"))
                rows.append({"judgment_id": obj.get("judgment_id"), "item_id": obj.get("item_id"),
                             "annotator": obj.get("annotator"), "label": label,
                             **{f"{f}_edit": obj.get(f"{f}_edit") for f in ("goal", "sol1", "sol2")},
                             "comment": obj.get("comment"), "skipped": False, "origin": f"{path}:{n}"})
            continue
        if suffix in (".csv", ".tsv", ".txt"):
            rows += _sheet_rows(path)
            continue
        table = read_table(path)
        names = table.schema.names
        if "verdict" in names and "label" not in names:
            table = table.rename_columns(["label" if n == "verdict" else n for n in names])
        for n, row in enumerate(table.to_pylist()):
            rows.append({"judgment_id": row.get("judgment_id"), "item_id": row.get("item_id"),
                         "annotator": row.get("annotator"), "label": row.get("label"),
                         **{f"{f}_edit": row.get(f"{f}_edit") for f in ("goal", "sol1", "sol2")},
                         "comment": row.get("comment"), "skipped": False, "origin": f"{path}#row{n}"})
    text = {c: pa.array([None if r.get(c) is None else str(r[c]) for r in rows], pa.string())
            for c in LONG_COLUMNS if c != "skipped"}
    text["skipped"] = pa.array([bool(r.get("skipped")) for r in rows], pa.bool_())
    return pa.table({c: text[c] for c in LONG_COLUMNS})


def file_of(origin: str | None) -> str:
    return re.sub(r"(:\d+|#task.*|#row\d+)$", "", str(origin or ""))


def check_against_batch(judgments: pa.Table, record: BatchRecord, allow_partial: bool = False) -> pa.Table:
    """File-level checks against the batch, before any judgment counts; raises InputFileError (one line):

    * a `judgment_id` of another batch (a file exported for another batch);
    * a `judgment_id` naming another annotator than the row's `annotator` column (a pasted column);
    * a filled CSV that stops before the batch's last item for one of its annotators (a file cut at a
      line boundary), unless `allow_partial`.
    Item ids a spreadsheet reformatted as numbers ("1,234", "12.0") are mapped back to the batch's id."""
    exported = set(record.item_ids)
    rows = judgments.to_pylist()
    per_file_slots: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        where = row.get("origin") or "?"
        item = row.get("item_id")
        if item is not None and item not in exported:
            plain = re.sub(r"(?<=\d)[,\u00a0 ](?=\d{3})", "", item.strip())
            plain = re.sub(r"^(\d+)\.0+$", r"\1", plain)
            if plain in exported:
                row["item_id"] = item = plain
        jid = row.get("judgment_id")
        if not jid or str(jid).startswith("ls-annotation/"):
            continue
        parts = str(jid).rsplit("/", 2)
        if len(parts) != 3:
            raise InputFileError(f"{where}: judgment_id {jid!r} is not <batch>/<item>/<annotator>")
        batch, jitem, jann = parts
        if batch != record.batch:
            raise InputFileError(f"{where}: judgment_id {jid!r} belongs to batch {batch!r}, not {record.batch!r}: "
                                 f"import this file into its own batch")
        ann = (row.get("annotator") or "").strip()
        if ann and ann != jann and jann in record.annotators:
            raise InputFileError(f"{where}: judgment_id {jid!r} names annotator {jann!r} but the annotator column "
                                 f"says {ann!r} (a column pasted from another file?)")
        if item is not None and jitem != item:
            raise InputFileError(f"{where}: judgment_id {jid!r} names item {jitem!r} but the item_id column says "
                                 f"{item!r}")
        if jann in record.annotators and jitem in exported:
            per_file_slots.setdefault(file_of(where), {}).setdefault(jann, set()).add(jitem)
    if not allow_partial:
        for path, slots in per_file_slots.items():
            short = {ann: [i for i in record.item_ids if i not in items] for ann, items in slots.items()}
            short = {ann: missing for ann, missing in short.items() if missing}
            if short:
                raise InputFileError(
                    f"{path}: rows missing for items of the batch's {len(record.item_ids)}: "
                    + "; ".join(f"annotator {a!r} lacks {len(m)} (first {m[0]!r})" for a, m in sorted(short.items()))
                    + "; the file looks cut short (import it with --allow-partial if that is intended)")
    return pa.Table.from_pylist(rows, schema=judgments.schema)
