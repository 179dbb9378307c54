"""Release as stages on the runner: read items → gate the whole table → write the release.

`ItemsSource` reads a curated table or any item file (`transforms.piqa.formats.read_items`) as
the run's source; `GateAndRelease` runs the recipe's Great Expectations suite on the whole table
and writes `<lake>/release/<dataset>/<version>/` (transforms/release/writer.py). The gate is a
verdict on the table, not on rows: rows are kept either way, and the job exits non-zero with one
line per failed expectation when the gate fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.core.lake import parquet_files, read_table
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.core.stage import GlobalStage


def read_raw(src: Path) -> pa.Table:
    """Parquet as stored (the gate reports uncastable columns instead of the reader refusing them)."""
    from transforms.piqa.formats import read_items

    if (src.is_dir() and parquet_files(src)) or src.suffix.lower() == ".parquet":
        table = read_table(src)
    else:
        table = read_items(src)
    drop = [c for c in (C.STATUS, C.DROP_REASON, C.DROP_STAGE) if c in table.schema.names]
    return table.drop_columns(drop)


class ItemsSource(SourceStage):
    """The items to release, from a lake folder or an item file; ids are added when missing."""

    name: ClassVar[str] = "read_items"
    release_columns: ClassVar[tuple[str, ...]] = ("goal_gloss", "sol1_gloss", "sol2_gloss", "orig_line_no")
    path: str = Field(..., description="Curated folder, Parquet, PIQA/COPA JSONL, CSV ...")

    def rows(self) -> pa.Table:
        table = read_raw(Path(self.path))
        if C.ID not in table.schema.names:
            stem = Path(self.path).stem
            table = table.append_column(C.ID, pa.array([f"{stem}-{i:06d}" for i in range(table.num_rows)]))
        return table

    def fingerprints(self) -> list[dict[str, Any]]:
        src = Path(self.path)
        files = parquet_files(src) if src.is_dir() else [src]
        return [fingerprint_file(p) for p in files if p.is_file()][:50]


class GateAndRelease(GlobalStage):
    """Gate the table with the recipe's suite, then write the release (RELEASED only on a pass)."""

    name: ClassVar[str] = "gate_and_release"
    recipe: str = Field("generic", description="Suite in expectations/suites/.")
    recipe_name: str | None = Field(None, description="The recipe the release belongs to, which the card names "
                                    "(default: the suite's name, for a release outside a recipe).")
    suite_overrides: dict[str, Any] = Field(default_factory=dict, description="Overrides of the suite.")
    dataset: str = Field(..., description="Release name.")
    version: str = Field(..., description="Release version.")
    out_dir: str = Field(..., description="Release folder.")
    upstream_manifest: str | None = Field(None, description="Manifest of the run that made the items (funnel).")
    audit: bool = True
    audit_bound: float = 0.6
    result_path: str = Field(..., description="Where the gate's verdict is written for the job to read back.")
    run_id: str | None = Field(None, description="The release run, recorded in the release folder (run.json).")
    card_sections: list[str] = Field(default_factory=list, description="The recipe's sections of the card "
                                     "(Markdown), written with the rest before RELEASED.")
    extra_files: dict[str, str] = Field(default_factory=dict, description="The recipe's own files (name -> "
                                        "text), written into the release before RELEASED.")
    hub: dict[str, Any] = Field(default_factory=dict, description="The card's metadata beyond the items: licence, "
                                "sources, declared columns, Hub id (transforms.release.writer.HubSettings).")

    def process_table(self, table: pa.Table) -> pa.Table:
        from expectations.gate import run_gate
        from expectations.suite import load_suite
        from transforms.release.writer import HubSettings, build_release

        items = table.drop_columns([c for c in (*C.BOOKKEEPING, "_born") if c in table.schema.names])
        suite = load_suite(self.recipe, self.suite_overrides)
        gate = run_gate(items, suite)
        gate_dict = {**gate.model_dump(), "reasons": gate.reasons()}
        manifest = RunManifest.load(Path(self.upstream_manifest)) if self.upstream_manifest else None
        result = build_release(items, gate_dict, out_dir=self.out_dir, dataset=self.dataset,
                               recipe=self.recipe_name or self.recipe,
                               version=self.version, manifest=manifest, audit=self.audit,
                               audit_bound=self.audit_bound, run_id=self.run_id, sections=self.card_sections,
                               extra_files=self.extra_files, hub=HubSettings.model_validate(self.hub))
        verdict = {"suite": suite.name, "success": gate.success, "rows": gate.rows, "checks": len(gate.checks),
                   "failed": result.reasons, "released": result.released, "path": result.path}
        Path(self.result_path).parent.mkdir(parents=True, exist_ok=True)
        Path(self.result_path).write_text(json.dumps(verdict, indent=2, ensure_ascii=False, default=str), "utf-8")
        return table
