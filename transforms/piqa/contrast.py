"""What separates a PIQA item's two solutions: the kind of contrast and its word-level edit distance.

PIQA-style guidelines ask writers for minimal pairs: the wrong solution should differ from the
right one by a small, telling change. This module names the change, for any language, given a
tokenizer (a function text → tokens; the default is `textcheck.words`, whitespace words with
punctuation stripped, which is right for Tamil and Russian; J-PIQA can plug a morphological
tokenizer in). Kinds, checked in this order:

* `identical`        the same tokens (distance 0): not a usable pair
* `word_swap`        the same tokens, two of them exchanged ("salt then sugar" / "sugar then salt")
* `phrase_reorder`   the same tokens in another order that is not one swap (a phrase moved)
* `word_added_removed` one side is the other with exactly one token more
* `word_substitution` the same number of tokens, 1..`max_substitutions` positions differ
* `other`            anything else (a rewritten sentence, several insertions ...)

The edit distance is Levenshtein over tokens (insert/delete/substitute, cost 1), so a swap costs 2.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import ClassVar, Generic

import pyarrow as pa
from pydantic import BaseModel, Field

from transforms.core.stage import R, Stage
from transforms.text import textcheck as tc

Tokenizer = Callable[[str], list[str]]

IDENTICAL, WORD_SWAP, PHRASE_REORDER = "identical", "word_swap", "phrase_reorder"
WORD_ADDED_REMOVED, WORD_SUBSTITUTION, OTHER = "word_added_removed", "word_substitution", "other"
CONTRAST_TYPES = (IDENTICAL, WORD_SWAP, PHRASE_REORDER, WORD_ADDED_REMOVED, WORD_SUBSTITUTION, OTHER)


def whitespace_words(text: str) -> list[str]:
    """Lower-cased whitespace words, punctuation stripped from both ends (Tamil, Russian, English)."""
    return tc.words(text)


def tokenizer_for(lang: str | None) -> Tokenizer:
    """The default tokenizer of a language: whitespace words, or characters for no-space scripts."""
    if lang in tc.NO_SPACE_LANGS:
        return lambda text: [ch for ch in (text or "") if not ch.isspace() and ch not in tc._PUNCT]
    return whitespace_words


class Contrast(BaseModel):
    kind: str = Field(..., description=f"One of {CONTRAST_TYPES}.")
    distance: int = Field(..., ge=0, description="Token-level Levenshtein distance between the solutions.")
    detail: str = Field("", description="The tokens that differ, e.g. 'ஊற்றினாள் → கொட்டினாள்'.")


def classify_tokens(a: Sequence[str], b: Sequence[str], *, max_substitutions: int = 1) -> Contrast:
    """Classify the contrast between two token sequences (see the module docstring)."""
    distance = tc.levenshtein(list(a), list(b))
    if list(a) == list(b):
        return Contrast(kind=IDENTICAL, distance=0)
    if Counter(a) == Counter(b):
        differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(differ) == 2 and a[differ[0]] == b[differ[1]] and a[differ[1]] == b[differ[0]]:
            return Contrast(kind=WORD_SWAP, distance=distance, detail=f"{a[differ[0]]} ↔ {a[differ[1]]}")
        return Contrast(kind=PHRASE_REORDER, distance=distance, detail=_moved_span(a, b))
    if abs(len(a) - len(b)) == 1:
        longer, shorter = (a, b) if len(a) > len(b) else (b, a)
        extra = _single_insertion(longer, shorter)
        if extra is not None:
            sign = "-" if longer is a else "+"  # the token sol2 lacks (-) or adds (+)
            return Contrast(kind=WORD_ADDED_REMOVED, distance=distance, detail=f"{sign}{longer[extra]}")
    if len(a) == len(b):
        differ = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if 1 <= len(differ) <= max_substitutions:
            return Contrast(kind=WORD_SUBSTITUTION, distance=distance,
                            detail="; ".join(f"{a[i]} → {b[i]}" for i in differ))
    return Contrast(kind=OTHER, distance=distance)


def classify_contrast(sol1: str | None, sol2: str | None, *, tokenize: Tokenizer = whitespace_words,
                      max_substitutions: int = 1) -> Contrast:
    """Classify the contrast between two solution texts with `tokenize` (default: whitespace words)."""
    return classify_tokens(tokenize(sol1 or ""), tokenize(sol2 or ""), max_substitutions=max_substitutions)


def _single_insertion(longer: Sequence[str], shorter: Sequence[str]) -> int | None:
    """Index of the one token of `longer` whose removal gives `shorter`, or None."""
    i = 0
    while i < len(shorter) and longer[i] == shorter[i]:
        i += 1
    return i if list(longer[i + 1:]) == list(shorter[i:]) else None


def _moved_span(a: Sequence[str], b: Sequence[str]) -> str:
    """The reordered region: tokens between the common prefix and the common suffix."""
    lo = 0
    while a[lo] == b[lo]:
        lo += 1
    hi = 0
    while a[len(a) - 1 - hi] == b[len(b) - 1 - hi]:
        hi += 1
    return f"{' '.join(a[lo:len(a) - hi])} ⇄ {' '.join(b[lo:len(b) - hi])}"


def contrast_distribution(kinds: Sequence[str | None]) -> dict[str, int]:
    """Count per contrast kind, every kind listed (zeros included), in CONTRAST_TYPES order."""
    counts = Counter(k for k in kinds if k is not None)
    return {kind: counts.get(kind, 0) for kind in CONTRAST_TYPES}


class ContrastClassifier(Stage[R], Generic[R]):
    """Writes `contrast_type`, `contrast_distance` and `contrast_detail` for every item; drops nothing.

    The tokenizer follows the row's `lang` (whitespace words, characters for no-space scripts);
    a recipe with its own word segmenter subclasses and overrides `tokenize`.
    """

    name: ClassVar[str] = "contrast"
    reads: ClassVar[tuple[str, ...]] = ("sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("contrast_type", "contrast_distance", "contrast_detail")

    max_substitutions: int = Field(1, ge=1, description="Most differing positions (same length) that still "
                                   "count as a word substitution rather than `other`.")
    default_lang: str | None = Field(None, description="Language when the table has no `lang` column.")

    def tokenize(self, text: str, lang: str | None) -> list[str]:
        return tokenizer_for(lang)(text)

    def process(self, batch: pa.Table) -> pa.Table:
        sol1, sol2 = batch.column("sol1").to_pylist(), batch.column("sol2").to_pylist()
        langs = batch.column("lang").to_pylist() if "lang" in batch.column_names else [self.default_lang] * len(sol1)
        found = [classify_tokens(self.tokenize(a or "", lang), self.tokenize(b or "", lang),
                                 max_substitutions=self.max_substitutions)
                 for a, b, lang in zip(sol1, sol2, langs, strict=True)]
        out = batch
        for name, values, typ in (("contrast_type", [c.kind for c in found], pa.string()),
                                  ("contrast_distance", [c.distance for c in found], pa.int32()),
                                  ("contrast_detail", [c.detail for c in found], pa.string())):
            if name in out.column_names:
                out = out.drop_columns([name])
            out = out.append_column(name, pa.array(values, typ))
        return out
