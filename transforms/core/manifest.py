"""The run record: `runs/<run_id>/manifest.json`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    computed_field,
    model_serializer,
    model_validator,
)

from transforms.core.secrets import fingerprint_view, redact, scrub_strings


class StageRecord(BaseModel):
    index: int
    name: str
    rows_in: int
    rows_kept: int
    rows_dropped: dict[str, int] = Field(default_factory=dict, description="Dropped rows per drop reason.")
    rows_created: int = Field(0, description="Rows this stage made (sources, expand, aggregate stages).")
    rows_consumed: int = Field(0, description="Input rows turned into children (listed in lineage/).")
    kind: str = Field("filter", description="filter | global | source | expand | aggregate")
    seconds: float = Field(description="Wall seconds of the stage.")
    cpu_seconds: float | None = Field(None, description="CPU seconds while it ran, of what `cpu_scope` names "
                                      "(transforms/core/cpu_time.py); None in manifests older than the field.")
    cpu_scope: str | None = Field(None, description="What `cpu_seconds` covers: the driver and its local Ray "
                                  "processes, or (on a cluster) the driver only.")
    outputs: dict[str, str] = Field(default_factory=dict, description="kept/rejected table paths.")
    config: dict[str, Any] = Field(default_factory=dict)
    fingerprint: str = ""
    resumed: bool = Field(False, description="True when a finished checkpoint was reused.")
    partitions: int = Field(0, description="Resumable partitions the stage's input was cut into.")
    partitions_reused: int = Field(0, description="Partitions finished by an earlier attempt and skipped.")
    fused_with: list[str] = Field(default_factory=list, description="The stages that ran with this one as one "
                                  "pass over their input (transforms/core/fusion.py); empty when it ran alone.")
    requests: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per `model @ endpoint` the stage asked over HTTP: questions, requests, "
        "retries by cause, questions failed by reason, tokens, latency percentiles (transforms/core/accounting.py); "
        "every attempt of a resumed run included.")
    warnings: list[str] = Field(default_factory=list, description="What the stage did that its class does not "
                                "declare (an undeclared drop reason): recorded, shown in the report, never fatal.")

    @model_serializer(mode="wrap")
    def _without_secrets(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Checkpoints and manifests are this serialisation: no secret reaches them (docs/secrets.md).
        return _recorded(handler(self))

    @property
    def dropped_total(self) -> int:
        return sum(self.rows_dropped.values())

    @property
    def rows_processed(self) -> int:
        """The rows the stage worked on: its input, or for a source the rows it made."""
        return self.rows_in if self.kind != "source" else self.rows_created

    # recorded in the manifest (computed fields are serialised) so that `piqaforge plan` reads a run's rates as
    # they were shown, and the plan improves with every run (issue 42)
    @computed_field  # type: ignore[prop-decorator]
    @property
    def rows_per_cpu_second(self) -> float | None:
        """The cost model's unit (benchmarks/bench_crawl_cost.py): rows processed per CPU-second."""
        if not self.cpu_seconds or not self.rows_processed:
            return None
        return self.rows_processed / self.cpu_seconds

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu_seconds(self) -> float | None:
        """GPU-seconds the stage held: its resources' GPUs per actor x actors x wall seconds (what a GPU is billed
        for, model loading included); None for a stage that asked for no GPU."""
        resources = self.config.get("resources") if isinstance(self.config, dict) else None
        gpus = float((resources or {}).get("gpus") or 0)
        if not gpus:
            return None
        return round(gpus * int((resources or {}).get("concurrency") or 1) * self.seconds, 3)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rows_per_gpu_second(self) -> float | None:
        """Rows processed per GPU-second held, where the stage ran on GPUs."""
        if not self.gpu_seconds or not self.rows_processed:
            return None
        return self.rows_processed / self.gpu_seconds

    def conserved(self) -> bool:
        """rows_in + rows_created = rows_kept + sum(rows_dropped) + rows_consumed (docs/stages.md)."""
        return self.rows_in + self.rows_created == self.rows_kept + self.dropped_total + self.rows_consumed


class RunManifest(BaseModel):
    run_id: str
    job: str
    dataset: str
    status: str = "running"
    started_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    finished_at: str | None = None
    code_version: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    parents: list[str] = Field(default_factory=list, description="Run ids whose outputs this run read "
                               "(crawl -> review -> release -> evaluation is one chain).")
    inputs: list[dict[str, Any]] = Field(default_factory=list)
    stages: list[StageRecord] = Field(default_factory=list)
    outputs: dict[str, str] = Field(default_factory=dict)
    extras: dict[str, Any] = Field(default_factory=dict, description="Job-specific summaries (costs, samples).")
    error: str | None = None
    machine: dict[str, Any] | None = Field(None, description="The driver's machine (CPU model, logical CPUs, "
                                           "bfloat16 instructions, GPUs: transforms/core/machine.py), where a "
                                           "local run's rates were measured; None in manifests older than the field.")

    @model_validator(mode="before")
    @classmethod
    def _machine_when_made(cls, data: Any) -> Any:
        # a manifest made now (no start time given) records this machine; one read back keeps the machine it had
        if isinstance(data, dict) and "started_at" not in data and "machine" not in data:
            from transforms.core.machine import machine_info

            data = {**data, "machine": machine_info()}
        return data

    @model_serializer(mode="wrap")
    def _without_secrets(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _recorded(handler(self))

    def write(self, path: Path) -> None:
        write_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> RunManifest:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))

    def funnel(self) -> list[tuple[str, int]]:
        if not self.stages:
            return []
        first = self.stages[0]
        rows = [("input", first.rows_in + first.rows_created)]
        rows += [(s.name, s.rows_kept) for s in self.stages]
        return rows


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def code_version(repo: Path | None = None) -> dict[str, Any]:
    repo = repo or Path(__file__).resolve().parents[2]
    info: dict[str, Any] = {"package": "piqaforge"}
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10)
        if sha.returncode == 0:
            info["git_sha"] = sha.stdout.strip()
            info["dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def fingerprint_file(path: Path, chunk: int = 1 << 20) -> dict[str, Any]:
    """sha256 of the whole file, streamed: inputs are identified by content, not name."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": h.hexdigest()}


def _recorded(data: dict[str, Any]) -> dict[str, Any]:
    """Configs and extras redacted by key and value; every other string scrubbed (transforms/core/secrets.py)."""
    return {k: redact(v) if k in ("config", "extras") else scrub_strings(v) for k, v in data.items()}


def fingerprint_config(*parts: Any) -> str:
    # Secrets never enter a fingerprint; other env_vars values enter keyed-hashed (docs/secrets.md).
    blob = json.dumps(fingerprint_view(list(parts)), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def recorded_figures(run_dir: Path | None, name: str) -> dict[str, Any] | None:
    """Figures a run's recipe `reports` measured, from runs/<run id>/<name>.json (None when absent)."""
    path = run_dir / f"{name}.json" if run_dir is not None else None
    return json.loads(path.read_text(encoding="utf-8")) if path is not None and path.exists() else None


def conservation_errors(manifest: RunManifest) -> list[str]:
    """Every stage obeys the law, and each stage's input is the previous stage's kept rows."""
    errors = []
    for prev, rec in zip([None, *manifest.stages], manifest.stages, strict=False):
        if not rec.conserved():
            errors.append(f"{rec.name}: in {rec.rows_in} + created {rec.rows_created} != kept {rec.rows_kept} + "
                          f"dropped {rec.dropped_total} + consumed {rec.rows_consumed}")
        if prev is not None and rec.rows_in != prev.rows_kept:
            errors.append(f"{rec.name}: in {rec.rows_in} != previous kept {prev.rows_kept}")
    return errors
