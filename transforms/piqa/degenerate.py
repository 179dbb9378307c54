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

import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage
from transforms.text import textcheck as tc


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


# -- the stage every creating recipe runs after its model writes items ---------------------------------------
_TERMINAL = ".!?。！？…」』)）\"'”’»"


def _plain(text: str | None) -> str:
    """Letters and digits only, case-folded: spacing and punctuation do not make two texts differ."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text or "").casefold() if ch.isalnum())


def truncated(text: str | None, min_chars: int) -> bool:
    """A long text that stops without a sentence end: what a reply cut at the token limit looks like
    (`...벽면을깨`). Short texts (a phrase, a PIQA solution fragment) are never called truncated."""
    body = (text or "").rstrip()
    return len(body) >= min_chars and body[-1] not in _TERMINAL


def copies_goal(goal: str | None, solution: str | None, share: float = 0.8) -> bool:
    """The solution is the goal again, or the goal makes up most of it."""
    g, s = _plain(goal), _plain(solution)
    if not g or not s:
        return False
    return g == s or (len(g) >= 10 and g in s and len(g) >= share * len(s))


class DegenerateDrops(DropReason):
    REPETITION_LOOP = "repetition_loop", "a text repeats itself (a generation loop)"
    TRUNCATED_TEXT = "truncated_text", "a text is cut off"
    INSTRUCTION_IN_ITEM = "instruction_in_item", "a text talks to its reader (an instruction obeyed from the input)"
    IDENTICAL_SOLUTIONS = "identical_solutions", "the solutions differ only in spacing or punctuation"
    SOLUTION_COPIES_GOAL = "solution_copies_goal", "a solution repeats the goal"


class DegenerateFilter(Stage[DegenerateDrops]):
    """Drop items a model wrote badly, with one reason each: a repetition loop in any column
    (`repetition_loop`), a text cut off at the token limit (`truncated_text`), text that talks to its reader
    (`instruction_in_item`: what a crawled instruction made the model write), two solutions that differ only in
    spacing, case or punctuation (`identical_solutions`), a solution that copies the goal (`solution_copies_goal`). One rule for every recipe; the gate's `degenerate` check is the same
    repetition rule, so what passes here passes there."""

    name: ClassVar[str] = "degenerate"
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("degenerate_detail",)
    lang: str | None = Field(None, description="Language of the items (per row: a `lang` column wins); decides "
                             "words or characters as the repetition unit.")
    repetition: DegenerateText = Field(default_factory=lambda: DegenerateText(max_share=0.4, max_n=6),
                                       description="The repetition rule: the gate's, a little stricter (a clause of "
                                       "up to 6 words repeated 3 times over 40% of a text), so what a model loops on "
                                       "stops here with its reason rather than at the gate.")
    truncation_min_chars: int | None = Field(40, ge=1, description="A text at least this long that does not end "
                                             "with a sentence end is `truncated_text`; null turns the check off "
                                             "(items written without full stops).")
    copy_share: float = Field(0.8, gt=0, le=1, description="A solution of which the goal makes up this share "
                              "copies it.")
    instructions: bool = Field(True, description="An item whose text talks to its reader (an instruction, a role "
                               "marker or fence obeyed from the input: transforms/text/guard.py) is "
                               "`instruction_in_item`.")

    def reason(self, goal: str | None, sol1: str | None, sol2: str | None, lang: str | None) -> tuple[DegenerateDrops, str] | None:
        for col, text in (("goal", goal), ("sol1", sol1), ("sol2", sol2)):
            if why := degenerate_reason(text, lang, self.repetition):
                return DegenerateDrops.REPETITION_LOOP, f"{col}: {why}"
        if self.truncation_min_chars is not None:
            for col, text in (("goal", goal), ("sol1", sol1), ("sol2", sol2)):
                if truncated(text, self.truncation_min_chars):
                    return DegenerateDrops.TRUNCATED_TEXT, f"{col} ends {(text or '').rstrip()[-12:]!r}"
        if self.instructions:
            from transforms.text.guard import injection_flags

            for col, text in (("goal", goal), ("sol1", sol1), ("sol2", sol2)):
                if flags := injection_flags(text):
                    return DegenerateDrops.INSTRUCTION_IN_ITEM, f"{col}: {', '.join(flags)}"
        if _plain(sol1) == _plain(sol2):
            return DegenerateDrops.IDENTICAL_SOLUTIONS, "sol1 and sol2 differ only in spacing or punctuation"
        for col, text in (("sol1", sol1), ("sol2", sol2)):
            if copies_goal(goal, text, self.copy_share):
                return DegenerateDrops.SOLUTION_COPIES_GOAL, f"{col} copies the goal"
        return None

    def process(self, batch: pa.Table) -> pa.Table:
        from transforms.core.stage import put_column

        cols = {c: batch.column(c).to_pylist() for c in ("goal", "sol1", "sol2")}
        langs = batch.column("lang").to_pylist() if "lang" in batch.schema.names else [None] * batch.num_rows
        reasons: list[DegenerateDrops | None] = []
        details: list[str | None] = []
        for i in range(batch.num_rows):
            found = self.reason(cols["goal"][i], cols["sol1"][i], cols["sol2"][i], langs[i] or self.lang)
            reasons.append(found[0] if found else None)
            details.append(found[1] if found else None)
        out = put_column(batch, "degenerate_detail", pa.array(details, pa.string()))
        return self.drop(out, reasons)
