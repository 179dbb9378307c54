"""Run a source and a chain of stages on Ray Data, one materialised checkpoint per stage.

Each stage's output is written once, split by `_status` into `staged/.../NN_<stage>/` (kept)
and `rejected/.../NN_<stage>/` (dropped, with reasons). The kept files are the next stage's
input and the checkpoint a resumed run starts from, and counting rows from the files on disk
makes "rows in = kept + dropped" a fact about what was written, not about what we meant to do.

Resilience (transforms/core/partitions.py): a row-wise stage's input is cut into partitions with
done markers, so a killed run resumed with `resume=True` skips finished stages *and* the finished
partitions of the stage it died in; writes are idempotent, so Ray task retries after a lost node
cannot duplicate rows.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from transforms.core import columns as C
from transforms.core.lake import Lake, count_rows, parquet_files, value_counts
from transforms.core.manifest import RunManifest, StageRecord, code_version, fingerprint_config
from transforms.core.partitions import (
    MAX_ROW_GROUP_ROWS,
    PARTS_DIR,
    PartitionLedger,
    partition_rows_setting,
    plan_digest,
    plan_partitions,
    read_partitions,
    with_tracking,
    write_tracked,
)
from transforms.core.stage import GlobalStage, Stage, StageError, mark_dropped

log = logging.getLogger("piqaforge")

CHECKPOINT = "_CHECKPOINT.json"
# True when init_ray started Ray itself: its CPUs are fixed, no autoscaler will add any.
_FIXED_CPUS = False


class Source(Protocol):
    """Where a job's rows come from; the runner records it as stage 0 ("read")."""

    name: str

    def read(self) -> Any:
        """A Ray Dataset in the common schema; unreadable records carry a drop_reason."""

    def fingerprints(self) -> list[dict[str, Any]]: ...

    def describe(self) -> dict[str, Any]: ...


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start or join Ray. Under `ray job submit` RAY_ADDRESS is set and we join the cluster."""
    import ray

    if ray.is_initialized():
        return
    global _FIXED_CPUS
    address = address or os.environ.get("RAY_ADDRESS")
    _FIXED_CPUS = not address
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        # One machine stands in for every worker type: it advertises each environment's custom
        # resource, and PIQAFORGE_<ENV>_PYTHON points a stage at another venv (envs.py).
        from transforms.core.envs import PRESETS

        env_resources = {k: 1000.0 for p in PRESETS.values() for k in p.custom_resources}
        # address="local": never join some other Ray instance recorded in /tmp/ray by `ray start`
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
                 resources=env_resources,
                 object_store_memory=int(os.environ.get("PIQAFORGE_OBJECT_STORE_BYTES", 2 * 2**30)))
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = os.environ.get("PIQAFORGE_PROGRESS", "1") != "0"


def apply_stage(stage: Stage, ds: Any) -> Any:
    """Turn a stage into Ray Data work: a task per batch, an actor pool when it loads a model."""
    if isinstance(stage, GlobalStage):
        return stage.run_dataset(ds)
    args: dict[str, Any] = {"batch_format": "pyarrow", "batch_size": stage.resources.batch_size}
    args.update(stage.resources.ray_remote_args())
    if stage.stateful:
        return ds.map_batches(_StageActor, fn_constructor_kwargs={"stage": stage},
                              concurrency=stage.resources.concurrency or 1, **args)
    return ds.map_batches(stage, **args)


class _StageActor:
    def __init__(self, stage: Stage, tracked: bool = False):
        stage.exit_actor_if_finished()
        self.stage = stage
        self.stage.ensure_setup()
        self.call = with_tracking(stage) if tracked else stage

    def __call__(self, batch: Any) -> Any:
        return self.call(batch)


def _apply_tracked(stage: Stage, ds: Any) -> Any:
    """Like `apply_stage` for a row-wise stage, carrying the partition columns through it."""
    args: dict[str, Any] = {"batch_format": "pyarrow", "batch_size": stage.resources.batch_size}
    args.update(stage.resources.ray_remote_args())
    if stage.stateful:
        return ds.map_batches(_StageActor, fn_constructor_kwargs={"stage": stage, "tracked": True},
                              concurrency=stage.resources.concurrency or 1, **args)
    return ds.map_batches(with_tracking(stage), **args)


def check_schedulable(stage: Stage, cluster_cpus: float, fixed: bool) -> None:
    """Fail at once, not hang forever, when a stage can never be scheduled on this Ray.

    Ray Data does not notice either case below: the tasks wait for CPUs that never free up. On a
    Ray the runner started itself the CPUs are fixed, so this raises; on a cluster the autoscaler
    may still add nodes, so it only warns.
    """
    r = stage.resources
    problem = None
    if r.cpus > cluster_cpus:
        problem = f"each of its tasks or actors asks for {r.cpus:g} CPUs and this Ray has {cluster_cpus:g}"
    elif stage.stateful or r.concurrency:
        actors = r.concurrency or 1
        if cluster_cpus - r.cpus * actors < 1:
            problem = (f"its {actors} actor(s) reserve {r.cpus * actors:g} of this Ray's {cluster_cpus:g} CPUs, "
                       "which leaves less than one for the tasks that read the actors' input")
    if problem is None:
        return
    msg = (f"stage {stage.name!r} cannot run: {problem}. Give Ray more CPUs (`--set num_cpus=N`; Ray's CPUs "
           "are logical, so N may exceed the cores) or lower the stage's resources.cpus / resources.concurrency")
    if fixed:
        raise StageError(msg)
    log.warning("%s (going on: the cluster's autoscaler may add nodes)", msg)


def _run_step(source: Source, stage: Stage | None, prev_kept: Path, rows_in: int, kept_dir: Path,
              rejected_dir: Path, fingerprint: str, resume: bool, partition_rows: int) -> tuple[int, int]:
    """Write one step's kept/rejected output; returns (partitions, partitions reused)."""
    row_group_rows = min(MAX_ROW_GROUP_ROWS, partition_rows)
    if stage is None:  # the source: one partition, not resumable mid-way (reading is the cheap part)
        ledger = PartitionLedger(kept_dir, rejected_dir, fingerprint, "source", resume)
        if 0 not in ledger.done:
            write_tracked(_ensure_status(source.read(), source.name), ledger, None, row_group_rows)
            return 1, 0
        return 1, 1
    if rows_in == 0:
        PartitionLedger(kept_dir, rejected_dir, fingerprint, "empty", resume=False)
        return 0, 0
    import ray

    check_schedulable(stage, ray.cluster_resources().get("CPU", 0.0), _FIXED_CPUS)
    stage.set_finished_marker(kept_dir / CHECKPOINT)  # written only once the whole step is over
    files = parquet_files(prev_kept)
    if isinstance(stage, GlobalStage):
        ledger = PartitionLedger(kept_dir, rejected_dir, fingerprint, "global", resume)
        if 0 in ledger.done:
            return 1, 1
        source_ds = read_partitions(plan_partitions(files, partition_rows), tracked=False)
        ds = _ensure_status(stage.run_dataset(source_ds), stage.name)
        write_tracked(ds, ledger, {0: rows_in}, row_group_rows)
        return 1, 0
    parts = plan_partitions(files, partition_rows)
    ledger = PartitionLedger(kept_dir, rejected_dir, fingerprint, plan_digest(parts), resume,
                             expected={p.index: p.rows for p in parts})
    pending = [p for p in parts if p.index not in ledger.done]
    if len(pending) < len(parts):
        log.info("stage %s: %d of %d partitions already done", stage.name, len(parts) - len(pending), len(parts))
    if pending:
        write_tracked(_apply_tracked(stage, read_partitions(pending)), ledger,
                      {p.index: p.rows for p in pending}, row_group_rows)
    return len(parts), len(parts) - len(pending)


def _ensure_status(ds: Any, stage_name: str) -> Any:
    # Sources and global stages may hand back rows without the bookkeeping columns.
    return ds.map_batches(lambda b: mark_dropped(b, stage_name), batch_format="pyarrow")


def _record(index: int, name: str, rows_in: int, kept_dir: Path, rejected_dir: Path, seconds: float,
            config: dict[str, Any], fingerprint: str) -> StageRecord:
    kept = count_rows(kept_dir)
    dropped = value_counts(rejected_dir, C.DROP_REASON) if parquet_files(rejected_dir) else {}
    return StageRecord(index=index, name=name, rows_in=rows_in, rows_kept=kept, rows_dropped=dropped,
                       seconds=round(seconds, 3), outputs={"kept": str(kept_dir), "rejected": str(rejected_dir)},
                       config=config, fingerprint=fingerprint)


def _load_checkpoint(kept_dir: Path, fingerprint: str) -> StageRecord | None:
    marker = kept_dir / CHECKPOINT
    if not marker.exists():
        return None
    record = StageRecord.model_validate_json(marker.read_text())
    return record if record.fingerprint == fingerprint else None


def _save_checkpoint(kept_dir: Path, record: StageRecord) -> None:
    (kept_dir / CHECKPOINT).write_text(record.model_dump_json(indent=2))


def run_pipeline(
    *,
    job: str,
    dataset: str,
    source: Source,
    stages: Sequence[Stage],
    lake: Lake,
    config: dict[str, Any],
    run_id: str | None = None,
    resume: bool = False,
    after_stage: Callable[[StageRecord], None] | None = None,
    partition_rows: int | None = None,
) -> RunManifest:
    """Run `source` → `stages` into `lake`; returns the manifest (also written to disk).

    With `resume=True` a stage whose checkpoint matches its fingerprint (its config chained to
    every upstream config and the input files' hashes) is reused, and a stage that was cut short
    redoes only its unfinished partitions of ~`partition_rows` rows ($PIQAFORGE_PARTITION_ROWS).
    """
    lake.create()
    run_id = run_id or Lake.new_run_id(job)
    partition_rows = partition_rows_setting(partition_rows)
    manifest = RunManifest(run_id=run_id, job=job, dataset=dataset, config=config, code_version=code_version())
    manifest_path = lake.manifest_path(run_id)
    if resume and manifest_path.exists():
        _carry_attempts(manifest, manifest_path)
    try:
        manifest.inputs = source.fingerprints()
        fingerprint = fingerprint_config(source.describe(), manifest.inputs)
        kept_dir = lake.zone("raw", dataset, run_id)
        rejected_dir = lake.stage_dir("rejected", dataset, run_id, 0, source.name)
        steps: list[tuple[str, Stage | None]] = [(source.name, None)] + [(s.name, s) for s in stages]
        rows_in = 0
        prev_kept: Path = kept_dir
        for index, (name, stage) in enumerate(steps):
            if stage is not None:
                fingerprint = fingerprint_config(fingerprint, stage.describe())
                kept_dir = lake.stage_dir("staged", dataset, run_id, index, name)
                rejected_dir = lake.stage_dir("rejected", dataset, run_id, index, name)
            record = _load_checkpoint(kept_dir, fingerprint) if resume else None
            if record is not None:
                record.resumed = True
                log.info("stage %s: reusing checkpoint %s", name, kept_dir)
            else:
                started = time.perf_counter()
                (kept_dir / CHECKPOINT).unlink(missing_ok=True)
                n_parts, n_reused = _run_step(source, stage, prev_kept, rows_in, kept_dir, rejected_dir,
                                              fingerprint, resume, partition_rows)
                cfg = stage.describe() if stage is not None else source.describe()
                record = _record(index, name, rows_in, kept_dir, rejected_dir, time.perf_counter() - started,
                                 cfg, fingerprint)
                record.partitions, record.partitions_reused = n_parts, n_reused
                if stage is None:  # the source's input is every record it saw, kept or not
                    record.rows_in = record.rows_kept + record.dropped_total
                _save_checkpoint(kept_dir, record)
            manifest.stages.append(record)
            manifest.write(manifest_path)
            if after_stage is not None:
                after_stage(record)
            rows_in = record.rows_kept
            prev_kept = kept_dir
        curated = lake.zone("curated", dataset, run_id)
        if curated.exists():
            shutil.rmtree(curated)
        shutil.copytree(prev_kept, curated, ignore=shutil.ignore_patterns(CHECKPOINT, PARTS_DIR, ".tmp-*"))
        manifest.outputs.update({"curated": str(curated), "rejected": str(lake.zone("rejected", dataset, run_id)),
                                 "manifest": str(manifest_path)})
        manifest.status = "succeeded"
    except BaseException as err:
        manifest.status = "failed"
        manifest.error = f"{type(err).__name__}: {err}"
        manifest.extras["traceback"] = traceback.format_exc(limit=20)
        raise
    finally:
        manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
        manifest.write(manifest_path)
    return manifest


def _carry_attempts(manifest: RunManifest, path: Path) -> None:
    """A resumed run keeps the story of the attempts before it."""
    try:
        old = RunManifest.load(path)
    except (OSError, ValueError):
        return
    manifest.started_at = old.started_at
    attempts = list(old.extras.get("attempts", []))
    attempts.append({"started_at": old.extras.get("attempt_started_at", old.started_at),
                     "finished_at": old.finished_at, "status": old.status, "error": old.error,
                     "stages_finished": [s.name for s in old.stages]})
    manifest.extras["attempts"] = attempts
    manifest.extras["attempt_started_at"] = dt.datetime.now(dt.UTC).isoformat()


def conservation_errors(manifest: RunManifest) -> list[str]:
    """Every stage: rows in = kept + dropped; and each stage's input is the previous stage's kept."""
    errors = []
    for prev, rec in zip([None, *manifest.stages], manifest.stages, strict=False):
        if not rec.conserved():
            errors.append(f"{rec.name}: in {rec.rows_in} != kept {rec.rows_kept} + dropped {rec.dropped_total}")
        if prev is not None and rec.rows_in != prev.rows_kept:
            errors.append(f"{rec.name}: in {rec.rows_in} != previous kept {prev.rows_kept}")
    return errors


def dump_json(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
