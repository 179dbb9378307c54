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

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, PrivateAttr

from transforms.core.creating import SourceStage
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, StageRecord, code_version, fingerprint_file
from transforms.review.batch import VERDICTS, BatchRecord, ReviewError, batch_dir, judgment_id, load_batch
from transforms.review.consensus import ConsensusRule, apply_review

LONG_COLUMNS = ["judgment_id", "item_id", "annotator", "label", "goal_edit", "sol1_edit", "sol2_edit",
                "comment", "skipped", "origin"]


def _pl() -> Any:
    import polars as pl

    return pl


def read_judgment_files(files: list[str | Path], users: dict[int, str] | None = None) -> pa.Table:
    """Every file's judgments in the long format (all text columns; `skipped` bool)."""
    from transforms.review.judgments import read_table
    from transforms.review.labelstudio import parse_export

    rows: list[dict[str, Any]] = []
    for path in map(Path, files):
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                raise ReviewError(f"{path}: a Label Studio JSON export is a list of tasks")
            rows += parse_export(data, users, origin=str(path))
            continue
        table = read_table(path)
        names = table.schema.names
        if "verdict" in names and "label" not in names:
            table = table.rename_columns(["label" if n == "verdict" else n for n in names])
        for row in table.to_pylist():
            rows.append({"judgment_id": row.get("judgment_id"), "item_id": row.get("item_id"),
                         "annotator": row.get("annotator"), "label": row.get("label"),
                         **{f"{f}_edit": row.get(f"{f}_edit") for f in ("goal", "sol1", "sol2")},
                         "comment": row.get("comment"), "skipped": False, "origin": str(path)})
    text = {c: pa.array([None if r.get(c) is None else str(r[c]) for r in rows], pa.string())
            for c in LONG_COLUMNS if c != "skipped"}
    text["skipped"] = pa.array([bool(r.get("skipped")) for r in rows], pa.bool_())
    return pa.table({c: text[c] for c in LONG_COLUMNS})


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
                  "judgments_rejected": {r: counts.count(r) for r in sorted(set(counts))}})
    if valid.num_rows:
        long = pa.table({"item": valid.column("item_id"), "annotator": valid.column("annotator"),
                         "label": valid.column("label")})
        stats["agreement"] = agreement_report(rating_matrix(long, categories=list(VERDICTS)),
                                              AgreementConfig(n_boot=n_boot))
    return ImportResult(record, reviewed, queue, valid, rejected, stats)


def write_import(lake: Lake, result: ImportResult, files: list[str | Path] | None = None,
                 run_id: str | None = None, seconds: float = 0.0) -> RunManifest:
    """Write the batch's import outputs and a review run (curated = kept items) whose parent is the
    exported run; the batch record lists the import."""
    from transforms.core.stage import mark_dropped

    folder = batch_dir(lake, result.record.batch)
    pq.write_table(result.judgments, folder / "judgments.parquet")
    pq.write_table(result.rejected, folder / "rejected_judgments.parquet")
    pq.write_table(result.queue, folder / "queue.parquet")
    pq.write_table(result.reviewed, folder / "reviewed.parquet")
    (folder / "import.json").write_text(json.dumps(result.stats, ensure_ascii=False, indent=1, allow_nan=False),
                                        encoding="utf-8")
    dataset = result.record.dataset or "review"
    run_id = run_id or Lake.new_run_id("review")
    table = mark_dropped(result.reviewed, "review_import")
    status = table.column("_status").to_pylist()
    kept = table.filter(pa.array([s == "kept" for s in status]))
    dropped = table.filter(pa.array([s != "kept" for s in status]))
    stage = "00_review_import"
    paths = {"curated": lake.zone("curated", dataset, run_id), "staged": lake.zone("staged", dataset, run_id) / stage,
             "rejected": lake.zone("rejected", dataset, run_id) / stage}
    for key, part in (("curated", kept), ("staged", kept), ("rejected", dropped)):
        paths[key].mkdir(parents=True, exist_ok=True)
        pq.write_table(part, paths[key] / "part-00000.parquet")
    manifest = RunManifest(run_id=run_id, job="review-import", dataset=dataset, code_version=code_version(),
                           parents=[p for p in [result.record.parent_run] if p],
                           config={"batch": result.record.batch, "rule": result.stats["rule"]})
    manifest.inputs = [fingerprint_file(Path(f)) for f in files or []]
    # counted from the files just written, like every runner stage (the law holds on disk, not on intent)
    from transforms.core.lake import count_rows, value_counts

    on_disk_kept, on_disk_dropped = count_rows(paths["staged"]), value_counts(paths["rejected"], "drop_reason")
    manifest.stages = [StageRecord(index=0, name="review_import", kind="source", rows_in=0,
                                   rows_created=on_disk_kept + sum(on_disk_dropped.values()),
                                   rows_kept=on_disk_kept, rows_dropped=on_disk_dropped, seconds=round(seconds, 3),
                                   outputs={"kept": str(paths["staged"]), "rejected": str(paths["rejected"])})]
    manifest.outputs = {"curated": str(paths["curated"]), "rejected": str(lake.zone("rejected", dataset, run_id)),
                        "review_batch": str(folder)}
    manifest.extras = {"review": result.stats}
    manifest.status = "succeeded"
    manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
    manifest.write(lake.manifest_path(run_id))
    result.record.imports.append({"run_id": run_id, "at": manifest.finished_at, "kept": kept.num_rows,
                                  "files": [str(f) for f in files or []]})
    result.record.write(folder)
    return manifest


def import_files(lake: Lake, batch: str, files: list[str | Path], rule: ConsensusRule | None = None,
                 n_boot: int = 1000, users: dict[int, str] | None = None) -> tuple[ImportResult, RunManifest]:
    start = time.perf_counter()
    load_batch(lake, batch)  # an unknown batch is the first thing to say
    result = import_judgments(lake, batch, read_judgment_files(files, users), rule, n_boot)
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

    _stats: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def stats(self) -> dict[str, Any]:
        return self._stats

    def rows(self) -> pa.Table:
        lake = Lake(self.lake)
        result = import_judgments(lake, self.batch, read_judgment_files(list(self.files)), self.rule, self.n_boot)
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
