"""Read JSONL, Parquet or CSV crawls into the common schema, streaming, as Ray tasks.

The driver only plans: it lists files, picks each file's format, checks the column mapping
against what the file holds (Parquet footer, CSV header, the first JSON records) and cuts the
files into tasks. The rows are read inside the tasks, a few thousand at a time, so nothing is
materialised in the driver. Bad records are not errors: they become rows with a drop_reason (see
transforms/io/common.py), and the read stage's counts add up to the records seen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from transforms.core.creating import SourceStage
from transforms.io.common import (
    CRAWL_WITH_REASON,
    ColumnMapping,
    ColumnMappingError,
    CrawlDrops,
    EmptyInputError,
    InputFormatError,
)
from transforms.io.csvfile import csv_tasks, read_csv_task
from transforms.io.jsonl import check_jsonl_mapping, jsonl_tasks, read_jsonl_range
from transforms.io.parquet import parquet_tasks, read_parquet_task

__all__ = ["CRAWL_WITH_REASON", "ColumnMapping", "ColumnMappingError", "CrawlInput", "CrawlSource",
           "EmptyInputError", "InputFormatError", "detect_format", "list_files", "plan_tasks", "read_local",
           "read_task"]

log = logging.getLogger("piqaforge")

Format = Literal["jsonl", "parquet", "csv"]
EXTENSIONS: dict[str, Format] = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
    ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "csv",
}


class CrawlInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(..., min_length=1, description="Files or directories of the crawl.")
    format: Literal["auto", "jsonl", "parquet", "csv"] = Field(
        "auto", description="jsonl | parquet | csv, or auto to pick each file's format by its extension.")
    columns: ColumnMapping = Field(default_factory=ColumnMapping, description="Input field of each column.")
    max_record_bytes: int = Field(1 << 20, gt=0, description="Records above this size are rejected as oversized.")
    block_bytes: int = Field(32 << 20, gt=0, description="Bytes per read task (JSONL ranges, Parquet row groups).")
    csv_delimiter: str | None = Field(None, min_length=1, max_length=1,
                                      description="CSV delimiter; unset uses a tab for .tsv, else a comma.")


def list_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {raw}")
    if not files:
        raise FileNotFoundError(f"no input files under {paths}")
    return files


def detect_format(path: Path, declared: str) -> Format:
    if declared != "auto":
        return declared  # type: ignore[return-value]
    fmt = EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise InputFormatError(f"cannot tell the format of {path} from its extension (known: "
                         f"{', '.join(sorted(EXTENSIONS))}); set input.format to jsonl, parquet or csv.")
    return fmt


def plan_tasks(spec: CrawlInput, files: list[Path]) -> list[dict[str, Any]]:
    """Check every file against the mapping and cut it into read tasks (driver side, no rows read)."""
    tasks: list[dict[str, Any]] = []
    for path in files:
        fmt = detect_format(path, spec.format)
        if path.stat().st_size == 0:
            log.warning("%s is empty: it contributes no rows", path)
            continue
        if fmt == "jsonl":
            check_jsonl_mapping(path, spec.columns)
            tasks += jsonl_tasks(path, spec.block_bytes)
        elif fmt == "parquet":
            tasks += parquet_tasks(path, spec.columns, spec.block_bytes)
        else:
            tasks += csv_tasks(path, spec.columns, spec.csv_delimiter)
    if not tasks:
        raise EmptyInputError(f"no records to read: every input file is empty ({', '.join(map(str, files))})")
    return tasks


def read_task(task: dict[str, Any], mapping: ColumnMapping, max_bytes: int) -> Iterator[pa.Table]:
    """Run one read task; yields CRAWL_WITH_REASON tables."""
    fmt = task["format"]
    if fmt == "jsonl":
        yield from read_jsonl_range(task, mapping, max_bytes)
    elif fmt == "parquet":
        yield from read_parquet_task(task, mapping, max_bytes)
    elif fmt == "csv":
        yield from read_csv_task(task, mapping, max_bytes)
    else:
        raise ValueError(f"unknown read task format {fmt!r}")


def read_local(spec: CrawlInput) -> pa.Table:
    """Read a (small) crawl in this process, without Ray: for tests and quick looks."""
    tables = [t for task in plan_tasks(spec, list_files(spec.paths))
              for t in read_task(task, spec.columns, spec.max_record_bytes)]
    return pa.concat_tables(tables) if tables else CRAWL_WITH_REASON.empty_table()


class CrawlSource(SourceStage[CrawlDrops]):
    """The read stage of a crawl job: every record is born here, kept or dropped with a reason."""

    name: ClassVar[str] = "read_crawl"
    spec: CrawlInput = Field(..., description="The crawl to read.")

    _files: list[Path] = PrivateAttr(default_factory=list)
    _tasks: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def __init__(self, spec: CrawlInput | None = None, **data: Any):
        super().__init__(**({"spec": spec} if spec is not None else {}), **data)
        # (not in model_post_init: pydantic would wrap the clear errors below in a ValidationError)
        self._files = list_files(self.spec.paths)
        # Planning checks the mapping against every file, so a wrong mapping or an empty input
        # fails here, in a second, before Ray starts or anything is written.
        self._tasks = plan_tasks(self.spec, self._files)

    @property
    def files(self) -> list[Path]:
        return self._files

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return self._tasks

    def describe(self) -> dict[str, Any]:
        return self.spec.model_dump()

    def fingerprints(self) -> list[dict[str, Any]]:
        from transforms.core.manifest import fingerprint_file

        return [fingerprint_file(f) for f in self.files]

    def read(self) -> Any:
        import ray

        tasks = self.tasks
        mapping, max_bytes = self.spec.columns, self.spec.max_record_bytes

        def read_batch(batch: pa.Table) -> Iterator[pa.Table]:
            for task in batch.to_pylist():
                yield from read_task(task, mapping, max_bytes)

        # One block per task; the generator streams each task's output a few thousand rows at a time.
        return ray.data.from_items(tasks, override_num_blocks=len(tasks)).map_batches(
            read_batch, batch_format="pyarrow", batch_size=1)
