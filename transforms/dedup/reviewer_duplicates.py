"""What the reviewers said about duplicates: `reviewer_duplicates` reads the annotators' comments ("duplicate of
ta-0012", "நகல்") into `review_duplicate_of`, `confirmed_duplicates` drops what they confirmed (reason `duplicate`,
with `duplicate_of`). The neighbours the reviewers were shown are transforms/dedup/review_neighbours.py's."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage, StageError, put_column, set_duplicate_of

_DUP_NOTE = re.compile(r"(?<![\w\u0B80-\u0BFF])(?:duplicate|dup|நகல்)(?![\w\u0B80-\u0BFF])"
                       r"(?:\s+of)?\s*[:=]?\s*(\w[\w.\-]*\w)?", re.IGNORECASE)


def duplicate_vote(comment: str | None, suggested: str | None) -> str | None:
    """The item an annotator's comment names as duplicated: `duplicate of <id>` (or `dup: <id>`, `நகல்
    <id>`), or a bare `duplicate` meaning the suggested neighbour; None when the comment says neither."""
    m = _DUP_NOTE.search(comment or "")
    if m is None:
        return None
    target = m.group(1)
    return target if target and target.lower() != "of" else suggested


class ReviewerDuplicates(Stage):
    """`review_duplicate_of` from the annotators' comments (see `duplicate_vote`): confirmed when at least
    `min_votes` annotators (unset: every annotator of the item, the unanimous rule) name the same item."""

    name: ClassVar[str] = "reviewer_duplicates"
    reads: ClassVar[tuple[str, ...]] = (C.ID, "review_annotators", "review_comments")
    writes: ClassVar[tuple[str, ...]] = ("review_duplicate_of", "review_duplicate_votes")

    min_votes: int | None = Field(None, ge=1, description="Votes that confirm a duplicate; unset: all annotators.")

    def process(self, batch: pa.Table) -> pa.Table:
        annotators = batch.column("review_annotators").to_pylist()
        comments = batch.column("review_comments").to_pylist()
        suggested = (batch.column("dup_suggested_of").to_pylist() if "dup_suggested_of" in batch.column_names
                     else [None] * batch.num_rows)
        confirmed: list[str | None] = []
        votes: list[int] = []
        for anns, notes, sug in zip(annotators, comments, suggested, strict=True):
            named = [t for t in (duplicate_vote(c, sug) for c in notes or []) if t]
            top = max(set(named), key=lambda t: (named.count(t), t)) if named else None
            count = named.count(top) if top else 0
            needed = self.min_votes or max(len(anns or []), 1)
            confirmed.append(top if top and count >= needed else None)
            votes.append(count)
        out = put_column(batch, "review_duplicate_of", pa.array(confirmed, pa.string()))
        return put_column(out, "review_duplicate_votes", pa.array(votes, pa.int32()))


class ConfirmedDrops(DropReason):
    DUPLICATE = "duplicate", "reviewers confirmed it duplicates another item (duplicate_of names it)"


DUPLICATE = ConfirmedDrops.DUPLICATE


class ConfirmedDuplicates(Stage[ConfirmedDrops]):
    """Drop confirmed duplicates with reason `duplicate` and `duplicate_of`.

    Confirmed means: the review's decision column (`decision_column`, the id the item duplicates,
    written by the review import), the `decisions` given here, or, for the levels in
    `auto_confirm`, the suggestion itself.
    """

    name: ClassVar[str] = "confirmed_duplicates"
    reads: ClassVar[tuple[str, ...]] = (C.ID,)
    writes: ClassVar[tuple[str, ...]] = (C.DUPLICATE_OF,)

    decision_column: str = Field("review_duplicate_of", description="Column with the reviewers' answer: the id "
                                 "this item duplicates, or empty.")
    decisions: dict[str, str] = Field(default_factory=dict, description="Or the answers here: id → duplicate_of.")
    auto_confirm: list[Literal["exact", "near", "semantic", "gate"]] = Field(
        default_factory=list, description="Levels whose suggestions count as confirmed without review.")

    def process(self, batch: pa.Table) -> pa.Table:
        ids = [str(x) for x in batch.column(C.ID).to_pylist()]
        cols = batch.column_names

        def column(name: str) -> list[str | None]:
            return batch.column(name).to_pylist() if name in cols else [None] * len(ids)

        reviewed, levels, suggested = column(self.decision_column), column("dup_level"), column("dup_suggested_of")
        dup_of: list[str | None] = []
        for i, rid in enumerate(ids):
            target = self.decisions.get(rid) or reviewed[i] or None
            if target is None and levels[i] in self.auto_confirm:
                target = suggested[i]
            if target == rid:
                raise StageError(f"item {rid!r} is recorded as a duplicate of itself")
            dup_of.append(target)
        out = set_duplicate_of(batch, pa.array(dup_of, pa.string()))
        return self.drop(out, [ConfirmedDrops.DUPLICATE if d else None for d in dup_of])
