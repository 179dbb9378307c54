"""Release: gate a curated table of PIQA items with its recipe's expectation suite and publish it.

    piqaforge run release --input <curated table> --recipe j-piqa --lake lake [--version 1.0]

Exits non-zero, with one line per failed expectation on stderr, when the gate fails; the report is
written either way, the RELEASED marker only on a pass.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from jobs.config import JobConfig
from transforms.core.lake import Lake, parquet_files
from transforms.core.manifest import RunManifest, code_version, fingerprint_file

log = logging.getLogger("piqaforge")


class Config(JobConfig):
    dataset: str = Field("", description="Release name (default: the recipe).")
    input: str = Field(..., description="Curated table: a lake curated/ folder, Parquet, PIQA JSONL, CSV, ...")
    recipe: str = Field("generic", description="Suite in expectations/suites/ (ko-piqa, pindic, j-piqa, "
                        "ru-piqa, ta-piqa, generic).")
    version: str | None = Field(None, description="Release version (default: today's UTC date).")
    suite: dict[str, Any] = Field(default_factory=dict, description="Overrides of the suite, e.g. "
                                  "--set suite.label_balance.min=0.4")
    audit: bool = Field(True, description="Run the artifact audit (transforms/eval/audit.py) when installed.")
    audit_bound: float = Field(0.6, gt=0, lt=1, description="Baseline accuracy that flags the audit.")

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return None if value is None else str(value)  # `--version 1.0` arrives as a YAML float


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    from expectations.gate import run_gate
    from expectations.suite import load_suite
    from jobs.cli import UserError
    from transforms.piqa.release import ReleaseError, build_release, find_manifest

    dataset = config.dataset or config.recipe
    version = config.version or dt.datetime.now(dt.UTC).strftime("%Y.%m.%d")
    lake = Lake(config.lake).create()
    run_id = run_id or Lake.new_run_id("release")
    manifest = RunManifest(run_id=run_id, job="release", dataset=dataset, config=config.model_dump(),
                           code_version=code_version())
    src = Path(config.input)
    manifest.inputs = [fingerprint_file(p) for p in (parquet_files(src) if src.is_dir() else [src]) if p.is_file()][:50]
    try:
        suite = load_suite(config.recipe, config.suite)
        table = _read_raw(src)
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from err
    gate = run_gate(table, suite)
    gate_dict = {**gate.model_dump(), "reasons": gate.reasons()}
    out = lake.root / "release" / dataset / version
    try:
        result = build_release(table, gate_dict, out_dir=out, dataset=dataset, recipe=config.recipe,
                               version=version, manifest=find_manifest(src), audit=config.audit,
                               audit_bound=config.audit_bound)
    except ReleaseError as err:
        raise UserError(str(err)) from err
    manifest.status = "succeeded" if result.released else "failed"
    manifest.error = None if result.released else f"quality gate failed: {len(result.reasons)} expectation(s)"
    manifest.outputs = {"release": result.path}
    manifest.extras = {"gate": {"suite": suite.name, "success": gate.success, "rows": gate.rows,
                                "failed": result.reasons}}
    manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
    manifest.write(lake.manifest_path(run_id))
    for reason in result.reasons:
        print(f"release gate failed: {reason}", file=sys.stderr)
    return {"run_id": run_id, "release": result.path, "released": result.released,
            "checks": f"{len(gate.checks) - len(result.reasons)}/{len(gate.checks)} passed",
            "exit_code": 0 if result.released else 1}


def _read_raw(src: Path) -> Any:
    """Parquet as stored (the gate reports uncastable columns instead of the reader refusing them)."""
    from transforms.core.lake import read_table
    from transforms.piqa.formats import read_items

    if src.is_dir() and parquet_files(src):
        return read_table(src)
    if src.suffix.lower() == ".parquet":
        return read_table(src)
    return read_items(src)
