"""Every judgment valid or rejected with a reason, never dropped quietly; then consensus and agreement.

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

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from transforms.core.lake import Lake
from transforms.review.batch_record import BatchRecord, judgment_id, load_batch
from transforms.review.consensus import ConsensusRule, apply_review
from transforms.review.judgment_files import file_of
from transforms.review.vocabulary import VERDICTS


def _pl() -> Any:
    import polars as pl

    return pl


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
            f = out.setdefault(file_of(origin), {"judgments": 0, "valid": 0, "rejected": {}, "first": {}})
            f["judgments"] += 1
            if ok:
                f["valid"] += 1
            else:
                f["rejected"][reason] = f["rejected"].get(reason, 0) + 1
                f["first"].setdefault(reason, origin)
    return out
