"""Parquet: one task per group of row groups, reading only the mapped columns, batch by batch.

The mapping is checked against each file's footer in the driver (cheap: no data is read), so a
wrong mapping fails before any work starts, naming the columns the file does have.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.io.common import ColumnMapping, decode_utf8, to_common

BATCH_ROWS = 8192


def parquet_tasks(path: Path, mapping: ColumnMapping, block_bytes: int) -> list[dict[str, Any]]:
    meta = pq.ParquetFile(path).metadata
    mapping.check_against(meta.schema.to_arrow_schema().names, f"parquet file {path}")
    tasks: list[dict[str, Any]] = []
    groups: list[int] = []
    first_row, row, size = 0, 0, 0
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        if groups and size + rg.total_byte_size > block_bytes:
            tasks.append({"format": "parquet", "path": str(path), "row_groups": groups, "first_row": first_row})
            groups, first_row, size = [], row, 0
        groups.append(i)
        size += rg.total_byte_size
        row += rg.num_rows
    if groups and row > first_row:
        tasks.append({"format": "parquet", "path": str(path), "row_groups": groups, "first_row": first_row})
    return tasks


def read_parquet_task(task: dict[str, Any], mapping: ColumnMapping, max_bytes: int) -> Iterator[pa.Table]:
    path = task["path"]
    name = os.path.basename(path)
    columns = sorted(set(mapping.fields().values()))
    row = task["first_row"]
    for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, row_groups=task["row_groups"],
                                                   columns=columns):
        n = batch.num_rows
        # '<file>#<row index>' is stable across runs and unique within the file.
        fallback = pc.binary_join_element_wise(pa.scalar(f"{name}#"),
                                               pa.array(range(row, row + n), pa.int64()).cast(pa.string()), "")
        row += n
        raw, reasons, details = decode_utf8(pa.Table.from_batches([batch]))
        yield to_common(raw, mapping, fallback, name, max_bytes, reasons=reasons, details=details)
