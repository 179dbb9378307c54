"""Release: gate a curated table of PIQA items with its recipe's expectation suite and publish it.

    piqaforge run release --input <curated table> --recipe j-piqa --lake lake [--version 1.0]

Exits non-zero, with one line per failed expectation on stderr, when the gate fails; the report is
written either way, the RELEASED marker only on a pass. It is a run like any other (read_items →
gate_and_release on the runner), whose manifest names the run that made the items as its parent.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from jobs.config import JobConfig
from transforms.core.lake import Lake

log = logging.getLogger("piqaforge")


class Config(JobConfig):
    dataset: str = Field("", description="Release name (default: the recipe).")
    input: str = Field(..., description="Curated table: a lake curated/ folder, Parquet, PIQA JSONL, CSV, ... "
                       "or `run:<run_id>` for a run's curated table in this lake (recorded as the parent run).")
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
    """Read the items, gate them and write the release, as a run of stages (read_items → gate_and_release)."""
    from expectations.suite import load_suite
    from jobs.cli import UserError
    from transforms.core.report import write_report
    from transforms.core.runner import init_ray, run_pipeline
    from transforms.io.sources import RunSource
    from transforms.piqa.release import RELEASED, find_manifest
    from transforms.piqa.release_stage import GateAndRelease, ItemsSource

    dataset = config.dataset or config.recipe
    version = config.version or dt.datetime.now(dt.UTC).strftime("%Y.%m.%d")
    lake = Lake(config.lake).create()
    run_id = run_id or Lake.new_run_id("release")
    out = lake.root / "release" / dataset / version
    # everything that can be refused is checked here, before Ray starts
    if (out / RELEASED).exists():
        raise UserError(f"{out} was already released; choose another --version")
    try:
        load_suite(config.recipe, config.suite)
        if config.input.startswith("run:"):  # `--input run:<run_id>`: that run's curated table, as a parent
            source: Any = RunSource(lake=str(lake.root), run_id=config.input[4:])
            src = source.location()
        else:
            src = Path(config.input)
            if not src.exists():
                raise FileNotFoundError(f"release input {src} does not exist")
            source = ItemsSource(path=str(src))
    except (ValueError, FileNotFoundError) as err:
        raise UserError(str(err)) from err
    upstream = find_manifest(src)
    parents = [upstream.run_id] if upstream else ([config.input[4:]] if config.input.startswith("run:") else [])
    upstream_path = lake.manifest_path(upstream.run_id) if upstream else None
    verdict_path = lake.run_dir(run_id) / "gate.json"
    gate = GateAndRelease(recipe=config.recipe, suite_overrides=config.suite, dataset=dataset, version=version,
                          out_dir=str(out), audit=config.audit, audit_bound=config.audit_bound,
                          upstream_manifest=str(upstream_path) if upstream_path and upstream_path.exists() else None,
                          result_path=str(verdict_path), run_id=run_id)
    init_ray(config.ray_address, config.num_cpus)
    manifest = run_pipeline(job="release", dataset=dataset, source=source, stages=[gate], lake=lake,
                            config=config.model_dump(), run_id=run_id, resume=resume, parents=parents)
    verdict = json.loads(verdict_path.read_text(encoding="utf-8"))
    manifest.status = "succeeded" if verdict["released"] else "failed"
    manifest.error = None if verdict["released"] else f"quality gate failed: {len(verdict['failed'])} expectation(s)"
    manifest.outputs["release"] = verdict["path"]
    manifest.extras["gate"] = {k: verdict[k] for k in ("suite", "success", "rows", "failed")}
    manifest.write(lake.manifest_path(run_id))
    report = write_report(manifest, lake.run_dir(run_id) / "report.html")
    for reason in verdict["failed"]:
        print(f"release gate failed: {reason}", file=sys.stderr)
    return {"run_id": run_id, "release": verdict["path"], "released": verdict["released"], "report": str(report),
            "checks": f"{verdict['checks'] - len(verdict['failed'])}/{verdict['checks']} passed",
            "exit_code": 0 if verdict["released"] else 1}
