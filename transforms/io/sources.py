"""Small sources: rows from a config, from a product of axes, or from an earlier run's output.

* `RowsSource`: rows written in the config (seeds, a handful of requests, tests).
* `ProductSource`: request rows, one per combination of axes (`prompt × model × chunk × slice`),
  with ids made from the combination, so a rerun or resume asks for exactly the same requests.
* `RunSource`: the curated (or any zone's) table of an earlier run in the same lake; the job
  records that run among its manifest's `parents`, which is how crawl → review → release →
  evaluation becomes one chain.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, ClassVar, Generic

import pyarrow as pa
import xxhash
from pydantic import Field, PrivateAttr

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.core.stage import R


class RowsSource(SourceStage):
    """Rows given in the config; each needs an `id` unless `id_prefix` numbers them."""

    name: ClassVar[str] = "read_rows"
    records: list[dict[str, Any]] = Field(default_factory=list, description="The rows.")
    id_prefix: str | None = Field(None, description="Number rows `<prefix>-<n>` when they carry no id.")

    def rows(self) -> pa.Table:
        rows = [dict(r) for r in self.records]
        for n, r in enumerate(rows):
            if C.ID not in r:
                if self.id_prefix is None:
                    raise ValueError(f"row {n} of source {self.name!r} has no `id`; give one or set id_prefix")
                r[C.ID] = f"{self.id_prefix}-{n}"
        return pa.Table.from_pylist(rows) if rows else pa.table({C.ID: pa.array([], pa.string())})

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "records": self.records, "id_prefix": self.id_prefix}


class ProductSource(SourceStage):
    """One request row per combination of the axes' values, e.g. {locale: [...], slice: [0, 1, 2]}."""

    name: ClassVar[str] = "requests"
    axes: dict[str, list[Any]] = Field(..., description="Column → values; rows are their cartesian product.")
    constants: dict[str, Any] = Field(default_factory=dict, description="Columns with one value on every row.")

    def rows(self) -> pa.Table:
        if not self.axes or any(not v for v in self.axes.values()):
            raise ValueError(f"source {self.name!r}: every axis needs at least one value, got {self.axes}")
        names = list(self.axes)
        records = []
        for combo in itertools.product(*(self.axes[n] for n in names)):
            row = {**dict(zip(names, combo, strict=True)), **self.constants}
            # constants are part of the id: round 2's requests are not round 1's
            key = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
            records.append({C.ID: xxhash.xxh3_64_hexdigest(key.encode()), **row})
        return pa.Table.from_pylist(records)


class RunSource(SourceStage):
    """An earlier run's output table (by default its curated zone) in the same lake."""

    name: ClassVar[str] = "read_run"
    lake: str = Field(..., description="Lake root holding the run.")
    run_id: str = Field(..., description="The run whose output this job reads (recorded as a parent).")
    zone: str = Field("curated", description="Zone to read: curated, release ...")
    path: str | None = Field(None, description="Read this folder or file instead of the run's zone.")

    def location(self) -> Path:
        if self.path:
            return Path(self.path)
        lake = Lake(self.lake)
        manifest = RunManifest.load(lake.manifest_path(self.run_id))
        where = manifest.outputs.get(self.zone)
        if not where:
            raise FileNotFoundError(f"run {self.run_id!r} has no {self.zone!r} output "
                                    f"(it has {sorted(manifest.outputs)}; status {manifest.status})")
        return Path(where)

    def rows(self) -> pa.Table:
        where = self.location()
        if not parquet_files(where):
            raise FileNotFoundError(f"no Parquet files under {where} (run {self.run_id}, zone {self.zone})")
        table = read_table(where)
        drop = [c for c in (C.STATUS,) if c in table.schema.names]
        return table.drop_columns(drop)

    def fingerprints(self) -> list[dict[str, Any]]:
        return [fingerprint_file(f) for f in parquet_files(self.location())]


class TableSource(SourceStage[R], Generic[R]):
    """An in-memory table the job already holds (e.g. a release read and checked by the evaluator).

    It is recorded by its content hash and row count, never row by row, so a large table does not
    end up in the manifest.
    """

    name: ClassVar[str] = "read_table"
    label: str = Field("table", description="What the table is, for the manifest.")
    _table: pa.Table = PrivateAttr()

    def __init__(self, table: pa.Table | None = None, **data: Any):
        super().__init__(**data)
        self._table = table if table is not None else pa.table({C.ID: pa.array([], pa.string())})

    def rows(self) -> pa.Table:
        return self._table

    def describe(self) -> dict[str, Any]:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self._table.schema) as w:
            w.write_table(self._table)
        digest = xxhash.xxh3_128_hexdigest(memoryview(sink.getvalue()))
        return {"name": self.name, "label": self.label, "rows": self._table.num_rows, "xxh3_128": digest}
