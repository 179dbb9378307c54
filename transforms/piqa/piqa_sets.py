"""Selecting and deduplicating PIQA-shaped items, shared by recipes that start from PIQA (J-PIQA part 1,
zh-piqa, a team's translated benchmark): `translation_set` draws the minimal pairs, `duplicate_triplet`
drops repeats of a (question, option1, option2) triplet."""

from __future__ import annotations

import unicodedata
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, set_duplicate_of


def norm_text(text: Any) -> str:
    return "".join(unicodedata.normalize("NFKC", str(text or "")).split())


class TripletDrops(DropReason):
    DUPLICATE_TRIPLET = "duplicate_triplet", "the same (goal, sol1, sol2) as an earlier item"


class DuplicateTripletFilter(GlobalStage[TripletDrops]):
    """Drops every repeat of a (question, option1, option2) triplet after its first row.

    Texts are compared after NFKC and with all whitespace removed; with `ignore_option_order`, the
    same options in the other order are the same item. `duplicate_of` names the row kept.
    """

    name: ClassVar[str] = "duplicate_triplet"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, "goal", "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = (C.DUPLICATE_OF,)

    ignore_option_order: bool = Field(True, description="(q, a, b) and (q, b, a) are the same item.")

    def process_table(self, table: pa.Table) -> pa.Table:
        first: dict[tuple[str, ...], str] = {}
        dup: list[str | None] = []
        for rid, q, a, b in zip(*(table.column(c).to_pylist() for c in self.reads), strict=True):
            opts = sorted((norm_text(a), norm_text(b))) if self.ignore_option_order else [norm_text(a), norm_text(b)]
            key = (norm_text(q), *opts)
            dup.append(first.get(key))
            first.setdefault(key, str(rid))
        reasons = [None if d is None else TripletDrops.DUPLICATE_TRIPLET for d in dup]
        return set_duplicate_of(self.drop(table, reasons), pa.array(dup, pa.string()))


class TranslationSetDrops(DropReason):
    NOT_MINIMAL_PAIR = "not_minimal_pair", "the solutions differ in more words than the set allows"
    NOT_SAMPLED = "not_sampled", "not drawn into the set"
    TOO_LONG = "too_long", "longer than the set allows"


class TranslationSetSelector(GlobalStage[TranslationSetDrops]):
    """J-PIQA part 1: English PIQA items whose solutions differ by at most `max_word_edits` words
    (word-level Levenshtein, transforms/text/textcheck.py), then a seeded draw of `n` of them.

    Drop reasons: `not_minimal_pair`, `too_long` (with `max_words`) and `not_sampled`. The draw keys each
    row on (seed, id), so it does not depend on row order. Writes `sol_edit_distance` (exact up to the limit + 1; limit + 2 means more).
    """

    name: ClassVar[str] = "translation_set"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("sol_edit_distance",)

    n: int | None = Field(200, ge=1, description="Items to draw (the paper: 200); null keeps every candidate.")
    seed: int = Field(0, description="Draw seed.")
    max_word_edits: int = Field(2, ge=0, description="Most words the two solutions may differ by.")
    max_words: int | None = Field(None, ge=1, description="Longest goal or solution, in words (`too_long`); "
                                  "unset: any. Short items survive a small model's translation as a pair "
                                  "more often (the local profile sets 12: 586 of PIQA valid's 1,134 pairs).")

    def process_table(self, table: pa.Table) -> pa.Table:
        from transforms.llm.distil_fit import sample_keys
        from transforms.text.textcheck import pair_distance
        from transforms.text.textcheck import words as en_words

        cap = self.max_word_edits + 1
        dist = [pair_distance(a, b, "en", unit="word", cap=cap)[0]
                for a, b in zip(table.column("sol1").to_pylist(), table.column("sol2").to_pylist(), strict=True)]
        longest = [max(len(en_words(t)) for t in texts) for texts in
                   zip(*(table.column(c).to_pylist() for c in ("goal", "sol1", "sol2")), strict=True)] \
            if self.max_words is not None and "goal" in table.column_names else [0] * table.num_rows
        too_long = [self.max_words is not None and n > self.max_words for n in longest]
        candidates = [i for i, d in enumerate(dist) if d <= self.max_word_edits and not too_long[i]]
        chosen = set(candidates)
        if self.n is not None and len(candidates) > self.n:
            ids = [str(table.column(C.ID)[i].as_py()) for i in candidates]
            keys = sample_keys(ids, self.seed)
            chosen = {candidates[k] for k in keys.argsort(kind="stable")[:self.n].tolist()}
        why = TranslationSetDrops
        reasons = [None if i in chosen else why.NOT_MINIMAL_PAIR if d > self.max_word_edits else
                   why.TOO_LONG if too_long[i] else why.NOT_SAMPLED for i, d in enumerate(dist)]
        out = table.append_column("sol_edit_distance", pa.array(dist, pa.int32()))
        return self.drop(out, reasons)


