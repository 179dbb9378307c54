"""Planning: cut a stage's input into resumable partitions, and read them back on Ray.

A row-wise stage's input (the previous stage's kept Parquet files) is cut into deterministic
partitions of whole row groups (~`partition_rows` rows each). All pending partitions run as *one*
Ray Dataset, so a stateful stage loads its model once per actor, not once per partition. Every
row carries its partition and row offset (`_part`, `_row`) through the stage; `execution.py`
strips them before the stage sees the batch and puts them back after, `writing.py` names files by
them and `ledger.py` marks a partition done once its rows are on disk.

The way of a batch, top-down: runner.py (which step, which checkpoint) → planning.py (which
partitions, read them) → execution.py (the stage on Ray, tracking carried) → writing.py (kept /
rejected / lineage files, atomically) → ledger.py (done markers, recovery on resume).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PART = "_part"
ROW = "_row"
TRACKING = (PART, ROW)
PARTS_DIR = ".parts"
PLAN = "_PLAN.json"
DEFAULT_PARTITION_ROWS = 100_000
MAX_ROW_GROUP_ROWS = 16_384


def partition_rows_setting(value: int | None = None) -> int:
    """Rows per resumable partition: the argument, else $PIQAFORGE_PARTITION_ROWS, else 100k."""
    rows = value or int(os.environ.get("PIQAFORGE_PARTITION_ROWS", DEFAULT_PARTITION_ROWS))
    if rows < 1:
        raise ValueError(f"partition rows must be positive, got {rows}")
    return rows


@dataclass
class Partition:
    index: int
    rows: int = 0
    bytes: int = 0
    # (file, first row group, last row group + 1, rows before this unit inside the partition)
    units: list[tuple[str, int, int, int]] = field(default_factory=list)


def plan_partitions(files: list[Path], partition_rows: int) -> list[Partition]:
    """Cut files into partitions of whole row groups, in file order, from the Parquet footers."""
    parts: list[Partition] = []
    current = Partition(0)
    for f in files:
        meta = pq.ParquetFile(f).metadata
        unit_start, unit_offset = 0, current.rows
        for rg in range(meta.num_row_groups):
            n = meta.row_group(rg).num_rows
            if current.rows and current.rows + n > partition_rows:
                if rg > unit_start:
                    current.units.append((str(f), unit_start, rg, unit_offset))
                parts.append(current)
                current = Partition(len(parts))
                unit_start, unit_offset = rg, 0
            current.rows += n
            current.bytes += meta.row_group(rg).total_byte_size
        if meta.num_row_groups > unit_start:
            current.units.append((str(f), unit_start, meta.num_row_groups, unit_offset))
    if current.rows:
        parts.append(current)
    return parts


def plan_digest(parts: list[Partition]) -> str:
    blob = json.dumps([[p.index, p.rows, p.units] for p in parts], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def read_partition(part: Partition, tracked: bool = True) -> Iterator[pa.Table]:
    """Read one partition, row group by row group, tagging every row with (`_part`, `_row`) if `tracked`."""
    for path, start, stop, offset in part.units:
        pf = pq.ParquetFile(path)
        row = offset
        for rg in range(start, stop):
            table = pf.read_row_group(rg)
            n = table.num_rows
            if not tracked:
                yield table
                continue
            table = table.append_column(PART, pa.array(np.full(n, part.index, dtype=np.int32)))
            table = table.append_column(ROW, pa.array(np.arange(row, row + n, dtype=np.int64)))
            row += n
            yield table


def read_partition_columns(part: Partition, columns: list[str]) -> pa.Table:
    """These columns of one partition's rows as one table (in a Ray task that reads the lake itself: a global
    stage's pass that needs two columns of every row, transforms/dedup/minhash.py)."""
    tables = [pq.ParquetFile(path).read_row_groups(list(range(start, stop)), columns=columns)
              for path, start, stop, _ in part.units]
    return pa.concat_tables(tables) if len(tables) != 1 else tables[0]


def read_partitions(parts: list[Partition], tracked: bool = True) -> Any:
    """A Ray Dataset with one read task per partition (a Datasource, so tasks are never merged).

    Every stage reads the lake through this, not `ray.data.read_parquet`: its read tasks are plain
    tasks, which Ray retries elsewhere when their node dies. Ray Data's Parquet reader (2.60) lists
    files with footer-reader actors placed SPREAD, one of which can land on a node that has just died
    but is not yet marked dead; the listing task then fails with an ActorDiedError that Ray Data does
    not retry, and the whole job fails (seen in CI in the node-loss test).
    """
    import ray

    return ray.data.read_datasource(_PartitionDatasource(parts, tracked), override_num_blocks=max(len(parts), 1))


def _partition_datasource_class() -> type:
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class PartitionDatasource(Datasource):
        def __init__(self, parts: list[Partition], tracked: bool):
            super().__init__()
            self.parts, self.tracked = parts, tracked

        def estimate_inmemory_data_size(self) -> int | None:
            return sum(p.bytes for p in self.parts)

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[Any]:
            return [ReadTask(functools.partial(read_partition, p, self.tracked),
                             BlockMetadata(num_rows=p.rows, size_bytes=p.bytes, exec_stats=None,
                                           input_files=tuple(sorted({u[0] for u in p.units}))))
                    for p in self.parts]

        def get_name(self) -> str:
            return "ReadPartitions"

    return PartitionDatasource


def _PartitionDatasource(parts: list[Partition], tracked: bool = True) -> Any:  # noqa: N802 (built lazily: no ray import at module load)
    return _partition_datasource_class()(parts, tracked)
