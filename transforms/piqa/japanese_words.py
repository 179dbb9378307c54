"""Japanese words from a morphological analyser, and the J-PIQA rules on one pair of options.

Japanese has no spaces, so "the two options differ by one or two words" needs a segmenter. We use
fugashi (MeCab) with unidic-lite (the `lang` extra): a 50 MB pip wheel with no download step, UniDic
short units whose part-of-speech tags name particles (助詞) and punctuation (補助記号) directly
(docs/j_piqa.md says why not SudachiPy).

UniDic's short units are smaller than what a reader calls a word (冷蔵|庫, 洗わ|ない), so
`unit="word"` (the default) merges them back: prefix + stem, stem + suffix, compound nouns, a verb
noun + する, and a predicate + its inflecting auxiliaries (洗わない is one word, as "don't wash" is
one change). Particles and punctuation always stay words of their own. `unit="morpheme"` counts
UniDic units as they are. The stages (transforms/piqa/japanese.py) and the j-piqa release suite's
minimal-pair rule (expectations/checks.py) both count words here.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from transforms.core.deps import require
from transforms.core.drop_reasons import DropReason
from transforms.text.textcheck import levenshtein

PARTICLE, PUNCT, SUFFIX, PREFIX = "助詞", "補助記号", "接尾辞", "接頭辞"
PREDICATE = frozenset({"動詞", "形容詞", "助動詞"})
SENTENCE_END = "。"

class PairReason(DropReason):
    """Why a pair of options fails the J-PIQA rules, in the order the filter checks them (`check_pair` and
    `correct_reason` return these; a stage that runs the checks is a `Stage[PairReason]`)."""

    INVALID_CORRECT = "invalid_correct", "the correct-answer cell is not 1 or 2"
    EMPTY_OPTION = "empty_option", "a solution is empty"
    OPTIONS_IDENTICAL = "options_identical", "the two options are the same (fewer word changes than min_words)"
    OPTIONS_DIFFER_TOO_MUCH = "options_differ_too_much", "the options differ in more words than max_words"
    NO_FINAL_PERIOD = "no_final_period", "a solution does not end in 。 (both must be full sentences)"
    NOT_FULL_SENTENCE = "not_full_sentence", "a solution does not end in a predicate (verb, adjective, auxiliary)"
    PARTICLES_CHANGED = "particles_changed", "the options use different particles (only content words may change)"
    PUNCTUATION_CHANGED = "punctuation_changed", "the options differ in punctuation"
    WORD_ORDER_CHANGED = "word_order_changed", "the same words in another order"


REASONS = PairReason  # the name the j-piqa tests iterate


@dataclass(frozen=True)
class Morpheme:
    surface: str
    pos: str  # UniDic pos1 (名詞, 動詞, 助詞, 補助記号, ...)
    pos2: str


@dataclass(frozen=True)
class Word:
    surface: str
    pos: str  # part of speech of the word's head (its first content morpheme)


@functools.cache
def _tagger() -> Any:
    fugashi = require("fugashi", "lang", "Japanese word segmentation")
    require("unidic_lite", "lang", "the UniDic dictionary fugashi reads")
    return fugashi.Tagger()


def morphemes(text: str | None) -> list[Morpheme]:
    """UniDic short units of `text` (NFKC-normalised first, so full-width digits and Latin agree)."""
    return list(_morphemes(text)) if text else []


@functools.lru_cache(maxsize=65536)
def _morphemes(text: str) -> tuple[Morpheme, ...]:
    # each option is segmented several times per check (distance, sentence end, particles): once here
    norm = unicodedata.normalize("NFKC", text).strip()
    return tuple(Morpheme(m.surface, m.feature.pos1, m.feature.pos2) for m in _tagger()(norm) if m.surface.strip())


def _joins_previous(m: Morpheme, prev: Morpheme, head: str) -> bool:
    if prev.pos == PREFIX or m.pos == SUFFIX:
        return True
    if m.pos == "名詞" and head == "名詞" and prev.pos == "名詞":
        return True  # compound noun: 電子 レンジ, 洗濯 機
    if m.pos == "動詞" and m.pos2 == "非自立可能" and m.surface in ("する", "し", "さ", "せ") and prev.pos == "名詞":
        return True  # verb noun + する: 保存 する
    # a predicate and its inflecting auxiliaries: 洗わ ない, 冷やし ます, きれい だ (not 水 だ)
    return m.pos == "助動詞" and prev.pos in ("動詞", "形容詞", "形状詞", "助動詞")


def words(text: str | None, unit: Literal["word", "morpheme"] = "word") -> list[Word]:
    """The words of `text` (see the module docstring for what `unit="word"` merges)."""
    out: list[Word] = []
    prev: Morpheme | None = None
    for m in morphemes(text):
        if unit == "word" and out and prev is not None and _joins_previous(m, prev, out[-1].pos):
            last = out[-1]
            # a prefix takes its stem's part of speech; a verb noun + する is a verb
            head = m.pos if last.pos == PREFIX or (m.pos == "動詞" and last.pos == "名詞") else last.pos
            out[-1] = Word(last.surface + m.surface, head)
        else:
            out.append(Word(m.surface, m.pos))
        prev = m
    return out


def word_distance(a: str | None, b: str | None, unit: Literal["word", "morpheme"] = "word",
                  cap: int | None = None) -> int:
    """Word-level edit distance (insert/delete/substitute one word)."""
    return levenshtein([w.surface for w in words(a, unit)], [w.surface for w in words(b, unit)], cap)


def is_full_sentence(text: str | None) -> bool:
    """Ends in a predicate (verb, adjective, auxiliary) before its final 。 and closing brackets."""
    ms = [m for m in morphemes(text) if m.pos != PUNCT]
    while ms and ms[-1].pos == PARTICLE and ms[-1].pos2 == "終助詞":
        ms.pop()  # 〜ね。〜よ。〜か。
    if ms and ms[-1].pos2 == "準体助詞":
        ms.pop()  # 〜のよ。〜のか。
    return bool(ms) and ms[-1].pos in PREDICATE


def check_pair(option1: str | None, option2: str | None, *, max_words: int = 2, min_words: int = 1,
               unit: Literal["word", "morpheme"] = "word") -> tuple[PairReason | None, int]:
    """(first failing rule or None, word distance) for one pair of options (no `correct` check)."""
    a, b = (option1 or "").strip(), (option2 or "").strip()
    if not a or not b:
        return PairReason.EMPTY_OPTION, -1
    wa, wb = words(a, unit), words(b, unit)
    sa, sb = [w.surface for w in wa], [w.surface for w in wb]
    dist = levenshtein(sa, sb, cap=max_words + 1)
    if dist < min_words:
        return PairReason.OPTIONS_IDENTICAL, dist
    if dist > max_words:
        return PairReason.OPTIONS_DIFFER_TOO_MUCH, dist
    if not (a.endswith(SENTENCE_END) and b.endswith(SENTENCE_END)):
        return PairReason.NO_FINAL_PERIOD, dist
    if not (is_full_sentence(a) and is_full_sentence(b)):
        return PairReason.NOT_FULL_SENTENCE, dist
    if [w.surface for w in wa if w.pos == PARTICLE] != [w.surface for w in wb if w.pos == PARTICLE]:
        return PairReason.PARTICLES_CHANGED, dist
    if [w.surface for w in wa if w.pos == PUNCT] != [w.surface for w in wb if w.pos == PUNCT]:
        return PairReason.PUNCTUATION_CHANGED, dist
    if Counter(sa) == Counter(sb):
        return PairReason.WORD_ORDER_CHANGED, dist  # the same words, moved (a swap costs 2 substitutions)
    return None, dist


def correct_reason(value: Any) -> PairReason | None:
    """`correct` must be 1 or 2 (the CSV's convention; label = correct - 1)."""
    text = unicodedata.normalize("NFKC", str(value)).strip() if value is not None else ""
    return None if text in ("1", "2") else PairReason.INVALID_CORRECT
