"""Append-only caches of per-row results on disk, keyed by row id.

A long stage that pays per row (LLM verdicts, embedding scores) appends each finished chunk as a
Parquet file; a resumed run loads them and only computes the rows that are missing. Files are
written under a hidden name and renamed, so a killed process never leaves a half-written file, and
a chunk is either wholly in the cache or not at all.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq


def append(folder: str | Path, table: pa.Table) -> Path | None:
    """Add `table` (one chunk of rows) to the cache in `folder`; returns the file, None for no rows."""
    if table.num_rows == 0:
        return None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns()}-{secrets.token_hex(3)}.parquet"
    tmp = folder / f".{name}"
    pq.write_table(table, tmp)
    return tmp.rename(folder / name)


def load(folder: str | Path) -> pa.Table:
    """Every chunk in the cache, in the order written; an empty table when there is none. A cache's chunks
    are the files directly in its folder: a sub-folder is another cache (an LLM translator's answers live
    under its segment cache's folder) and is not read as this one."""
    folder = Path(folder)
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith(".")) if folder.is_dir() else []
    if not files:
        return pa.table({})
    schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")
    return pads.dataset([str(f) for f in files], format="parquet", schema=schema).to_table()
