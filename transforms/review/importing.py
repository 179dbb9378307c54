"""Import judgments into a review batch: read files, validate, decide consensus, write a run.

Files: Label Studio JSON exports (full or JSON-MIN), the batch's filled CSV, or judgments already in
the long format (JSONL / Parquet: item_id, annotator, label or verdict, *_edit, comment). Every
judgment is either valid or rejected with a reason, never dropped quietly:

    skipped_by_annotator   a Label Studio annotation the annotator skipped (was_cancelled)
    missing_annotator      no annotator named
    not_exported           its item (or CSV judgment id) was never exported in this batch
    no_verdict             a row without a verdict (an unfilled CSV slot)
    unknown_label:<value>  a verdict that is not one of the batch's verdicts
    unknown_annotator:<a>  a named batch, and <a> is not one of its annotators
    duplicate_judgment     the same annotator judged the item before (the first one counts)
    too_many_annotators    more annotators on the item than the batch's N slots
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, PrivateAttr

from transforms.core.creating import SourceStage
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.io.input_files import (
    InputFileError,
    is_formula,
    read_json,
    read_jsonl,
    read_sheet,
    require_columns,
    unformat,
)
from transforms.io.sources import TableSource
from transforms.review.batch import VERDICTS, BatchRecord, ReviewError, batch_dir, judgment_id, load_batch
from transforms.review.consensus import ConsensusRule, apply_review

LONG_COLUMNS = ["judgment_id", "item_id", "annotator", "label", "goal_edit", "sol1_edit", "sol2_edit",
                "comment", "skipped", "origin"]


def _pl() -> Any:
    import polars as pl

    return pl


CSV_HEADERS = {c: c for c in ("judgment_id", "item_id", "annotator", "verdict", "label", "goal", "sol1", "sol2",
                                "goal_edit", "sol1_edit", "sol2_edit", "comment")}
_TEXT_CELLS = ("judgment_id", "item_id", "annotator", "label", "goal_edit", "sol1_edit", "sol2_edit", "comment")


def _sheet_rows(path: Path) -> list[dict[str, Any]]:
    """A filled CSV/TSV checked as a whole: encoding, truncation, columns, formulas (input_files.py)."""
    sheet = read_sheet(path, CSV_HEADERS)
    if "verdict" in sheet.columns and "label" not in sheet.columns:
        sheet.columns = ["label" if c == "verdict" else c for c in sheet.columns]
        sheet.rows = [{("label" if k == "verdict" else k): v for k, v in r.items()} for r in sheet.rows]
    require_columns(sheet, [["item_id"], ["annotator"], ["label", "verdict"]], "judgments file")
    rows = []
    for i, row in enumerate(sheet.rows):
        for col in _TEXT_CELLS:
            if is_formula(row.get(col)):
                raise InputFileError(f"{sheet.where(i)}: the {col} cell holds a spreadsheet formula "
                                     f"({str(row[col])[:40]!r}); type the value instead")
        cells = {c: unformat(row.get(c)) for c in _TEXT_CELLS}
        rows.append({**cells, "skipped": False, "origin": sheet.where(i)})
    return rows


def read_judgment_files(files: list[str | Path], users: dict[int, str] | None = None) -> pa.Table:
    """Every file's judgments in the long format (all text columns; `skipped` bool; `origin` = the file
    and line or Label Studio task). A file that cannot be read whole raises InputFileError (one line)."""
    from transforms.review.judgments import read_table
    from transforms.review.labelstudio import parse_export

    rows: list[dict[str, Any]] = []
    for path in map(Path, files):
        if not path.exists():
            raise InputFileError(f"{path}: no such judgments file")
        suffix = path.suffix.lower()
        if suffix == ".json":
            data = read_json(path)
            if not isinstance(data, list):
                raise InputFileError(f"{path}: a Label Studio JSON export is a list of tasks, not a "
                                     f"{type(data).__name__}")
            for n, task in enumerate(data):
                if not isinstance(task, dict):
                    raise InputFileError(f"{path}: task {n} is a {type(task).__name__}, not an object")
                rows += parse_export([task], users, origin=f"{path}#task{task.get('id', n)}")
            continue
        if suffix in (".jsonl", ".ndjson"):
            for n, obj in read_jsonl(path):
                label = obj.get("label", obj.get("verdict"))
                rows.append({"judgment_id": obj.get("judgment_id"), "item_id": obj.get("item_id"),
                             "annotator": obj.get("annotator"), "label": label,
                             **{f"{f}_edit": obj.get(f"{f}_edit") for f in ("goal", "sol1", "sol2")},
                             "comment": obj.get("comment"), "skipped": False, "origin": f"{path}:{n}"})
            continue
        if suffix in (".csv", ".tsv", ".txt"):
            rows += _sheet_rows(path)
            continue
        table = read_table(path)
        names = table.schema.names
        if "verdict" in names and "label" not in names:
            table = table.rename_columns(["label" if n == "verdict" else n for n in names])
        for n, row in enumerate(table.to_pylist()):
            rows.append({"judgment_id": row.get("judgment_id"), "item_id": row.get("item_id"),
                         "annotator": row.get("annotator"), "label": row.get("label"),
                         **{f"{f}_edit": row.get(f"{f}_edit") for f in ("goal", "sol1", "sol2")},
                         "comment": row.get("comment"), "skipped": False, "origin": f"{path}#row{n}"})
    text = {c: pa.array([None if r.get(c) is None else str(r[c]) for r in rows], pa.string())
            for c in LONG_COLUMNS if c != "skipped"}
    text["skipped"] = pa.array([bool(r.get("skipped")) for r in rows], pa.bool_())
    return pa.table({c: text[c] for c in LONG_COLUMNS})


def _file_of(origin: str | None) -> str:
    return re.sub(r"(:\d+|#task.*|#row\d+)$", "", str(origin or ""))


def check_against_batch(judgments: pa.Table, record: BatchRecord, allow_partial: bool = False) -> pa.Table:
    """File-level checks against the batch, before any judgment counts; raises InputFileError (one line):

    * a `judgment_id` of another batch (a file exported for another batch);
    * a `judgment_id` naming another annotator than the row's `annotator` column (a pasted column);
    * a filled CSV that stops before the batch's last item for one of its annotators (a file cut at a
      line boundary), unless `allow_partial`.
    Item ids a spreadsheet reformatted as numbers ("1,234", "12.0") are mapped back to the batch's id."""
    exported = set(record.item_ids)
    rows = judgments.to_pylist()
    per_file_slots: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        where = row.get("origin") or "?"
        item = row.get("item_id")
        if item is not None and item not in exported:
            plain = re.sub(r"(?<=\d)[,\u00a0 ](?=\d{3})", "", item.strip())
            plain = re.sub(r"^(\d+)\.0+$", r"\1", plain)
            if plain in exported:
                row["item_id"] = item = plain
        jid = row.get("judgment_id")
        if not jid or str(jid).startswith("ls-annotation/"):
            continue
        parts = str(jid).rsplit("/", 2)
        if len(parts) != 3:
            raise InputFileError(f"{where}: judgment_id {jid!r} is not <batch>/<item>/<annotator>")
        batch, jitem, jann = parts
        if batch != record.batch:
            raise InputFileError(f"{where}: judgment_id {jid!r} belongs to batch {batch!r}, not {record.batch!r}: "
                                 f"import this file into its own batch")
        ann = (row.get("annotator") or "").strip()
        if ann and ann != jann and jann in record.annotators:
            raise InputFileError(f"{where}: judgment_id {jid!r} names annotator {jann!r} but the annotator column "
                                 f"says {ann!r} (a column pasted from another file?)")
        if item is not None and jitem != item:
            raise InputFileError(f"{where}: judgment_id {jid!r} names item {jitem!r} but the item_id column says "
                                 f"{item!r}")
        if jann in record.annotators and jitem in exported:
            per_file_slots.setdefault(_file_of(where), {}).setdefault(jann, set()).add(jitem)
    if not allow_partial:
        for path, slots in per_file_slots.items():
            short = {ann: [i for i in record.item_ids if i not in items] for ann, items in slots.items()}
            short = {ann: missing for ann, missing in short.items() if missing}
            if short:
                raise InputFileError(
                    f"{path}: rows missing for items of the batch's {len(record.item_ids)}: "
                    + "; ".join(f"annotator {a!r} lacks {len(m)} (first {m[0]!r})" for a, m in sorted(short.items()))
                    + "; the file looks cut short (import it with --allow-partial if that is intended)")
    return pa.Table.from_pylist(rows, schema=judgments.schema)


def label_spellings() -> dict[str, str]:
    """Lower-cased spellings an annotator may use → the verdict (its alias or its full text)."""
    out = {k: k for k in VERDICTS}
    out.update({text.lower(): k for k, text in VERDICTS.items()})
    return out


def validate_judgments(judgments: pa.Table, record: BatchRecord) -> tuple[pa.Table, pa.Table]:
    """(valid judgments with canonical verdicts, rejected judgments with `reject_reason`)."""
    pl = _pl()
    spell = label_spellings()
    exported_items = set(record.item_ids)
    exported_ids = {judgment_id(record.batch, i, a) for i in record.item_ids for a in record.annotators}
    f = pl.from_arrow(judgments).with_row_index("_order")
    ann = pl.col("annotator").str.strip_chars()
    raw = pl.col("label").str.strip_chars()
    canon = raw.str.to_lowercase().replace_strict(spell, default=None)
    reason = (pl.when(pl.col("skipped")).then(pl.lit("skipped_by_annotator"))
              .when(ann.is_null() | (ann == "")).then(pl.lit("missing_annotator"))
              .when(pl.col("item_id").is_null() | ~pl.col("item_id").is_in(list(exported_items)))
              .then(pl.lit("not_exported"))
              .when(pl.col("judgment_id").is_not_null() & ~pl.col("judgment_id").str.starts_with("ls-annotation/")
                    & ~pl.col("judgment_id").is_in(list(exported_ids))).then(pl.lit("not_exported"))
              .when(raw.is_null() | (raw == "")).then(pl.lit("no_verdict"))
              .when(canon.is_null()).then(pl.lit("unknown_label:") + raw))
    if record.named_annotators:
        reason = reason.when(~ann.is_in(record.annotators)).then(pl.lit("unknown_annotator:") + ann)
    f = f.with_columns(ann.alias("annotator"), canon.alias("_verdict"), reason.otherwise(None).alias("reject_reason"))
    # the same annotator again on the same item: the first valid judgment counts
    again = pl.col("reject_reason").is_null() & (pl.int_range(pl.len()).over(["item_id", "annotator",
                                                                               "reject_reason"]) > 0)
    f = f.with_columns(pl.when(again).then(pl.lit("duplicate_judgment")).otherwise(pl.col("reject_reason"))
                       .alias("reject_reason"))
    # more distinct annotators on an item than the batch has slots: the first N (in file order) count
    slots = (f.filter(pl.col("reject_reason").is_null()).select(["item_id", "annotator", "_order"])
             .with_columns(pl.col("_order").rank("ordinal").over("item_id").alias("_slot")))
    f = f.join(slots.select(["_order", "_slot"]), on="_order", how="left")
    f = f.with_columns(pl.when(pl.col("_slot") > len(record.annotators)).then(pl.lit("too_many_annotators"))
                       .otherwise(pl.col("reject_reason")).alias("reject_reason"))
    f = f.sort("_order")
    valid = f.filter(pl.col("reject_reason").is_null()).with_columns(pl.col("_verdict").alias("label"))
    rejected = f.filter(pl.col("reject_reason").is_not_null())
    drop = ["_order", "_verdict", "_slot"]
    return (valid.drop(drop + ["reject_reason"]).to_arrow(), rejected.drop(drop).to_arrow())


@dataclass
class ImportResult:
    record: BatchRecord
    reviewed: pa.Table      # every exported item: kept, or with drop_reason
    queue: pa.Table         # items with no consensus (export again with `review requeue`)
    judgments: pa.Table     # valid judgments, long format
    rejected: pa.Table      # rejected judgments with reject_reason
    stats: dict[str, Any]


def import_judgments(lake: Lake, batch: str, judgments: pa.Table, rule: ConsensusRule | None = None,
                     n_boot: int = 1000) -> ImportResult:
    """Validate judgments against the batch, decide consensus, compute agreement. Writes nothing."""
    from transforms.review.agreement import AgreementConfig, agreement_report
    from transforms.review.judgments import rating_matrix

    record, items = load_batch(lake, batch)
    rule = rule or record.rule
    valid, rejected = validate_judgments(judgments, record)
    reviewed, queue, stats = apply_review(items, valid, rule, len(record.annotators), batch, record.automatic)
    counts = rejected.column("reject_reason").to_pylist()
    stats.update({"batch": batch, "parent_run": record.parent_run, "automatic": record.automatic,
                  "judgments": judgments.num_rows, "judgments_valid": valid.num_rows,
                  "judgments_rejected": {r: counts.count(r) for r in sorted(set(counts))},
                  "files": per_file_counts(valid, rejected)})
    if valid.num_rows:
        long = pa.table({"item": valid.column("item_id"), "annotator": valid.column("annotator"),
                         "label": valid.column("label")})
        stats["agreement"] = agreement_report(rating_matrix(long, categories=list(VERDICTS)),
                                              AgreementConfig(n_boot=n_boot))
    return ImportResult(record, reviewed, queue, valid, rejected, stats)


def per_file_counts(valid: pa.Table, rejected: pa.Table) -> dict[str, dict[str, Any]]:
    """Per input file: judgments read, valid, rejected by reason (and the first rejected line per reason)."""
    out: dict[str, dict[str, Any]] = {}
    for table, ok in ((valid, True), (rejected, False)):
        if "origin" not in table.column_names:
            continue
        reasons = table.column("reject_reason").to_pylist() if not ok else [None] * table.num_rows
        for origin, reason in zip(table.column("origin").to_pylist(), reasons, strict=True):
            f = out.setdefault(_file_of(origin), {"judgments": 0, "valid": 0, "rejected": {}, "first": {}})
            f["judgments"] += 1
            if ok:
                f["valid"] += 1
            else:
                f["rejected"][reason] = f["rejected"].get(reason, 0) + 1
                f["first"].setdefault(reason, origin)
    return out


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


class ReviewedItems(TableSource):
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


def import_files(lake: Lake, batch: str, files: list[str | Path], rule: ConsensusRule | None = None,
                 n_boot: int = 1000, users: dict[int, str] | None = None, *, replace: bool = False,
                 allow_partial: bool = False) -> tuple[ImportResult, RunManifest]:
    """Check every file as a whole (`check_import`), then write the review run; all or nothing."""
    start = time.perf_counter()
    load_batch(lake, batch)  # an unknown batch is the first thing to say
    result = check_import(lake, batch, files, rule, n_boot, users, allow_partial=allow_partial, replace=replace)
    return result, write_import(lake, result, files, seconds=time.perf_counter() - start)


class ReviewImportSource(SourceStage):
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
