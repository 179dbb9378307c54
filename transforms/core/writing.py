"""Writing: a block's rows go to kept / rejected / lineage files, idempotently.

A write task writes, per (block, partition), one file for kept rows, one for rejected rows and,
for creating stages, one for the lineage of consumed parents (`parent_id`, `n_children`,
`child_ids`), named by the partition and the row offsets it holds, through a hidden temporary
file and an atomic rename:

* a retried task (lost node, dead actor) rewrites the *same* file names, so it cannot duplicate
  rows, and a half-written file is never visible;
* the driver only sees per-file row counts; once a partition's input rows are all accounted for,
  `ledger.py` writes its done marker, listing exactly its files.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.core import columns as C
from transforms.core.creating import CONSUMED, INPUT, LINEAGE_SCHEMA, ROLE, SRC
from transforms.core.fusion import FUSED_MEMBER
from transforms.core.planning import PART, ROW, TRACKING

if TYPE_CHECKING:
    from transforms.core.ledger import PartitionLedger

COUNTS_SCHEMA = pa.schema([("part", pa.int32()), ("rows", pa.int64()), ("kept", pa.int64()),
                           ("rejected", pa.int64()), ("consumed", pa.int64()), ("kept_file", pa.string()),
                           ("rejected_file", pa.string()), ("lineage_file", pa.string())])
# A creating stage's children carry the stage that made them (`piqaforge lineage` follows it).
BORN = "_born"


def _digest(table: pa.Table) -> str:
    h = hashlib.blake2b(digest_size=8)
    if ROW in table.schema.names:
        h.update(table.column(ROW).combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False).tobytes())
        h.update(str(table.num_rows).encode())
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


def file_name(part: int, rows: pa.Table, kept: int, rejected: int, consumed: int | None = None,
              inputs_rejected: int | None = None) -> str:
    """`p<part>-<first row>-<last row>-k<kept>-j<rejected>[-c<consumed>-i<inputs rejected>]-<digest>.parquet`.

    The name says which input rows of the partition the file set holds and how many went each way,
    so a resumed run can prove a partition complete from the files alone (`ledger.recover`). For a
    creating stage the input rows are the consumed ones plus the inputs it dropped (`c` + `i`).
    """
    if ROW not in rows.schema.names:
        return f"p{part:05d}-{_digest(rows)}.parquet"
    offsets = rows.column(ROW)
    lo, hi = pc.min(offsets).as_py(), pc.max(offsets).as_py()
    created = "" if consumed is None else f"-c{consumed}-i{inputs_rejected or 0}"
    return f"p{part:05d}-{lo:09d}-{hi:09d}-k{kept}-j{rejected}{created}-{_digest(rows)}.parquet"


def atomic_write(table: pa.Table, path: Path, row_group_rows: int, compression: str = "snappy") -> None:
    tmp = path.parent / f".tmp-{path.name}-{secrets.token_hex(4)}"
    pq.write_table(table, tmp, row_group_size=max(1, row_group_rows), compression=compression)
    os.replace(tmp, path)


def split_roles(sub: pa.Table, stage_name: str) -> tuple[pa.Table, pa.Table, pa.Table | None, int, int]:
    """(kept, rejected, lineage or None, input rows, inputs rejected) of one partition's rows."""
    status = sub.column(C.STATUS)
    if ROLE not in sub.schema.names:
        data = sub.drop_columns([c for c in (*TRACKING, C.STATUS) if c in sub.schema.names])
        kept, rejected = (data.filter(pc.equal(status, v)) for v in (C.KEPT, C.REJECTED))
        return kept, rejected, None, sub.num_rows, rejected.num_rows
    role = sub.column(ROLE)
    is_consumed = pc.equal(role, CONSUMED)
    consumed = sub.filter(is_consumed)
    if consumed.num_rows and all(c in consumed.schema.names for c in LINEAGE_SCHEMA.names):
        lineage = consumed.select(LINEAGE_SCHEMA.names).cast(LINEAGE_SCHEMA)
    else:  # every parent of this block was dropped: the lineage columns were never made
        lineage = LINEAGE_SCHEMA.empty_table()
    rest = sub.filter(pc.invert(is_consumed))
    inputs_rejected = int(pc.sum(pc.equal(rest.column(ROLE), INPUT)).as_py() or 0)
    born = pc.if_else(pc.equal(rest.column(ROLE), INPUT), pa.scalar(None, pa.string()), pa.scalar(stage_name))
    rest = rest.append_column(BORN, born) if BORN not in rest.schema.names else rest.set_column(
        rest.schema.get_field_index(BORN), BORN, pc.coalesce(born, rest.column(BORN).cast(pa.string())))
    # lineage-only columns are null on these rows: drop them when the stage did not write them
    drop = [c for c in (*TRACKING, C.STATUS, ROLE, SRC, "n_children", "child_ids") if c in rest.schema.names]
    data = rest.drop_columns(drop)
    st = rest.column(C.STATUS)
    kept, rejected = data.filter(pc.equal(st, C.KEPT)), data.filter(pc.equal(st, C.REJECTED))
    return kept, rejected, lineage, lineage.num_rows + inputs_rejected, inputs_rejected


def publish_file(src: str, dst: str) -> str:
    """curated/ keeps snappy Parquet: a file `staged/` wrote uncompressed (transforms/core/writing.py) is
    re-encoded on its way there, same rows and row groups; anything else is copied as it is."""
    source = pq.ParquetFile(src) if src.endswith(".parquet") else None
    if source is not None and source.metadata.num_row_groups and \
            source.metadata.row_group(0).column(0).compression == "UNCOMPRESSED":
        tmp = f"{dst}.tmp"
        with pq.ParquetWriter(tmp, source.schema_arrow, compression="snappy") as writer:
            for i in range(source.num_row_groups):
                writer.write_table(source.read_row_group(i))
        os.replace(tmp, dst)
        return dst
    return str(shutil.copy2(src, dst))


class BlockWriter:
    """Ray Data UDF: write a block's kept, rejected and lineage rows; one count row per partition."""

    def __init__(self, kept_dir: Path, rejected_dir: Path, row_group_rows: int, lineage_dir: Path | None = None,
                 stage_name: str = "", kept_compression: str = "snappy", member_rejected: tuple[Path, ...] = ()):
        self.kept_dir, self.rejected_dir = str(kept_dir), str(rejected_dir)
        # a fused step: each member's rejected folder, by position; a row goes to its member's (transforms/core/fusion.py)
        self.member_rejected = [str(d) for d in member_rejected]
        self.lineage_dir = str(lineage_dir) if lineage_dir else None
        self.row_group_rows, self.stage_name = row_group_rows, stage_name
        # the runner asks "none" for a stage's kept rows in `staged/`, the next stage's input read once (2.5x less
        # CPU to write, 2.7x less to read, 1.6x the bytes; docs/front_half.md); raw/, rejected/ and lineage keep
        # snappy, and curated/ is re-encoded with it when a run finishes (publish_file)
        self.kept_compression = kept_compression

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        out: dict[str, list[Any]] = {n: [] for n in COUNTS_SCHEMA.names}
        if batch.num_rows == 0:
            return pa.table(out, schema=COUNTS_SCHEMA)
        tracked = PART in batch.schema.names
        parts = batch.column(PART) if tracked else pa.array([0] * batch.num_rows, pa.int32())
        for part in sorted(set(parts.to_pylist())):
            sub = batch.filter(pc.equal(parts, part)) if tracked else batch
            kept, rejected, lineage, inputs, inputs_rejected = split_roles(sub, self.stage_name)
            creating = lineage is not None
            consumed = lineage.num_rows if lineage is not None else 0
            name = file_name(int(part), sub, kept.num_rows, rejected.num_rows,
                             consumed if creating else None, inputs_rejected if creating else None)
            if FUSED_MEMBER in kept.schema.names:
                kept = kept.drop_columns([FUSED_MEMBER])
            targets = [(kept, self.kept_dir), *self._rejected_targets(rejected)]
            if creating:
                if self.lineage_dir is None:
                    raise RuntimeError(f"stage {self.stage_name!r} creates rows but no lineage folder was given")
                targets.append((lineage, self.lineage_dir))  # type: ignore[arg-type]
            for table, folder in targets:
                if table is not None and table.num_rows:
                    atomic_write(table, Path(folder) / name, self.row_group_rows,
                                 self.kept_compression if folder == self.kept_dir else "snappy")
            out["part"].append(int(part))
            out["rows"].append(inputs)
            out["kept"].append(kept.num_rows)
            out["rejected"].append(rejected.num_rows)
            out["consumed"].append(consumed)
            out["kept_file"].append(name if kept.num_rows else "")
            out["rejected_file"].append(name if rejected.num_rows else "")
            out["lineage_file"].append(name if consumed else "")
        return pa.table(out, schema=COUNTS_SCHEMA)

    def _rejected_targets(self, rejected: pa.Table) -> list[tuple[pa.Table, str]]:
        if FUSED_MEMBER not in rejected.schema.names:
            return [(rejected, self.rejected_dir)]
        member = rejected.column(FUSED_MEMBER)
        rows = rejected.drop_columns([FUSED_MEMBER])
        if not self.member_rejected:
            raise RuntimeError(f"step {self.stage_name!r} ran fused stages but no member folders were given")
        return [(rows.filter(pc.equal(member, i)), folder) for i, folder in enumerate(self.member_rejected)]


def write_dataset(ds: Any, ledger: PartitionLedger, expected: dict[int, int] | None, row_group_rows: int,
                  stage_name: str = "", kept_compression: str = "snappy") -> None:
    """Write `ds`, marking each partition done as soon as all its input rows are on disk.

    `expected` maps partition → input rows; None means one partition of unknown size (a source
    or a global stage), marked done when the dataset is exhausted.
    """
    writer = BlockWriter(ledger.kept_dir, ledger.rejected_dir, row_group_rows, ledger.lineage_dir, stage_name,
                         kept_compression, ledger.member_rejected if len(ledger.member_rejected) > 1 else ())
    # a table in memory (a source read without Ray) is written here, as one block
    counts = [writer(ds)] if isinstance(ds, pa.Table) else \
        ds.map_batches(writer, batch_format="pyarrow", batch_size=None).iter_batches(batch_format="pyarrow",
                                                                                    batch_size=None)
    from transforms.core.console import progress  # the running stage's live bar (in a terminal)

    progress(0, sum(expected.values()) if expected is not None else None)
    seen: dict[int, int] = {}
    files: dict[int, tuple[list[str], list[str], list[str]]] = {}
    for batch in counts:
        for row in batch.to_pylist():
            part = int(row["part"])
            seen[part] = seen.get(part, 0) + int(row["rows"])
            progress(int(row["rows"]))
            listed = files.setdefault(part, ([], [], []))
            for i, key in enumerate(("kept_file", "rejected_file", "lineage_file")):
                if row[key]:
                    listed[i].append(row[key])
            if expected is not None and seen[part] == expected.get(part):
                ledger.mark_done(part, seen[part], *listed)
    if expected is None:
        ledger.mark_done(0, seen.get(0, 0), *files.get(0, ([], [], [])))
    else:
        wrong = {p: (seen.get(p, 0), n) for p, n in expected.items() if seen.get(p, 0) != n}
        if wrong:
            raise RuntimeError(f"partitions written with the wrong row count (written, expected): {wrong}")
    ledger.remove_unlisted()
