"""Degenerate text: a goal or solution that is one word repeated, or mostly one repeated n-gram.

Small models fail this way (docs/pindic.md: Qwen's Kannada "translation" was one word repeated ten
times, 100% in the right script, so the script-based language check passed it). Every suite runs this
check (`degenerate` in expectations/suites/generic.yaml); expectations/checks.py turns it into the
boolean column `_degenerate_ok`, so the gate names the failing rows by id.

Tokens: words split on whitespace (punctuation stripped, lower-cased, as the gate counts words) for
languages written with spaces; characters for languages without (ja, zh, th, ...), or for any text
with no space at all, where n-grams of characters stand in for words. A text is degenerate when it
has at least `min_tokens` tokens and some n-gram (n = 1 … `max_n` words, or `min_char_n` … `max_char_n`
characters) occurs at least `min_repeats` times and its occurrences cover at least `max_share` of
the tokens. A single word repeated is the n = 1 case.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from transforms.piqa import textcheck as tc


class DegenerateText(BaseModel):
    model_config = ConfigDict(extra="forbid")

    columns: list[str] = Field(default_factory=lambda: ["goal", "sol1", "sol2"], description="Texts checked.")
    min_repeats: int = Field(3, ge=2, description="An n-gram must occur this often to count as repeated.")
    max_share: float = Field(0.5, gt=0, le=1, description="Share of the tokens covered by one repeated n-gram "
                             "at or above which the text is degenerate.")
    max_n: int = Field(4, ge=1, description="Longest word n-gram looked at.")
    min_char_n: int = Field(2, ge=1, description="Shortest character n-gram for text without spaces (single "
                            "kana repeat naturally: の, を).")
    max_char_n: int = Field(8, ge=1, description="Longest character n-gram for text without spaces.")
    min_tokens: int = Field(3, ge=2, description="Shorter texts are never called degenerate.")


@dataclass(frozen=True)
class Repetition:
    ngram: str
    count: int
    share: float

    def describe(self) -> str:
        return f"{self.ngram!r} ×{self.count} covers {self.share:.0%}"


def tokens(text: str | None, lang: str | None) -> tuple[list[str], str]:
    """(tokens, "word" | "char"): words where the language or the text uses spaces, else characters."""
    if not text or not text.strip():
        return [], "word"
    spaced = lang not in tc.NO_SPACE_LANGS and (lang is not None or " " in text.strip())
    if spaced:
        return tc.words(text), "word"
    return [ch for ch in text if not ch.isspace() and ch not in tc._PUNCT], "char"


def worst_repetition(text: str | None, lang: str | None, rule: DegenerateText | None = None) -> Repetition | None:
    """The repeated n-gram covering the largest share of `text`'s tokens (≥ min_repeats occurrences)."""
    rule = rule or DegenerateText()
    toks, unit = tokens(text, lang)
    if len(toks) < rule.min_tokens:
        return None
    sizes = range(1, rule.max_n + 1) if unit == "word" else range(rule.min_char_n, rule.max_char_n + 1)
    joiner = " " if unit == "word" else ""
    best: Repetition | None = None
    for n in sizes:
        if n > len(toks) // rule.min_repeats:
            break
        grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
        for gram, count in Counter(grams).most_common(3):
            if count < rule.min_repeats:
                break
            covered = _covered(grams, gram, n)
            share = covered / len(toks)
            if best is None or share > best.share:
                best = Repetition(joiner.join(gram), count, share)
    return best


def _covered(grams: Sequence[tuple[str, ...]], gram: tuple[str, ...], n: int) -> int:
    """Tokens inside at least one occurrence of `gram` (occurrences may overlap)."""
    covered, end = 0, 0
    for i, g in enumerate(grams):
        if g == gram:
            covered += n - max(0, end - i)
            end = i + n
    return covered


def degenerate_reason(text: str | None, lang: str | None, rule: DegenerateText | None = None) -> str | None:
    """Why `text` is degenerate (e.g. "'ಪ್ರಾಣಿಯಾಂದು' ×8 covers 73%"), or None."""
    rule = rule or DegenerateText()
    rep = worst_repetition(text, lang, rule)
    return rep.describe() if rep is not None and rep.share >= rule.max_share else None


def degenerate_rows(columns: dict[str, list[str]], langs: Sequence[str | None],
                    rule: DegenerateText | None = None) -> list[str | None]:
    """Per row, the first degenerate column and why ("sol1: 'x' ×5 covers 100%"), or None."""
    rule = rule or DegenerateText()
    out: list[str | None] = []
    for i, lang in enumerate(langs):
        reason = None
        for col in rule.columns:
            if col in columns and (why := degenerate_reason(columns[col][i], lang, rule)):
                reason = f"{col}: {why}"
                break
        out.append(reason)
    return out
