"""Partition-level checkpoints: a long row-wise stage that dies at 80% resumes at 80%.

A row-wise stage's input (the previous stage's kept Parquet files) is cut into deterministic
partitions of whole row groups (~`partition_rows` rows each). All pending partitions run as *one*
Ray Dataset, so a stateful stage loads its model once per actor, not once per partition. Every
row carries its partition and row offset (`_part`, `_row`) through the stage (the runner strips
them before the stage sees the batch and puts them back after). A write task writes one file
per (block, partition) for kept rows and one for rejected rows, named by the partition and the
row offsets it holds, through a hidden temporary file and an atomic rename:

* a retried task (lost node, dead actor) rewrites the *same* file names, so it cannot duplicate
  rows, and a half-written file is never visible;
* the driver only sees per-file row counts; once a partition's written rows reach its row count
  (known from the Parquet footers), its done marker `.parts/pNNNNN.json` is written atomically,
  after the data, listing exactly its files;
* on resume, partitions with a marker are skipped, files of the others are deleted and redone,
  and files that no marker lists (orphans of a failed attempt) are removed at the end.

The cost for a small run is one JSON marker per stage and partition.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.core import columns as C

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


# -- carrying the tracking columns through a stage ----------------------------------------------
def split_tracking(batch: pa.Table) -> tuple[pa.Table, list[tuple[str, pa.ChunkedArray]]]:
    carried = [(name, batch.column(name)) for name in TRACKING if name in batch.schema.names]
    for name, _ in carried:
        batch = batch.drop_columns([name])
    return batch, carried


def with_tracking(fn: Callable[[pa.Table], pa.Table]) -> Callable[[pa.Table], pa.Table]:
    """Wrap a stage call so the stage never sees `_part`/`_row` and they survive it unchanged."""

    def call(batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        inner, carried = split_tracking(batch)
        out = fn(inner)
        for name, col in carried:  # the stage contract guarantees same rows, same order
            out = out.append_column(name, col)
        return out

    return call


# -- idempotent writes ----------------------------------------------------------------------------
def _digest(table: pa.Table) -> str:
    h = hashlib.blake2b(digest_size=8)
    if ROW in table.schema.names:
        h.update(table.column(ROW).combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False).tobytes())
    elif C.ID in table.schema.names or C.TEXT in table.schema.names:
        # sources and global stages: name the file by its content (ids and text), hashed column-wise
        import polars as pl

        names = [n for n in (C.ID, C.TEXT) if n in table.schema.names]
        frame = pl.from_arrow(table.select(names).cast(pa.schema([(n, pa.string()) for n in names])))
        assert isinstance(frame, pl.DataFrame)
        h.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    else:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        h.update(memoryview(sink.getvalue()))
    return h.hexdigest()


def _file_name(part: int, rows: pa.Table, kept: int, rejected: int) -> str:
    """`p<part>-<first row>-<last row>-k<kept>-j<rejected>-<digest>.parquet` when rows are tracked.

    The name says which rows of the partition the file pair holds and how many went each way, so
    a resumed run can prove a partition complete from the files alone (see `recover`).
    """
    if ROW not in rows.schema.names:
        return f"p{part:05d}-{_digest(rows)}.parquet"
    offsets = rows.column(ROW)
    lo, hi = pc.min(offsets).as_py(), pc.max(offsets).as_py()
    return f"p{part:05d}-{lo:09d}-{hi:09d}-k{kept}-j{rejected}-{_digest(rows)}.parquet"


def _parse_name(name: str) -> tuple[int, int, int, int, int] | None:
    bits = name.removesuffix(".parquet").split("-")
    if len(bits) != 6 or not bits[3].startswith("k") or not bits[4].startswith("j"):
        return None
    try:
        return int(bits[0][1:]), int(bits[1]), int(bits[2]), int(bits[3][1:]), int(bits[4][1:])
    except ValueError:
        return None


def _atomic_write(table: pa.Table, path: Path, row_group_rows: int) -> None:
    tmp = path.parent / f".tmp-{path.name}-{secrets.token_hex(4)}"
    pq.write_table(table, tmp, row_group_size=row_group_rows)
    os.replace(tmp, path)


class BlockWriter:
    """Ray Data UDF: write a block's kept and rejected rows, return one count row per partition."""

    def __init__(self, kept_dir: Path, rejected_dir: Path, row_group_rows: int):
        self.kept_dir, self.rejected_dir = str(kept_dir), str(rejected_dir)
        self.row_group_rows = row_group_rows

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        out: dict[str, list[Any]] = {"part": [], "rows": [], "kept": [], "rejected": [],
                                     "kept_file": [], "rejected_file": []}
        if batch.num_rows == 0:
            return pa.table(out, schema=COUNTS_SCHEMA)
        parts = batch.column(PART) if PART in batch.schema.names else pa.array([0] * batch.num_rows, pa.int32())
        for part in sorted(set(parts.to_pylist())):
            sub = batch.filter(pc.equal(parts, part)) if PART in batch.schema.names else batch
            status = sub.column(C.STATUS)
            data = sub.drop_columns([c for c in (*TRACKING, C.STATUS) if c in sub.schema.names])
            split = {value: data.filter(pc.equal(status, value)) for value in (C.KEPT, C.REJECTED)}
            counts = {value: t.num_rows for value, t in split.items()}
            name = _file_name(int(part), sub, counts[C.KEPT], counts[C.REJECTED])
            for value, folder in ((C.KEPT, self.kept_dir), (C.REJECTED, self.rejected_dir)):
                if counts[value]:
                    _atomic_write(split[value], Path(folder) / name, self.row_group_rows)
            out["part"].append(int(part))
            out["rows"].append(sub.num_rows)
            out["kept"].append(counts[C.KEPT])
            out["rejected"].append(counts[C.REJECTED])
            out["kept_file"].append(name if counts[C.KEPT] else "")
            out["rejected_file"].append(name if counts[C.REJECTED] else "")
        return pa.table(out, schema=COUNTS_SCHEMA)


COUNTS_SCHEMA = pa.schema([("part", pa.int32()), ("rows", pa.int64()), ("kept", pa.int64()),
                           ("rejected", pa.int64()), ("kept_file", pa.string()), ("rejected_file", pa.string())])


# -- the ledger of finished partitions ------------------------------------------------------------
class PartitionLedger:
    """Done markers of one stage's partitions, valid only for one fingerprint and one plan."""

    def __init__(self, kept_dir: Path, rejected_dir: Path, fingerprint: str, plan: str, resume: bool,
                 expected: dict[int, int] | None = None):
        self.kept_dir, self.rejected_dir = kept_dir, rejected_dir
        self.dir = kept_dir / PARTS_DIR
        self.fingerprint, self.plan = fingerprint, plan
        current = self._read(self.dir / PLAN)
        if not resume or current != {"fingerprint": fingerprint, "plan": plan}:
            for d in (kept_dir, rejected_dir):
                shutil.rmtree(d, ignore_errors=True)
        for d in (kept_dir, rejected_dir, self.dir):
            d.mkdir(parents=True, exist_ok=True)
        _write_json(self.dir / PLAN, {"fingerprint": fingerprint, "plan": plan})
        self.done: dict[int, dict[str, Any]] = {}
        for marker in sorted(self.dir.glob("p*.json")):
            record = self._read(marker)
            if record and record.get("fingerprint") == fingerprint:
                self.done[int(record["part"])] = record
        if expected:
            self.recover(expected)
        self.remove_unlisted()

    def recover(self, expected: dict[int, int]) -> None:
        """Mark partitions done whose files on disk hold exactly their rows.

        The driver writes markers as write tasks report back; a driver killed between a task
        writing its files and the driver seeing the report would otherwise redo finished work.
        A partition counts as done when its files' names tile its row offsets [0, rows) with no
        gap or overlap and every file's footer holds the row count its name promises.
        """
        blocks: dict[int, list[tuple[int, int, str, int, int]]] = {}
        for folder in (self.kept_dir, self.rejected_dir):
            for f in folder.glob("p*.parquet"):
                parsed = _parse_name(f.name)
                if parsed and parsed[0] in expected and parsed[0] not in self.done:
                    part, lo, hi, kept, rejected = parsed
                    blocks.setdefault(part, []).append((lo, hi, f.name, kept, rejected))
        for part, found in blocks.items():
            unique = sorted(set(found))
            cursor, kept_files, rejected_files = 0, [], []
            for lo, hi, name, kept, rejected in unique:
                if lo != cursor or kept + rejected != hi - lo + 1:
                    break
                if not (self._holds(self.kept_dir / name, kept) and self._holds(self.rejected_dir / name, rejected)):
                    break
                cursor = hi + 1
                if kept:
                    kept_files.append(name)
                if rejected:
                    rejected_files.append(name)
            else:
                if cursor == expected[part]:
                    self.mark_done(part, cursor, kept_files, rejected_files)

    @staticmethod
    def _holds(path: Path, rows: int) -> bool:
        if rows == 0:
            return not path.exists()
        try:
            return bool(pq.ParquetFile(path).metadata.num_rows == rows)
        except (OSError, pa.ArrowInvalid):
            return False

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def mark_done(self, part: int, rows: int, kept_files: list[str], rejected_files: list[str]) -> None:
        record = {"part": part, "rows": rows, "fingerprint": self.fingerprint,
                  "kept_files": sorted(set(kept_files)), "rejected_files": sorted(set(rejected_files))}
        _write_json(self.dir / f"p{part:05d}.json", record)
        self.done[part] = record

    def remove_unlisted(self) -> None:
        """Delete data files no done marker lists: unfinished partitions and orphaned attempts."""
        listed = {key: {f for r in self.done.values() for f in r[f"{key}_files"]} for key in ("kept", "rejected")}
        for key, folder in (("kept", self.kept_dir), ("rejected", self.rejected_dir)):
            for f in folder.iterdir():
                if f.name.startswith(".tmp-") or (f.suffix == ".parquet" and f.name not in listed[key]):
                    f.unlink(missing_ok=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.parent / f".tmp-{path.name}-{secrets.token_hex(3)}"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def write_tracked(ds: Any, ledger: PartitionLedger, expected: dict[int, int] | None, row_group_rows: int) -> None:
    """Write `ds`, marking each partition done as soon as all its rows are on disk.

    `expected` maps partition → input rows; None means one partition of unknown size (a source
    or a global stage), marked done when the dataset is exhausted.
    """
    writer = BlockWriter(ledger.kept_dir, ledger.rejected_dir, row_group_rows)
    counts = ds.map_batches(writer, batch_format="pyarrow", batch_size=None)
    seen: dict[int, int] = {}
    files: dict[int, tuple[list[str], list[str]]] = {}
    for batch in counts.iter_batches(batch_format="pyarrow", batch_size=None):
        for row in batch.to_pylist():
            part = int(row["part"])
            seen[part] = seen.get(part, 0) + int(row["rows"])
            kept, rejected = files.setdefault(part, ([], []))
            if row["kept_file"]:
                kept.append(row["kept_file"])
            if row["rejected_file"]:
                rejected.append(row["rejected_file"])
            if expected is not None and seen[part] == expected.get(part):
                ledger.mark_done(part, seen[part], kept, rejected)
    if expected is None:
        kept, rejected = files.get(0, ([], []))
        ledger.mark_done(0, seen.get(0, 0), kept, rejected)
    else:
        wrong = {p: (seen.get(p, 0), n) for p, n in expected.items() if seen.get(p, 0) != n}
        if wrong:
            raise RuntimeError(f"partitions written with the wrong row count (written, expected): {wrong}")
    ledger.remove_unlisted()
