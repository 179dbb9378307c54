"""A step's record and checkpoint: where a stage writes (`StepDirs`), what its files say it did (`record_step`:
rows in, kept, dropped by reason, created, consumed), and the checkpoint a resumed run reuses. The runner
(transforms/core/runner.py) calls these after each step; the counts are read from the files, never taken from
what the stage meant to do (docs/stages.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transforms.core import columns as C
from transforms.core import cpu_time
from transforms.core.accounting import read_ledgers
from transforms.core.creating import AggregateStage, ExpandStage, SourceStage, is_creating
from transforms.core.lake import Lake, count_rows, iter_batches, parquet_files, value_counts
from transforms.core.manifest import StageRecord
from transforms.core.stage import GlobalStage, Stage, check_drop_reasons

CHECKPOINT = "_CHECKPOINT.json"


def stage_kind(stage: Stage[Any]) -> str:
    if isinstance(stage, SourceStage):
        return "source"
    if isinstance(stage, AggregateStage):
        return "aggregate"
    if isinstance(stage, ExpandStage):
        return "expand"
    return "global" if isinstance(stage, GlobalStage) else "filter"


class StepDirs:
    """Where one step writes: kept, rejected and (stages that create rows) lineage."""

    def __init__(self, lake: Lake, dataset: str, run_id: str, index: int, stage: Stage[Any]):
        self.kept = (lake.zone("raw", dataset, run_id) if index == 0
                     else lake.stage_dir("staged", dataset, run_id, index, stage.name))
        self.rejected = lake.stage_dir("rejected", dataset, run_id, index, stage.name)
        creates = is_creating(stage) and not isinstance(stage, SourceStage)
        self.lineage = lake.stage_dir("lineage", dataset, run_id, index, stage.name) if creates else None
        # what the stage asked of HTTP endpoints, one ledger file per actor (transforms/core/accounting.py)
        self.requests = lake.run_dir(run_id) / "requests" / f"{index:02d}-{stage.name}"



def lineage_counts(lineage_dir: Path | None, kind: str) -> tuple[int, int]:
    """(rows created, rows consumed) of a stage, counted from its lineage files."""
    if lineage_dir is None or not parquet_files(lineage_dir):
        return 0, 0
    consumed, created = 0, 0
    children: set[str] = set()
    for batch in iter_batches(lineage_dir, columns=["n_children", "child_ids"]):
        consumed += batch.num_rows
        if kind == "aggregate":  # many parents share one child
            children.update(c for ids in batch.column(1).to_pylist() for c in ids)
        else:
            created += sum(batch.column(0).to_pylist())
    return (len(children) if kind == "aggregate" else created), consumed


def record_step(index: int, stage: Stage[Any], rows_in: int, dirs: StepDirs, seconds: float, fingerprint: str,
            config: dict[str, Any], cpu_seconds: float | None = None, fused_with: Sequence[str] = (),
            kept_files: bool = True) -> StageRecord:
    """A stage's record, counted from its files. A fused member before the last wrote no kept files
    (`kept_files=False`): its kept rows are its rows in less those it dropped, which the next member starts from."""
    kind = stage_kind(stage)
    dropped = value_counts(dirs.rejected, C.DROP_REASON) if parquet_files(dirs.rejected) else {}
    kept = count_rows(dirs.kept) if kept_files else rows_in - sum(dropped.values())
    # every kind, whichever way the stage ran (sources too): a warning on the record, never the end of the run
    warnings = check_drop_reasons(stage, [str(r) for r in dropped])
    created, consumed = lineage_counts(dirs.lineage, kind)
    if kind == "source":  # every record the source saw was born here
        rows_in, created = 0, kept + sum(dropped.values())
    outputs = {"kept": str(dirs.kept), "rejected": str(dirs.rejected)} if kept_files else \
        {"rejected": str(dirs.rejected)}
    if dirs.lineage is not None:
        outputs["lineage"] = str(dirs.lineage)
    return StageRecord(index=index, name=stage.name, kind=kind, rows_in=rows_in, rows_kept=kept,
                       rows_dropped=dropped, rows_created=created, rows_consumed=consumed,
                       seconds=round(seconds, 3), cpu_seconds=None if cpu_seconds is None else round(cpu_seconds, 3),
                       cpu_scope=cpu_time.scope() if cpu_seconds is not None else None, outputs=outputs,
                       config=config, fingerprint=fingerprint, requests=read_ledgers(dirs.requests),
                       fused_with=list(fused_with), warnings=warnings)



def load_checkpoint(kept_dir: Path, fingerprint: str) -> StageRecord | None:
    marker = kept_dir / CHECKPOINT
    if not marker.exists():
        return None
    record = StageRecord.model_validate_json(marker.read_text())
    return record if record.fingerprint == fingerprint else None


def save_checkpoint(kept_dir: Path, record: StageRecord) -> None:
    (kept_dir / CHECKPOINT).write_text(record.model_dump_json(indent=2))
