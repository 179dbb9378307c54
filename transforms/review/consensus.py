"""Consensus over validated judgments: pivot, decide, apply edits. Pure functions over tables.

`pivot` turns long judgments into one row per item with every annotator's verdict and edits (list
columns aligned on `review_annotators`). `decide` applies the rule (`unanimous`, `k_of_n`,
`majority`) and names the outcome: kept, or dropped with `not_reviewed`, `no_consensus` or
`rejected_by_annotators:<verdict>`. `apply_review` joins that onto the exported items, applies the
agreeing annotators' edits (before/after recorded in `review_edits`) and returns the reviewed table,
the disagreement queue and counts.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.drop_reasons import DropReason, reason_text

EDITABLE = ("goal", "sol1", "sol2")
KEEP_VERDICTS = {"sol1": 0, "sol2": 1, "needs_edit": None}  # verdict → label it implies (None: unchanged)
JUDGMENT_COLUMNS = ("item_id", "annotator", "label", "goal_edit", "sol1_edit", "sol2_edit", "comment")


class ReviewDrops(DropReason):
    """Why a reviewed item is not kept: the review import's reasons."""

    NOT_REVIEWED = "not_reviewed", "no annotator judged the item"
    NO_CONSENSUS = "no_consensus", "the annotators' verdicts do not meet the consensus rule"
    REJECTED_BY_ANNOTATORS = ("rejected_by_annotators",
                              "the annotators' consensus rejects the item (rejected_by_annotators:<why>)")


# plain strings for the polars expressions that write them
NO_CONSENSUS, NOT_REVIEWED, REJECTED_BY = (ReviewDrops.NO_CONSENSUS.value, ReviewDrops.NOT_REVIEWED.value,
                                           ReviewDrops.REJECTED_BY_ANNOTATORS.value)


class ConsensusRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: Literal["unanimous", "k_of_n", "majority"] = Field(
        "unanimous", description="unanimous: all n annotators give the same verdict (Tamil PIQA: 4 of 4, "
        "Ko-PIQA: 2 of 2); k_of_n: at least k give the same verdict; majority: more than half of the "
        "verdicts received.")
    k: int | None = Field(None, ge=1, description="k of k_of_n.")
    n: int | None = Field(None, ge=1, description="Judgments expected per item (default: the batch's annotators).")
    min_judgments: int = Field(1, ge=1, description="majority: fewer verdicts than this is not_reviewed.")
    relabel: bool = Field(True, description="A consensus 'sol1'/'sol2' that contradicts the item's label "
                          "relabels it (recorded in review_edits); False drops it as label_disputed.")

    def check(self, n_annotators: int) -> None:
        n = self.n or n_annotators
        if self.rule == "k_of_n" and (self.k is None or self.k > n):
            raise ValueError(f"rule k_of_n needs 1 <= k <= n (k={self.k}, n={n})")


def _pl() -> Any:
    import polars as pl

    return pl


def pivot(judgments: pa.Table) -> pa.Table:
    """One row per item: `review_annotators` (sorted) and aligned lists of verdicts, edits, comments."""
    pl = _pl()
    frame = pl.from_arrow(judgments.select(list(JUDGMENT_COLUMNS))).sort(["item_id", "annotator"])
    return frame.group_by("item_id", maintain_order=True).agg(
        pl.col("annotator").alias("review_annotators"), pl.col("label").alias("review_labels"),
        *[pl.col(f"{f}_edit").alias(f"review_{f}_edits") for f in EDITABLE],
        pl.col("comment").alias("review_comments")).to_arrow()


def decide(judgments: pa.Table, rule: ConsensusRule, n_expected: int) -> pa.Table:
    """Per judged item: n, top verdict and its count, the consensus (or null) and the drop reason."""
    pl = _pl()
    rule.check(n_expected)
    n_expected = rule.n or n_expected
    j = pl.from_arrow(judgments.select(["item_id", "label"]))
    counts = j.group_by(["item_id", "label"]).agg(pl.len().alias("c"))
    top = (counts.sort(["item_id", "c", "label"], descending=[False, True, False])
           .group_by("item_id", maintain_order=True)
           .agg(pl.col("label").first().alias("top"), pl.col("c").first().alias("top_count"),
                pl.col("c").sum().alias("n"), (pl.col("c") == pl.col("c").max()).sum().alias("n_top")))
    if rule.rule == "unanimous":
        enough = pl.col("n") >= n_expected
        agreed = enough & (pl.col("top_count") == pl.col("n"))
    elif rule.rule == "k_of_n":
        enough = pl.col("n") >= rule.k
        agreed = (pl.col("top_count") >= rule.k) & (pl.col("n_top") == 1)
    else:
        enough = pl.col("n") >= rule.min_judgments
        agreed = enough & (pl.col("top_count") * 2 > pl.col("n"))
    consensus = pl.when(agreed).then(pl.col("top")).otherwise(None)
    reason = (pl.when(agreed & pl.col("top").is_in(list(KEEP_VERDICTS))).then(None)
              .when(agreed).then(pl.lit(f"{REJECTED_BY}:") + pl.col("top"))
              .when(enough).then(pl.lit(NO_CONSENSUS))
              .otherwise(pl.lit(NOT_REVIEWED)))
    out = top.with_columns(consensus.alias("review_consensus"), reason.alias("drop_reason"),
                           (pl.col("top_count") / pl.col("n")).alias("review_agreement"))
    return out.select(["item_id", "n", "review_consensus", "review_agreement", "drop_reason"]).to_arrow()


def agreed_edits(judgments: pa.Table, decisions: pa.Table) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(item, field) → [(edit text, annotator)] from annotators whose verdict is the consensus."""
    pl = _pl()
    j = pl.from_arrow(judgments.select(list(JUDGMENT_COLUMNS)))
    d = pl.from_arrow(decisions.select(["item_id", "review_consensus"]))
    agreeing = j.join(d, on="item_id").filter(pl.col("label") == pl.col("review_consensus"))
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for field in EDITABLE:
        col = f"{field}_edit"
        rows = agreeing.filter(pl.col(col).is_not_null() & (pl.col(col).str.strip_chars() != ""))
        for item, text, ann in rows.select(["item_id", col, "annotator"]).iter_rows():
            out.setdefault((item, field), []).append((text.strip(), ann))
    return out


def apply_review(items: pa.Table, judgments: pa.Table, rule: ConsensusRule, n_expected: int,
                 batch: str = "", automatic: bool = False) -> tuple[pa.Table, pa.Table, dict[str, Any]]:
    """The reviewed items (every exported row, kept or with a drop reason), the disagreement queue
    and counts. `judgments` must already be validated (importing.validate_judgments)."""
    pl = _pl()
    decisions = decide(judgments, rule, n_expected)
    edits = agreed_edits(judgments, decisions)
    frame = pl.from_arrow(items).with_columns(pl.col("id").cast(pl.String))
    piv = pl.from_arrow(pivot(judgments)).rename({"item_id": "id"})
    dec = pl.from_arrow(decisions).rename({"item_id": "id"}).drop("n")
    frame = frame.join(piv, on="id", how="left").join(dec, on="id", how="left", suffix="_review")
    if "drop_reason_review" in frame.columns:  # the items carried an old drop_reason column
        frame = frame.drop("drop_reason").rename({"drop_reason_review": "drop_reason"})
    frame = frame.with_columns(pl.col("drop_reason").fill_null(
        pl.when(pl.col("review_consensus").is_null()).then(pl.lit(NOT_REVIEWED)).otherwise(None)))
    has_label = "label" in frame.columns
    rows = frame.select(["id", *EDITABLE, *(["label"] if has_label else []), "review_consensus",
                         "drop_reason"]).to_dicts()
    new_text: dict[str, list[Any]] = {f: [] for f in EDITABLE}
    new_label, reasons, notes, records = [], [], [], []
    changed_labels = applied = 0
    for row in rows:
        reason, note, rec = row["drop_reason"], None, []
        verdict = row["review_consensus"]
        if reason is None:
            for field in EDITABLE:
                texts = edits.get((row["id"], field), [])
                distinct = sorted({t for t, _ in texts})
                if len(distinct) > 1:
                    reason, note = NO_CONSENSUS, f"agreeing annotators wrote different edits of {field}"
                elif distinct and distinct[0] != row[field]:
                    rec.append({"field": field, "before": row[field], "after": distinct[0],
                                "annotators": sorted(a for _, a in texts)})
            implied = KEEP_VERDICTS.get(verdict)
            if reason is None and verdict == "needs_edit" and not rec:
                reason, note = reason_text((ReviewDrops.REJECTED_BY_ANNOTATORS, "needs_edit")), "marked needs_edit but no annotator wrote an edit"
            if reason is None and implied is not None and has_label and row["label"] is not None \
                    and int(row["label"]) != implied:
                if rule.relabel:
                    rec.append({"field": "label", "before": int(row["label"]), "after": implied,
                                "annotators": []})
                else:
                    reason, note = reason_text((ReviewDrops.REJECTED_BY_ANNOTATORS, "label_disputed")), f"consensus {verdict} contradicts the label"
        if reason is not None:
            rec = []
        after = {r["field"]: r["after"] for r in rec}
        for field in EDITABLE:
            new_text[field].append(after.get(field, row[field]))
        new_label.append(after.get("label", row["label"] if has_label else KEEP_VERDICTS.get(verdict)))
        changed_labels += "label" in after
        applied += sum(1 for r in rec if r["field"] != "label")
        reasons.append(reason)
        notes.append(note)
        records.append(json.dumps(rec, ensure_ascii=False) if rec else None)
    frame = frame.with_columns(
        *[pl.Series(f, new_text[f], dtype=pl.String) for f in EDITABLE],
        pl.Series("label", new_label, dtype=pl.Int64),
        pl.Series("drop_reason", reasons, dtype=pl.String), pl.Series("review_note", notes, dtype=pl.String),
        pl.Series("review_edits", records, dtype=pl.String),
        pl.lit(batch).alias("review_batch"), pl.lit(automatic).alias("review_automatic"))
    reviewed = frame.to_arrow()
    queue = frame.filter(pl.col("drop_reason") == NO_CONSENSUS).to_arrow()
    dropped = frame.filter(pl.col("drop_reason").is_not_null())["drop_reason"].value_counts(sort=True)
    stats = {"items": frame.height, "kept": int(frame["drop_reason"].is_null().sum()),
             "dropped": {r: int(c) for r, c in dropped.iter_rows()}, "queue": queue.num_rows,
             "edits_applied": applied, "labels_changed": changed_labels,
             "rule": rule.model_dump(), "n_expected": rule.n or n_expected}
    return reviewed, queue, stats
