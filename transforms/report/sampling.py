"""Seeded samples of a zone and table cells, shared by the report's examples and its LLM prompts."""

from __future__ import annotations

import hashlib
import json
import random
from html import escape
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core.lake import parquet_files

CELL_CHARS = 160
N_ROWS = 5


def seeded(*parts: str) -> random.Random:
    return random.Random(int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16], 16))


def sample_zone(path: Path | None, rng: random.Random, max_files: int = 2) -> pa.Table:
    """One seeded row group from each of up to `max_files` seeded files of a zone (empty if none)."""
    files = parquet_files(path) if path else []
    if not files:
        return pa.table({})
    tables = []
    for f in sorted(rng.sample(files, min(max_files, len(files)))):
        pf = pq.ParquetFile(f)
        if pf.num_row_groups:
            tables.append(pf.read_row_group(rng.randrange(pf.num_row_groups)))
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def pick(table: pa.Table, rng: random.Random, n: int = N_ROWS, by: str | None = None) -> pa.Table:
    """`n` seeded rows; with `by`, taken in turn from each value of that column (every drop reason shows)."""
    if table.num_rows <= n and by is None:
        return table
    order = list(range(table.num_rows))
    rng.shuffle(order)
    if by is not None and by in table.schema.names:
        groups: dict[Any, list[int]] = {}
        for i in order:
            groups.setdefault(table.column(by)[i].as_py(), []).append(i)
        queues = sorted(groups.values(), key=len, reverse=True)
        order = [q[k] for k in range(max(map(len, queues), default=0)) for q in queues if k < len(q)]
    return table.take(pa.array(sorted(order[:n]), pa.int64()))


def cell(value: Any, chars: int = CELL_CHARS) -> str:
    if value is None:
        return '<span class="meta">–</span>'
    if isinstance(value, float):
        text = f"{value:.3f}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    return escape(text if len(text) <= chars else text[:chars - 1] + "…")
