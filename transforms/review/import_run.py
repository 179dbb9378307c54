"""An import written: the batch's side files and a review run (curated = kept items) whose parent is the
exported run, all or nothing; a re-import supersedes the earlier one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.io.sources import TableSource
from transforms.review.batch_record import batch_dir
from transforms.review.consensus import ReviewDrops
from transforms.review.validate import ImportResult


def write_import(lake: Lake, result: ImportResult, files: list[str | Path] | None = None,
                 run_id: str | None = None, seconds: float = 0.0) -> RunManifest:
    """Write the batch's import outputs and a review run (curated = kept items) whose parent is the
    exported run; the batch record lists the import."""
    folder = batch_dir(lake, result.record.batch)
    dataset = result.record.dataset or "review"
    run_id = run_id or Lake.new_run_id("review")
    earlier = [dict(i) for i in result.record.imports if not i.get("superseded_by")]
    if earlier:
        result.stats["supersedes"] = [str(o.get("run_id")) for o in earlier]
    staging = folder / f".import-{run_id}"
    staging.mkdir(parents=True, exist_ok=True)
    try:
        manifest = _write_run(lake, result, files, run_id, dataset, seconds, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for zone in ("curated", "staged", "rejected"):
            shutil.rmtree(lake.zone(zone, dataset, run_id), ignore_errors=True)
        raise
    # the batch's side files move in only once the run is written: a failed import leaves the last one
    for tmp in staging.iterdir():
        tmp.replace(folder / tmp.name)
    staging.rmdir()
    for old in earlier:  # a re-import (--replace) supersedes the earlier one, in the batch and its run
        for entry in result.record.imports:
            if entry.get("run_id") == old.get("run_id"):
                entry["superseded_by"] = run_id
        path = lake.manifest_path(str(old.get("run_id")))
        if path.exists():
            previous = RunManifest.model_validate_json(path.read_text(encoding="utf-8"))
            previous.extras["superseded_by"] = run_id
            previous.write(path)
    result.record.imports.append({"run_id": run_id, "at": manifest.finished_at, "kept": manifest.stages[0].rows_kept,
                                  "files": [str(f) for f in files or []],
                                  **({"supersedes": [o.get("run_id") for o in earlier]} if earlier else {})})
    result.record.write(folder)
    return manifest


class ReviewedItems(TableSource[ReviewDrops]):
    """Every exported item of an import, kept or with its drop reason: the review run's source (recorded by
    its content hash, with the batch as its label)."""

    name: ClassVar[str] = "review_import"

    def __init__(self, table: pa.Table | None = None, **data: Any):  # (pydantic's plugin would hide the base's)
        super().__init__(table, **data)


def _write_run(lake: Lake, result: ImportResult, files: list[str | Path] | None, run_id: str, dataset: str,
               seconds: float, staging: Path) -> RunManifest:
    """The batch's side files into `staging`, then the review run through the runner: its source yields every
    exported item, kept or with its drop reason, so the law is counted from disk like every run's."""
    from transforms.core.runner import run_pipeline

    pq.write_table(result.judgments, staging / "judgments.parquet")
    pq.write_table(result.rejected, staging / "rejected_judgments.parquet")
    pq.write_table(result.queue, staging / "queue.parquet")
    pq.write_table(result.reviewed, staging / "reviewed.parquet")
    (staging / "import.json").write_text(json.dumps(result.stats, ensure_ascii=False, indent=1, allow_nan=False),
                                         encoding="utf-8")
    folder = batch_dir(lake, result.record.batch)
    # a source alone, held in memory: the runner writes it without starting Ray (read_source)
    source = ReviewedItems(result.reviewed, label=f"review batch {result.record.batch}")
    manifest = run_pipeline(job="review-import", dataset=dataset, source=source, stages=[], lake=lake,
                            config={"batch": result.record.batch, "rule": result.stats["rule"]}, run_id=run_id,
                            parents=[p for p in [result.record.parent_review_run or result.record.parent_run] if p])
    manifest.inputs = [*manifest.inputs, *(fingerprint_file(Path(f)) for f in files or [])]
    manifest.outputs["review_batch"] = str(folder)
    manifest.extras["review"] = result.stats  # the import's counts and agreement, as the import computed them
    manifest.write(lake.manifest_path(run_id))
    return manifest
