"""Russian PIQA's checks on generated items: minimal contrast, length, varied openings.

The contrast kind comes from the shared classifier (transforms/piqa/contrast.py: identical,
word_swap, phrase_reorder, word_added_removed, word_substitution, other); this module adds what the
Russian recipe needs on top of it:

* the minimal-difference rule: at most `max_words` word edits (Levenshtein over words) with at least
  one word left in common, or a swap of two phrases. Russian inflects, so swapping two nouns often changes their endings ("налить воду в
  кастрюлю" / "налить кастрюлю в воду" is an exact swap, but "накрыть глубокую кастрюлю плоской
  крышкой" / "накрыть плоскую крышку глубокой кастрюлей" is not): `phrase_swap` also
  accepts a swap on crude stems (lower-cased, ё → е, one case ending cut: крышку/крышкой → крышк), and
  records it as `phrase_reorder` with "(forms adapted)" in the detail;
* `length_share`: the share of items with more than 25 words, measured as the release gate does
  (goal + the shorter solution, expectations/checks.py);
* `repeated_openings`: the first words of the goals, overall or per model, and how often they repeat.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core.drop_reasons import DropReason
from transforms.piqa.contrast import IDENTICAL, PHRASE_REORDER, WORD_SWAP, ContrastClassifier, classify_tokens
from transforms.text import textcheck as tc

# Noun and adjective case endings, longest first: enough to see that крышку and крышкой are one word.
_ENDINGS = sorted(("ами", "ями", "ого", "его", "ому", "ему", "ыми", "ими", "ой", "ей", "ую", "юю", "ая", "яя",
                   "ое", "ее", "ые", "ие", "ым", "им", "ых", "их", "ам", "ям", "ах", "ях", "ом", "ем", "ов", "ев",
                   "у", "ю", "а", "я", "о", "е", "ы", "и", "й", "ь"), key=len, reverse=True)


def stem(word: str) -> str:
    """A crude Russian stem (one case ending cut, at least three letters kept); not a morphology:
    fleeting vowels (лёд / льдом) and verb forms are not handled."""
    w = word.lower().replace("ё", "е")
    for ending in _ENDINGS:
        if w.endswith(ending) and len(w) - len(ending) >= 3:
            return w[:-len(ending)]
    return w


def phrase_swap(a: Sequence[str], b: Sequence[str], *, stems: bool = False) -> tuple[str, str] | None:
    """(P, Q) when b is a with two non-empty phrases exchanged: X P Y Q Z ↔ X Q Y P Z.

    With `stems`, tokens are compared by `stem` (inflected forms of the swapped words)."""
    key = stem if stems else (lambda t: t)
    ka, kb = [key(t) for t in a], [key(t) for t in b]
    if len(ka) != len(kb) or ka == kb:
        return None
    lo = 0
    while ka[lo] == kb[lo]:
        lo += 1
    hi = len(ka)
    while ka[hi - 1] == kb[hi - 1]:
        hi -= 1
    mid_a, mid_b = ka[lo:hi], kb[lo:hi]
    n = len(mid_a)
    for lp in range(1, n):
        for lq in range(1, n - lp + 1):
            p, q, y = mid_a[:lp], mid_a[n - lq:], mid_a[lp:n - lq]
            if mid_b == q + y + p:
                return " ".join(a[lo:lo + lp]), " ".join(a[lo + n - lq:hi])
    return None


def minimal_contrast(sol1: str | None, sol2: str | None, *, max_words: int = 2) -> tuple[str, int, str, bool]:
    """(contrast kind, word distance, detail, minimal?) for one pair of Russian solutions."""
    a, b = tc.words(sol1), tc.words(sol2)
    found = classify_tokens(a, b, max_substitutions=max_words)
    if found.kind == IDENTICAL:
        return found.kind, 0, "", False
    if found.kind == WORD_SWAP:
        return found.kind, found.distance, found.detail, True
    if found.distance <= max_words:
        # something must stay: "Кончился бензин." / "Водитель заснул." is two edits and no pair at all
        return found.kind, found.distance, found.detail, found.distance < max(len(a), len(b))
    swap = phrase_swap(a, b)
    if swap is not None:
        return PHRASE_REORDER, found.distance, f"{swap[0]} ⇄ {swap[1]}", True
    swap = phrase_swap(a, b, stems=True)
    if swap is not None:
        return PHRASE_REORDER, found.distance, f"{swap[0]} ⇄ {swap[1]} (forms adapted)", True
    return found.kind, found.distance, found.detail, False


class RussianContrastDrops(DropReason):
    IDENTICAL_SOLUTIONS = "identical_solutions", "the solutions are the same"
    INVALID_LABEL = "invalid_label", "the label is not 0 or 1"
    NOT_MINIMAL_CONTRAST = "not_minimal_contrast", "the solutions do not differ in a minimal contrast"


NOT_MINIMAL, IDENTICAL_SOLUTIONS, INVALID_LABEL = (RussianContrastDrops.NOT_MINIMAL_CONTRAST,
                                                  RussianContrastDrops.IDENTICAL_SOLUTIONS,
                                                  RussianContrastDrops.INVALID_LABEL)


class RussianContrastFilter(ContrastClassifier[RussianContrastDrops]):
    """Writes the contrast columns (contrast.py) and drops items that are not minimal pairs:
    `identical_solutions`, `not_minimal_contrast` (more than `max_words` word edits and no swap of
    two phrases) and `invalid_label` (a label other than 0/1: exactly one solution must be right)."""

    name: ClassVar[str] = "ru_contrast"
    reads: ClassVar[tuple[str, ...]] = ("sol1", "sol2", "label")
    writes: ClassVar[tuple[str, ...]] = ("contrast_type", "contrast_distance", "contrast_detail")

    max_words: int = Field(2, ge=1, description="Word edits a minimal pair may have (a phrase swap may have more).")

    def process(self, batch: pa.Table) -> pa.Table:
        found = [minimal_contrast(a, b, max_words=self.max_words)
                 for a, b in zip(batch.column("sol1").to_pylist(), batch.column("sol2").to_pylist(), strict=True)]
        why = RussianContrastDrops
        reasons: list[RussianContrastDrops | None] = []
        for (kind, _, _, minimal), label in zip(found, batch.column("label").to_pylist(), strict=True):
            if label not in (0, 1):
                reasons.append(why.INVALID_LABEL)
            elif kind == IDENTICAL:
                reasons.append(why.IDENTICAL_SOLUTIONS)
            else:
                reasons.append(None if minimal else why.NOT_MINIMAL_CONTRAST)
        out = batch
        for name, values, typ in (("contrast_type", [f[0] for f in found], pa.string()),
                                  ("contrast_distance", [f[1] for f in found], pa.int32()),
                                  ("contrast_detail", [f[2] for f in found], pa.string())):
            if name in out.column_names:
                out = out.drop_columns([name])
            out = out.append_column(name, pa.array(values, typ))
        return self.drop(out, reasons)


def item_words(goal: str | None, sol1: str | None, sol2: str | None) -> int:
    """Words of an item as the release gate counts them: the goal plus the shorter solution."""
    return len(tc.words(goal)) + min(len(tc.words(sol1)), len(tc.words(sol2)))


def length_share(table: pa.Table, min_words: int = 25) -> dict[str, Any]:
    """How many items have more than `min_words` words (goal + shorter solution), and the share."""
    counts = [item_words(g, a, b) for g, a, b in zip(*(table.column(c).to_pylist() for c in ("goal", "sol1", "sol2")),
                                                      strict=True)]
    over = sum(c > min_words for c in counts)
    counts_sorted = sorted(counts)
    return {"items": len(counts), "min_words": min_words, "over": over,
            "share_over": round(over / len(counts), 4) if counts else None,
            "median_words": counts_sorted[len(counts) // 2] if counts else None}


def first_words(text: str | None, n: int = 1) -> str:
    return " ".join(tc.words(text)[:n])


def repeated_openings(table: pa.Table, *, n_words: int = 1, by: str | None = None, top: int = 5,
                      column: str = "goal") -> dict[str, dict[str, Any]]:
    """Per group (`by`, e.g. "model"; one group "all" when None): items, distinct openings, the share of
    items whose opening is used by another item too, and the `top` openings with their counts."""
    texts = table.column(column).to_pylist()
    groups = [str(g) for g in table.column(by).to_pylist()] if by else ["all"] * len(texts)
    report: dict[str, dict[str, Any]] = {}
    for group in sorted(set(groups)):
        openings = [first_words(t, n_words) for t, g in zip(texts, groups, strict=True) if g == group]
        counts = Counter(openings)
        repeated = sum(c for c in counts.values() if c > 1)
        report[group] = {"items": len(openings), "distinct_openings": len(counts),
                         "share_repeated": round(repeated / len(openings), 4) if openings else None,
                         "top": [{"opening": o, "items": c} for o, c in counts.most_common(top) if c > 1]}
    return report
