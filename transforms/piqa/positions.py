"""Columns that refer to a solution by its position, and the one helper that swaps them all.

An item's two solutions have no meaning in their order, so stages may exchange them (label balance).
Everything that names a solution by position must then move with it, or the item contradicts itself
(a reviewer's "sol1" pointing at what is now `sol2`: issue 32, STYLE.md convention 15). Three kinds:

* `POSITION_PAIRS`: a pair of columns holding something per solution (`sol1_gloss`/`sol2_gloss`,
  each annotator's edit of sol1/sol2, ...): the two columns are exchanged.
* `VERDICT_COLUMNS`: a column whose values name a solution ("sol1"/"sol2"; a list of them per
  annotator): the names are exchanged inside the values, other verdicts (`both_wrong`, ...) stay.
* `INDEX_COLUMNS`: a column whose values number a solution: `label` (0/1) and J-PIQA's `correct`
  ("1"/"2", 1-based): the number is flipped.
* `EDIT_RECORD_COLUMNS`: JSON lists of {field, before, after} records (`review_edits`): an edit of
  sol1 becomes an edit of sol2, a label change is flipped.

`swap_solutions(table, mask)` applies all four to the rows of `mask`; every stage that exchanges
solutions calls it, and `tests/piqa/test_positions.py` fails when a column that looks positional (its name
or its documented meaning names a solution) is neither declared here nor in `NOT_POSITIONAL` with a reason.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transforms.core.stage import put_column

POSITION_PAIRS: tuple[tuple[str, str], ...] = (
    ("sol1", "sol2"),                                   # every recipe
    ("sol1_gloss", "sol2_gloss"),                       # J-PIQA, zh-piqa: English glosses
    ("option1", "option2"),                             # J-PIQA: the appendix's option columns
    ("en_sol1", "en_sol2"),                             # PIndicQA: the English source
    ("translated_sol1", "translated_sol2"),             # PIndicQA: the machine translation
    ("corrected_sol1", "corrected_sol2"),               # PIndicQA: the corrected translation
    ("mt_sol1", "mt_sol2"),                             # PIndicQA: the translation before correction
    ("base_sol1", "base_sol2"),                         # J-PIQA: the item a lexical variant was made from
    ("base_sol1_en", "base_sol2_en"),                   # J-PIQA: that item's English glosses
    ("option1_en", "option2_en"),                       # J-PIQA: the appendix's English options
    ("ll_sol1", "ll_sol2"),                             # evaluation: log-likelihood of each solution
    ("ntok_sol1", "ntok_sol2"),                         # evaluation: tokens of each solution
    ("review_sol1_edits", "review_sol2_edits"),         # each annotator's edit of a solution
)
# values name a solution: "sol1"/"sol2" (scalars, or lists aligned on review_annotators)
VERDICT_COLUMNS: tuple[str, ...] = ("review_labels", "review_consensus")
# values number a solution: base 0 for `label`, base 1 for `correct`
INDEX_COLUMNS: dict[str, int] = {"label": 0, "correct": 1}
EDIT_RECORD_COLUMNS: tuple[str, ...] = ("review_edits",)
VERDICT_NAMES = ("sol1", "sol2")

# Columns whose names or meanings look positional but are not, each with why (the declaration test reads it).
NOT_POSITIONAL: dict[str, str] = {
    "review_annotators": "who reviewed, aligned with review_labels but naming people, not solutions",
    "review_agreement": "a share of annotators; the same whichever slot the verdict names",
    "review_comments": "free text of each annotator",
    "review_goal_edits": "edits of the goal, not of a solution",
    "solutions_swapped": "records the swap itself",
    "label_votes": "COPA's agreement count (\"3/3\"), not a position",
    "goal_gloss": "the goal has no position",
    "base_goal": "the goal has no position",
    "base_goal_en": "the goal has no position",
    "en_goal": "the goal has no position",
    "translated_goal": "the goal has no position",
    "corrected_goal": "the goal has no position",
    "mt_goal": "the goal has no position",
    "answer": "a generation request's correct answer text, before the item has positions",
    "wrong_word": "a generation request's wrong word, before the item has positions",
    "options": "a prompt's answer letters, not an item column",
    "sol1_en": "a prompt variable (J-PIQA lexical variants), filled from base_sol1_en",
    "sol2_en": "a prompt variable (J-PIQA lexical variants), filled from base_sol2_en",
    "sol1_edit": "a judgment's edit (one row per annotator, before the items have been swapped)",
    "sol2_edit": "a judgment's edit (one row per annotator, before the items have been swapped)",
    "as_shown_sol1": "a count in the automatic review's summary, not a column",
    "review_duplicate_of": "an item id",
    "review_duplicate_votes": "a count of annotators",
    "review_note": "why the review dropped an item",
    "review_batch": "the batch's name",
    "source_sol1": "a column of review.csv only (a translated item's source text shown to reviewers), never stored",
    "source_sol2": "a column of review.csv only (a translated item's source text shown to reviewers), never stored",
    "review_automatic": "whether LLMs reviewed",
}


def positional_columns() -> set[str]:
    """Every declared position-dependent column."""
    return ({c for pair in POSITION_PAIRS for c in pair} | set(VERDICT_COLUMNS) | set(INDEX_COLUMNS)
            | set(EDIT_RECORD_COLUMNS))


def swap_verdict(value: Any) -> Any:
    """'sol1' ⇄ 'sol2' in a verdict or a list of verdicts; anything else unchanged."""
    if isinstance(value, list):
        return [swap_verdict(v) for v in value]
    if value == "sol1":
        return "sol2"
    if value == "sol2":
        return "sol1"
    return value


def _swap_records(text: str | None) -> str | None:
    if not text:
        return text
    records = json.loads(text)
    for rec in records:
        field = rec.get("field")
        if field in VERDICT_NAMES:
            rec["field"] = swap_verdict(field)
        elif field in INDEX_COLUMNS:
            base = INDEX_COLUMNS[field]
            for key in ("before", "after"):
                if rec.get(key) is not None:
                    rec[key] = _flip(rec[key], base)
    return json.dumps(records, ensure_ascii=False)


def _flip(value: Any, base: int) -> Any:
    flipped = (2 * base + 1) - int(value)
    return str(flipped) if isinstance(value, str) else flipped


def swap_solutions(table: pa.Table, mask: pa.Array | list[bool]) -> pa.Table:
    """Exchange the two solutions of the rows where `mask` is true, and everything that refers to them."""
    mask = mask if isinstance(mask, pa.Array) else pa.array(mask, pa.bool_())
    rows = mask.to_pylist()
    names = table.column_names
    out = table
    for a, b in POSITION_PAIRS:
        if a in names and b in names:
            out = put_column(out, a, pc.if_else(mask, table.column(b), table.column(a)))
            out = put_column(out, b, pc.if_else(mask, table.column(a), table.column(b)))
        elif (a in names) != (b in names):
            raise ValueError(f"cannot swap solutions: the table has {a if a in names else b!r} "
                             f"without {b if a in names else a!r}")
    for name in VERDICT_COLUMNS:
        if name in names:
            col = table.column(name)
            values = [swap_verdict(v) if r else v for v, r in zip(col.to_pylist(), rows, strict=True)]
            out = put_column(out, name, pa.array(values, col.type))
    for name, base in INDEX_COLUMNS.items():
        if name in names:
            col = table.column(name)
            values = [_flip(v, base) if r and v is not None else v
                      for v, r in zip(col.to_pylist(), rows, strict=True)]
            if name == "correct" and "label" in names:
                # J-PIQA's `correct` may be written "2", "２" or "sol2": renumbered from the flipped label
                labels = out.column("label").to_pylist()
                values = [None if lab is None else str(lab + 1) if r else v
                          for v, lab, r in zip(col.to_pylist(), labels, rows, strict=True)]
                out = put_column(out, name, pa.array(values, pa.string()))
                continue
            out = put_column(out, name, pa.array(values, col.type))
    for name in EDIT_RECORD_COLUMNS:
        if name in names:
            col = table.column(name)
            values = [_swap_records(v) if r else v for v, r in zip(col.to_pylist(), rows, strict=True)]
            out = put_column(out, name, pa.array(values, col.type))
    return out


def verdict_consensus(verdicts: list[Any] | None) -> tuple[Any, float | None]:
    """(the verdict most annotators gave or None on a tie, its share) of one item's `review_labels`."""
    given = [v for v in verdicts or [] if v is not None]
    if not given:
        return None, None
    counts: dict[Any, int] = {}
    for v in given:
        counts[v] = counts.get(v, 0) + 1
    top = max(counts.values())
    leaders = [v for v, c in counts.items() if c == top]
    return (leaders[0] if len(leaders) == 1 else None), top / len(given)


def review_contradiction(label: Any, verdicts: list[Any] | None, consensus: Any = None,
                         agreement: Any = None) -> str | None:
    """Why a reviewed item's columns disagree with each other, or None: the verdict most annotators gave
    names the other solution than `label`; the recorded consensus does; `review_agreement` is not the
    share `review_labels` give (to 1e-6)."""
    top, share = verdict_consensus(verdicts)
    if top in VERDICT_NAMES and label is not None and VERDICT_NAMES.index(top) != int(label):
        return f"review_labels {list(verdicts or [])} say {top}, label is {int(label)}"
    if consensus in VERDICT_NAMES and label is not None and VERDICT_NAMES.index(consensus) != int(label):
        return f"review_consensus {consensus}, label is {int(label)}"
    if agreement is not None and share is not None and abs(float(agreement) - share) > 1e-6:
        return f"review_agreement {float(agreement):.4f}, review_labels give {share:.4f}"
    return None
