"""Import judgments into a review batch: read files, validate, decide consensus, write a run.

The steps live in their own modules: reading the files and checking them against the batch as wholes
(review/judgment_files.py), every judgment valid or rejected with a reason, consensus and agreement
(review/validate.py, which lists the reasons), writing the batch's side files and the review run
(review/import_run.py). Here: the import as one call (`check_import`, `import_files`) and as a job's source.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, PrivateAttr

from transforms.core.creating import SourceStage
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.io.input_files import InputFileError
from transforms.review.batch_record import batch_dir, load_batch
from transforms.review.consensus import ConsensusRule, ReviewDrops
from transforms.review.import_run import ReviewedItems, write_import  # noqa: F401 (re-exported)
from transforms.review.judgment_files import (  # noqa: F401 (re-exported)
    CSV_HEADERS,
    LONG_COLUMNS,
    check_against_batch,
    read_judgment_files,
)
from transforms.review.validate import (  # noqa: F401 (re-exported)
    ImportResult,
    import_judgments,
    label_spellings,
    per_file_counts,
    validate_judgments,
)
from transforms.review.vocabulary import ReviewError


def check_import(lake: Lake, batch: str, files: list[str | Path], rule: ConsensusRule | None = None,
                 n_boot: int = 1000, users: dict[int, str] | None = None, *, allow_partial: bool = False,
                 replace: bool = False) -> ImportResult:
    """Read and validate every file against the batch and decide consensus, writing nothing (what
    `--dry-run` shows). Raises InputFileError / ReviewError (one line) when the import must not happen:
    a file unreadable as a whole, of another batch, cut short, contradicting itself, or with no valid
    judgment; a batch imported before, unless `replace`."""
    record, _ = load_batch(lake, batch)
    if record.imports and not replace:
        last = record.imports[-1]
        raise ReviewError(f"batch {batch!r} was imported already (run {last.get('run_id')} at {last.get('at')}, "
                          f"from {', '.join(last.get('files') or []) or 'judgments in memory'}); import again with "
                          f"--replace to supersede that import")
    if not files:
        raise ReviewError("no judgments file given")
    judgments = check_against_batch(read_judgment_files(files, users), record, allow_partial)
    result = import_judgments(lake, batch, judgments, rule, n_boot)
    for path in map(str, files):
        counts = result.stats["files"].get(path, {"judgments": 0, "valid": 0, "rejected": {}, "first": {}})
        if not counts["valid"]:
            why = ", ".join(f"{n} {r} (first at {counts['first'][r]})" for r, n in counts["rejected"].items())
            raise InputFileError(f"{path}: no valid judgment in this file ({counts['judgments']} read"
                                 + (f": {why}" if why else "") + "); nothing was imported")
    return result


def import_files(lake: Lake, batch: str, files: list[str | Path], rule: ConsensusRule | None = None,
                 n_boot: int = 1000, users: dict[int, str] | None = None, *, replace: bool = False,
                 allow_partial: bool = False) -> tuple[ImportResult, RunManifest]:
    """Check every file as a whole (`check_import`), then write the review run; all or nothing."""
    start = time.perf_counter()
    load_batch(lake, batch)  # an unknown batch is the first thing to say
    result = check_import(lake, batch, files, rule, n_boot, users, allow_partial=allow_partial, replace=replace)
    return result, write_import(lake, result, files, seconds=time.perf_counter() - start)


class ReviewImportSource(SourceStage[ReviewDrops]):
    """The import as a job's source: yields every exported item, kept or with its drop reason, so the
    runner can run it as a run whose parent is the exported one. The batch's side outputs
    (judgments, rejected judgments, queue, import.json) are written to the batch folder; `stats`
    holds the counts and agreement for the run's manifest."""

    name: ClassVar[str] = "review_import"
    lake: str = Field(..., description="Lake root holding review/<batch>/.")
    batch: str = Field(..., description="The review batch to import into.")
    files: list[str] = Field(..., description="Label Studio JSON exports, filled CSVs or long-format files.")
    rule: ConsensusRule | None = Field(None, description="Override the batch's consensus rule.")
    n_boot: int = Field(1000, ge=0, description="Bootstrap replicates for the agreement intervals.")
    replace: bool = Field(False, description="Import into a batch imported before (supersedes that import).")
    allow_partial: bool = Field(False, description="Accept a filled CSV that lacks rows for some of the batch's "
                                "items (otherwise: the file looks cut short, an error).")

    _stats: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def stats(self) -> dict[str, Any]:
        return self._stats

    def rows(self) -> pa.Table:
        lake = Lake(self.lake)
        result = check_import(lake, self.batch, list(self.files), self.rule, self.n_boot,
                              allow_partial=self.allow_partial, replace=self.replace)
        folder = batch_dir(lake, self.batch)
        for name, table in (("judgments", result.judgments), ("rejected_judgments", result.rejected),
                            ("queue", result.queue)):
            pq.write_table(table, folder / f"{name}.parquet")
        (folder / "import.json").write_text(json.dumps(result.stats, ensure_ascii=False, indent=1), encoding="utf-8")
        self._stats = result.stats
        return result.reviewed

    def fingerprints(self) -> list[dict[str, Any]]:
        folder = batch_dir(Lake(self.lake), self.batch)
        paths = [folder / "batch.json", folder / "items.parquet", *map(Path, self.files)]
        return [fingerprint_file(p) for p in paths]
