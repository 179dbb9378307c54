"""A reviewed item table from real data: PIQA dev items with their three real annotators' verdicts
(../shared/data/annot_piqa_qualtrics_en), through the real consensus (transforms/review/consensus.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from transforms.review.consensus import ConsensusRule, apply_review

VERDICT = {0: "sol1", 1: "sol2"}


def reviewed_piqa(shared_data: Path, n: int = 120, rule: str = "majority") -> pa.Table:
    """The first `n` items every annotator kept under `rule`, with review_labels, review_consensus,
    review_agreement, review_edits ... as the review run writes them."""
    folder = shared_data / "annot_piqa_qualtrics_en"
    items = [json.loads(x) for x in (folder / "piqa_items.jsonl").read_text("utf-8").splitlines() if x.strip()]
    items = items[: 3 * n]
    ids = {r["item_key"] for r in items}
    table = pa.table({
        "id": [r["item_key"] for r in items], "lang": ["en"] * len(items),
        "goal": [r["goal"].strip() for r in items], "sol1": [r["sol1"].strip() for r in items],
        "sol2": [r["sol2"].strip() for r in items], "label": [int(r["gold_label"]) for r in items],
        "source": ["piqa_dev"] * len(items), "is_cultural": [False] * len(items)})
    rows = [json.loads(x) for x in (folder / "piqa_annotations.jsonl").read_text("utf-8").splitlines() if x.strip()]
    rows = [r for r in rows if r["item_id"] in ids and r["label"] in VERDICT]
    judgments = pa.table({
        "item_id": [r["item_id"] for r in rows], "annotator": [r["annotator"] for r in rows],
        "label": [VERDICT[r["label"]] for r in rows], "goal_edit": pa.nulls(len(rows), pa.string()),
        "sol1_edit": pa.nulls(len(rows), pa.string()), "sol2_edit": pa.nulls(len(rows), pa.string()),
        "comment": pa.nulls(len(rows), pa.string())})
    reviewed, _, _ = apply_review(table, judgments, ConsensusRule(rule=rule, relabel=True), n_expected=3,  # type: ignore[arg-type]
                                  batch="test")
    kept = reviewed.filter(pa.compute.is_null(reviewed.column("drop_reason")))
    return kept.drop_columns(["drop_reason"]).slice(0, n)
