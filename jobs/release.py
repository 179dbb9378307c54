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
    audit: bool = Field(True, description="Run the artifact audit (transforms/eval/audit.py); one that is flagged "
                        "or cannot run refuses the release. false publishes without it (the card says so).")
    audit_bound: float = Field(0.6, gt=0, lt=1, description="Baseline accuracy that flags the audit.")
    licence: str | None = Field(None, description="The release's licence (SPDX or Hub id); default: the licence of "
                                "jobs/recipes/<recipe>.yaml's release. Required.")
    sources: list[dict[str, Any]] = Field(default_factory=list, description="Sources beyond those found for the "
                                          "input in lake/samples/licences.yaml: {name, licence, url, hub_id, "
                                          "attribution, citation}.")
    columns: list[str] | None = Field(None, description="Provenance columns to publish (default: the card's).")
    repo_id: str | None = Field(None, description="The Hub dataset id (ORG/NAME) it will be published as.")
    pretty_name: str | None = Field(None, description="The card's pretty_name (default: the dataset name).")

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return None if value is None else str(value)  # `--version 1.0` arrives as a YAML float


def recipe_licence(recipe: str) -> str | None:
    """The licence a bundled recipe declares for its release (its release run's, else its own)."""
    import yaml

    from transforms.flow.recipe import REPO

    path = REPO / "jobs" / "recipes" / f"{recipe}.yaml"
    if not path.exists():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    runs = [r.get("release") for r in data.get("runs") or [] if isinstance(r, dict) and r.get("release")]
    return next((r["licence"] for r in runs if r.get("licence")), None) or data.get("licence")


def _licence_key(config: Config) -> str:
    """Where the release's licence came from, to name in an error."""
    if config.licence is not None:
        return "licence"
    if recipe_licence(config.recipe) is not None:
        return f"jobs/recipes/{config.recipe}.yaml: licence"
    return f"licence (--set licence=<SPDX id>; no recipe jobs/recipes/{config.recipe}.yaml declares one)"


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    """Read the items, gate them and write the release, as a run of stages (read_items → gate_and_release)."""
    from jobs.errors import UserError
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
                                  config=config.model_dump(),
                                  hub={"licence": config.licence or recipe_licence(config.recipe),
                                       "licence_key": _licence_key(config),
                                       "sources": config.sources, "columns": config.columns,
                                       "repo_id": config.repo_id, "pretty_name": config.pretty_name or dataset})
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
