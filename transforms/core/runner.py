"""Run a chain of stages on Ray Data, one materialised checkpoint per stage.

The first stage is a source; every later stage filters, rewrites, expands or aggregates. Each stage's output
is written once, split into `staged/.../NN_<stage>/` (kept), `rejected/.../NN_<stage>/` (dropped, with its
declared reasons) and, for stages that create rows, `lineage/.../NN_<stage>/`. The kept files are the next
stage's input and a resumed run's checkpoint; every stage record counts its rows from them, so the law

    rows_in + rows_created = rows_kept + sum(rows_dropped) + rows_consumed

is a fact about what was written, not about what we meant to do (docs/stages.md).

The way of a batch, top-down: this module picks the step and its checkpoint (fusion.py joins cheap row-wise
neighbours into one step; records.py counts each stage's record from its files) → planning.py cuts the input into
partitions → execution.py runs the stage on Ray → writing.py writes the files → ledger.py marks partitions done,
so a killed run resumed with `resume=True` skips finished stages *and* the finished partitions of the one it died in.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transforms.core import cpu_time
from transforms.core.accounting import read_ledgers
from transforms.core.creating import SourceStage
from transforms.core.execution import (  # noqa: F401 (re-exported: jobs and tests import them from here)
    _StageActor,
    check_schedulable,
    fixed_cpus,
    init_ray,
    map_stage,
    read_source,
    run_global,
)
from transforms.core.fusion import FusedStages, fuse_groups, fusion_enabled, member_shares
from transforms.core.lake import Lake, parquet_files
from transforms.core.ledger import PartitionLedger
from transforms.core.manifest import (  # noqa: F401 (conservation_errors re-exported: jobs and tests import it here)
    RunManifest,
    StageRecord,
    code_version,
    conservation_errors,
    fingerprint_config,
)
from transforms.core.planning import (
    MAX_ROW_GROUP_ROWS,
    PARTS_DIR,
    partition_rows_setting,
    plan_digest,
    plan_partitions,
    read_partitions,
)
from transforms.core.records import (  # noqa: F401 (stage_kind re-exported)
    CHECKPOINT,
    StepDirs,
    load_checkpoint,
    record_step,
    save_checkpoint,
    stage_kind,
)
from transforms.core.stage import GlobalStage, Stage
from transforms.core.writing import publish_file, write_dataset

log = logging.getLogger("piqaforge")
STAGED = "none"  # staged/ kept rows: uncompressed, the next stage's input (transforms/core/writing.py)

# Kept for jobs written against the old runner: a source is now a SourceStage.
Source = SourceStage


def _run_step(stage: Stage[Any], prev_kept: Path | None, rows_in: int, dirs: StepDirs, fingerprint: str,
              resume: bool, partition_rows: int, member_rejected: tuple[Path, ...] = ()) -> tuple[int, int]:
    """Write one step's output; returns (partitions, partitions reused). A fused step (transforms/core/fusion.py)
    names every member's rejected folder in `member_rejected`."""
    row_group_rows = min(MAX_ROW_GROUP_ROWS, partition_rows)

    def ledger(plan: str, expected: dict[int, int] | None = None, fresh: bool = False) -> PartitionLedger:
        return PartitionLedger(dirs.kept, dirs.rejected, fingerprint, plan, resume and not fresh, expected,
                               lineage_dir=dirs.lineage, member_rejected=member_rejected)

    if isinstance(stage, SourceStage):  # one partition, not resumable mid-way (reading is the cheap part)
        led = ledger("source")
        if 0 in led.done:
            return 1, 1
        write_dataset(read_source(stage), led, None, row_group_rows, stage.name)
        return 1, 0
    if rows_in == 0:
        ledger("empty", fresh=True)
        return 0, 0
    import ray

    assert prev_kept is not None
    check_schedulable(stage, ray.cluster_resources().get("CPU", 0.0), fixed_cpus())
    if hasattr(stage, "record_requests_to"):  # LLM and translation stages account their HTTP requests
        stage.record_requests_to(str(dirs.requests))
    stage.set_finished_marker(dirs.kept / CHECKPOINT)  # written only once the whole step is over
    files = parquet_files(prev_kept)
    if isinstance(stage, GlobalStage):
        led = ledger("global")
        if 0 in led.done:
            return 1, 1
        parts = plan_partitions(files, partition_rows)
        write_dataset(run_global(stage, read_partitions(parts, tracked=False), parts), led, {0: rows_in},
                      row_group_rows, stage.name, STAGED)
        return 1, 0
    parts = plan_partitions(files, partition_rows)
    led = ledger(plan_digest(parts), {p.index: p.rows for p in parts})
    pending = [p for p in parts if p.index not in led.done]
    if len(pending) < len(parts):
        log.info("stage %s: %d of %d partitions already done", stage.name, len(parts) - len(pending), len(parts))
    if pending:
        write_dataset(map_stage(stage, read_partitions(pending)), led, {p.index: p.rows for p in pending},
                      row_group_rows, stage.name, STAGED)
    return len(parts), len(parts) - len(pending)


def _run_fused(group: list[int], members: list[Stage[Any]], dirs: list[StepDirs], fingerprints: list[str],
               prev_kept: Path | None, rows_in: int, resume: bool, partition_rows: int,
               timing_dir: Path) -> list[StageRecord]:
    """Run fused members as one step (transforms/core/fusion.py); one record per member."""
    started = time.perf_counter()
    for d in dirs[:-1]:  # an intermediate member keeps no rows of its own (a stale attempt's would mislead)
        shutil.rmtree(d.kept, ignore_errors=True)
        d.kept.mkdir(parents=True, exist_ok=True)
    (dirs[-1].kept / CHECKPOINT).unlink(missing_ok=True)
    shutil.rmtree(timing_dir, ignore_errors=True)
    import ray

    fused = FusedStages.of(members, timing_dir, ray.cluster_resources().get("CPU") if fixed_cpus() else None)
    with cpu_time.StageClock() as cpu:
        n_parts, n_reused = _run_step(fused, prev_kept, rows_in, dirs[-1], fingerprints[-1], resume, partition_rows,
                                      tuple(d.rejected for d in dirs))
    seconds = time.perf_counter() - started
    shares = member_shares(timing_dir, len(members))
    names = [m.name for m in members]
    records = []
    for j, (index, member, d) in enumerate(zip(group, members, dirs, strict=True)):
        last = j == len(members) - 1
        record = record_step(index, member, rows_in, d, seconds * shares[j], fingerprints[j], member.describe(),
                         None if cpu.seconds is None else cpu.seconds * shares[j], fused_with=names,
                         kept_files=last)
        record.partitions, record.partitions_reused = n_parts, n_reused
        records.append(record)
        rows_in = record.rows_kept
    for d, record in zip(dirs, records, strict=True):  # the last member's checkpoint says the whole step is over
        save_checkpoint(d.kept, record)
    return records


def run_pipeline(
    *,
    job: str,
    dataset: str,
    source: SourceStage[Any],
    stages: Sequence[Stage[Any]],
    lake: Lake,
    config: dict[str, Any],
    run_id: str | None = None,
    resume: bool = False,
    after_stage: Callable[[StageRecord], None] | None = None,
    before_stage: Callable[[int, Stage], None] | None = None,
    partition_rows: int | None = None,
    parents: Sequence[str] = (),
    fuse: bool | None = None,
) -> RunManifest:
    """Run `source` → `stages` into `lake`; returns the manifest (also written to disk).

    With `resume=True` a stage whose checkpoint matches its fingerprint (its config chained to
    every upstream config and the input files' hashes) is reused, and a stage that was cut short
    redoes only its unfinished partitions of ~`partition_rows` rows ($PIQAFORGE_PARTITION_ROWS).
    `parents` names the runs whose outputs this run reads (a review reads a crawl's sample ...).
    Neighbouring cheap row-wise stages run as one pass unless `fuse=False` or PIQAFORGE_FUSE=0
    (transforms/core/fusion.py).
    """
    if not isinstance(source, SourceStage):
        raise TypeError(f"a job's first stage must be a SourceStage, got {type(source).__name__}")
    lake.create()
    from transforms.core.secrets import bind_fingerprint_key

    bind_fingerprint_key(lake.root)  # env_vars enter fingerprints keyed by this lake's key (docs/secrets.md)
    run_id = run_id or Lake.new_run_id(job)
    partition_rows = partition_rows_setting(partition_rows)
    manifest = RunManifest(run_id=run_id, job=job, dataset=dataset, config=config, code_version=code_version(),
                           parents=list(parents))
    manifest_path = lake.manifest_path(run_id)
    if resume and manifest_path.exists():
        _carry_attempts(manifest, manifest_path)
    from transforms.core.console import with_console

    before_stage, after_stage = with_console(lake.run_dir(run_id), run_id, len(stages) + 1, before_stage,
                                             after_stage)
    current: tuple[str, Path] | None = None
    from transforms.core.liveness import Heartbeat, driver_stamp

    manifest.extras["driver"] = driver_stamp()  # `piqaforge runs` says interrupted once this driver is gone
    heartbeat = Heartbeat(lake.run_dir(run_id)).__enter__()
    try:
        manifest.inputs = source.fingerprints()
        chain = [source, *stages]
        fingerprints = [fingerprint_config(source.describe(), manifest.inputs)]
        for stage in stages:
            fingerprints.append(fingerprint_config(fingerprints[-1], stage.describe()))
        steps = [[0], *([i + 1 for i in g] for g in fuse_groups(list(stages), fusion_enabled(fuse)))]
        rows_in, prev_kept = 0, None
        for step in steps:
            members = [chain[i] for i in step]
            dirs = [StepDirs(lake, dataset, run_id, i, chain[i]) for i in step]
            current = (members[-1].name, dirs[-1].requests)
            before_stage(step[0], members[0])
            saved = [load_checkpoint(d.kept, fingerprints[i]) for i, d in zip(step, dirs, strict=True)] \
                if resume else [None]
            # a step's checkpoints are reused together, and only when its last one wrote kept rows (a stage that
            # ran inside a fused step and now runs alone, or ends a shorter fused step, did not)
            if all(r is not None for r in saved) and "kept" in (saved[-1].outputs if saved[-1] else {}):
                records = [r for r in saved if r is not None]
                for record in records:
                    record.resumed = True
                log.info("stage %s: reusing checkpoint %s", members[-1].name, dirs[-1].kept)
            elif len(step) > 1:
                records = _run_fused(step, members, dirs, [fingerprints[i] for i in step], prev_kept, rows_in,
                                     resume, partition_rows, lake.run_dir(run_id) / "fused" / f"{step[-1]:02d}")
            else:
                index, stage, d = step[0], members[0], dirs[0]
                started = time.perf_counter()
                (d.kept / CHECKPOINT).unlink(missing_ok=True)
                with cpu_time.StageClock() as cpu:  # the driver's and its local Ray workers' CPU seconds
                    n_parts, n_reused = _run_step(stage, prev_kept, rows_in, d, fingerprints[index], resume,
                                                  partition_rows)
                record = record_step(index, stage, rows_in, d, time.perf_counter() - started, fingerprints[index],
                                 stage.describe(), cpu.seconds)
                record.partitions, record.partitions_reused = n_parts, n_reused
                save_checkpoint(d.kept, record)
                records = [record]
            for j, record in enumerate(records):
                if j:
                    before_stage(step[j], members[j])
                manifest.stages.append(record)
                manifest.write(manifest_path)
                after_stage(record)
            rows_in, prev_kept = records[-1].rows_kept, dirs[-1].kept
        assert prev_kept is not None
        curated = lake.zone("curated", dataset, run_id)
        if curated.exists():
            shutil.rmtree(curated)
        shutil.copytree(prev_kept, curated, ignore=shutil.ignore_patterns(CHECKPOINT, PARTS_DIR, ".tmp-*"),
                        copy_function=publish_file)
        manifest.outputs.update({"curated": str(curated), "rejected": str(lake.zone("rejected", dataset, run_id)),
                                 "manifest": str(manifest_path)})
        if any(s.outputs.get("lineage") for s in manifest.stages):
            manifest.outputs["lineage"] = str(lake.zone("lineage", dataset, run_id))
        manifest.status = "succeeded"
    except BaseException as err:
        manifest.status = "failed"
        manifest.error = f"{type(err).__name__}: {err}"
        manifest.extras["traceback"] = traceback.format_exc(limit=20)
        if current is not None and (asked := read_ledgers(current[1])):  # what the failed stage asked
            manifest.extras["failed_stage"] = current[0]
            manifest.extras["failed_stage_requests"] = asked
        elif current is not None:
            manifest.extras["failed_stage"] = current[0]
        raise
    finally:
        heartbeat.__exit__()
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


def dump_json(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
