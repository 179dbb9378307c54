"""CSV/TSV: one streaming task per file (pyarrow.csv.open_csv, serial so that bad rows carry their
line number). Quoted values may hold newlines, which is why a file is not split by bytes.

Rows with the wrong number of fields become rejected rows (`malformed_csv_row`, id
`<file>:line<N>`); mapped columns are read as bytes so one row with invalid UTF-8 is rejected
alone (`invalid_utf8`) instead of failing the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from transforms.io.common import (
    ColumnMapping,
    ColumnMappingError,
    CrawlDrops,
    bad_records,
    decode_utf8,
    to_common,
)


def delimiter_for(path: Path, delimiter: str | None) -> str:
    if delimiter:
        return delimiter
    return "\t" if path.suffix.lower() == ".tsv" else ","


def csv_header(path: Path, delimiter: str) -> list[str]:
    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(use_threads=False, block_size=1 << 16),
                                parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True,
                                                                 invalid_row_handler=lambda _row: "skip"))
    except pa.ArrowInvalid as err:
        raise ColumnMappingError(f"csv file {path}: cannot read a header row ({err})") from err
    return reader.schema.names


def csv_tasks(path: Path, mapping: ColumnMapping, delimiter: str | None) -> list[dict[str, Any]]:
    sep = delimiter_for(path, delimiter)
    mapping.check_against(csv_header(path, sep), f"csv file {path}")
    return [{"format": "csv", "path": str(path), "delimiter": sep}]


def read_csv_task(task: dict[str, Any], mapping: ColumnMapping, max_bytes: int,
                  block_bytes: int = 8 << 20) -> Iterator[pa.Table]:
    path = task["path"]
    name = os.path.basename(path)
    columns = sorted(set(mapping.fields().values()))
    invalid: list[pacsv.InvalidRow] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append(row)
        return "skip"

    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(use_threads=False, block_size=block_bytes),
        parse_options=pacsv.ParseOptions(delimiter=task["delimiter"], newlines_in_values=True,
                                         invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(include_columns=columns,
                                             column_types=dict.fromkeys(columns, pa.binary())))
    row = 0
    for batch in reader:
        if invalid:
            yield _invalid_rows(invalid, name)
        n = batch.num_rows
        if n:
            fallback = pc.binary_join_element_wise(pa.scalar(f"{name}#"),
                                                   pa.array(range(row, row + n), pa.int64()).cast(pa.string()), "")
            row += n
            raw, reasons, details = decode_utf8(pa.Table.from_batches([batch]))
            yield to_common(raw, mapping, fallback, name, max_bytes, reasons=reasons, details=details)
    if invalid:
        yield _invalid_rows(invalid, name)


def _invalid_rows(invalid: list[pacsv.InvalidRow], name: str) -> pa.Table:
    table = bad_records(
        [f"{name}:line{r.number}" for r in invalid], name, [CrawlDrops.MALFORMED_CSV_ROW] * len(invalid),
        [f"expected {r.expected_columns} fields, got {r.actual_columns}: {r.text[:200]}" for r in invalid])
    invalid.clear()
    return table
