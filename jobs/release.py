"""Release: gate a curated table of PIQA items with its recipe's expectation suite and publish it.

    piqaforge run release --input <curated table> --recipe j-piqa --lake lake [--version 1.0]

Exits non-zero, with one line per failed expectation on stderr, when the gate fails; the report is
written either way, the RELEASED marker only on a pass. It is a run like any other (read_items →
gate_and_release on the runner), whose manifest names the run that made the items as its parent.
"""

from __future__ import annotations

import logging
import sys
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
    from jobs.cli import UserError
    from transforms.core.runner import init_ray
    from transforms.flow.release import ReleaseInputError, gate_and_write
    from transforms.report.run_report import write_report

    dataset = config.dataset or config.recipe
    lake = Lake(config.lake).create()
    run_id = run_id or Lake.new_run_id("release")
    run_input = config.input[4:] if config.input.startswith("run:") else None
    init_ray(config.ray_address, config.num_cpus)
    try:
        manifest = gate_and_write(lake, dataset=dataset, input_run=run_input,
                                  input_path=None if run_input else config.input, suite=config.recipe,
                                  suite_overrides=config.suite, version=config.version, run_id=run_id,
                                  audit=config.audit, audit_bound=config.audit_bound, resume=resume,
                                  config=config.model_dump())
    except (ReleaseInputError, FileNotFoundError) as err:
        raise UserError(str(err)) from err
    report = write_report(manifest, lake.run_dir(run_id) / "report.html")
    gate = manifest.extras["gate"]
    for reason in gate["failed"]:
        print(f"release gate failed: {reason}", file=sys.stderr)
    released = manifest.status == "succeeded"
    return {"run_id": run_id, "release": manifest.outputs["release"], "released": released, "report": str(report),
            "checks": f"{gate['checks'] - len(gate['failed'])}/{gate['checks']} passed",
            "exit_code": 0 if released else 1}
