"""The Parquet data lake: raw → staged → curated → release, plus rejected rows and run records.

    <lake>/raw/<dataset>/<run_id>/            the input mapped to the common schema
    <lake>/staged/<dataset>/<run_id>/NN_<stage>/   kept rows after each stage (the resume checkpoints)
    <lake>/rejected/<dataset>/<run_id>/NN_<stage>/ dropped rows, with drop_reason and drop_stage
    <lake>/lineage/<dataset>/<run_id>/NN_<stage>/  parents a creating stage consumed, with their children
    <lake>/review/<batch>/                    review batches out to people, and their judgments back
    <lake>/curated/<dataset>/<run_id>/        the job's final kept rows
    <lake>/release/<dataset>/<version>/       gated releases
    <lake>/runs/<run_id>/manifest.json        what ran, on what, with which counts
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

ZONES = ("raw", "staged", "curated", "release", "rejected", "lineage", "review", "runs")


class Lake:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"Lake({str(self.root)!r})"

    def create(self) -> Lake:
        for zone in ZONES:
            (self.root / zone).mkdir(parents=True, exist_ok=True)
        return self

    @staticmethod
    def new_run_id(job: str) -> str:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        return f"{job}-{stamp}-{secrets.token_hex(3)}"

    def zone(self, zone: str, dataset: str, run_id: str) -> Path:
        if zone not in ZONES:
            raise ValueError(f"unknown lake zone {zone!r}; zones are {ZONES}")
        return self.root / zone / dataset / run_id

    def stage_dir(self, zone: str, dataset: str, run_id: str, index: int, stage: str) -> Path:
        return self.zone(zone, dataset, run_id) / f"{index:02d}_{stage}"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def manifest_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "manifest.json"


# -- small Parquet helpers used by the runner and by tests ---------------------------------------
def parquet_files(path: Path) -> list[Path]:
    if not path.exists():
        return []
    if path.is_file():
        return [path]
    # hidden files and folders below `path` (.tmp-*, .parts) are work in progress; `path` itself may be hidden
    return sorted(p for p in path.rglob("*.parquet")
                  if not any(part.startswith(".") for part in p.relative_to(path).parts))


def count_rows(path: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(path))


def iter_batches(path: Path, columns: list[str] | None = None, batch_size: int = 65536) -> Iterator[pa.RecordBatch]:
    files = parquet_files(path)
    if not files:
        return
    dataset = pads.dataset([str(f) for f in files], format="parquet")
    yield from dataset.to_batches(columns=columns, batch_size=batch_size)


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    """Read a (small) table; for tests, reports and the late, small stages of a recipe."""
    files = parquet_files(path)
    if not files:
        return pa.table({})
    # Stages add columns, so a zone's files differ in schema (rejected/ holds every stage's rows):
    # read them under the union of their schemas, not the first file's, or later columns vanish.
    schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")
    return pads.dataset([str(f) for f in files], format="parquet", schema=schema).to_table(columns=columns)


def value_counts(path: Path, column: str) -> dict[str, int]:
    """Count values of one column, streaming, so millions of rejected rows stay cheap."""
    counts: dict[str, int] = {}
    for batch in iter_batches(path, columns=[column]):
        vc = batch.column(0).value_counts()
        for item in vc.to_pylist():
            key = "null" if item["values"] is None else str(item["values"])
            counts[key] = counts.get(key, 0) + item["counts"]
    return counts
