"""Which language is a crawl row in? The evidence `item_language` uses (transforms/text/itemlang.py), for one text.

fastText's lid.176 alone misreads short text: `洗濯機の仕事は?` comes out as ceb, en or zh, and a crawl filter
that keeps only its top language drops those genuine rows. A row is decided in this order instead:

1. **Kana decide Japanese**: a text whose letters are mostly CJK and kana, with kana among them, is Japanese
   (no other language writes kana).
2. **The script**: each wanted language's script comes from its code (CLDR likely subtags: `ja` → Jpan,
   `ko` → Hang, `ru` → Cyrl). A text with fewer than half of its letters in any wanted language's script is
   another language's, however short (unless the rest are Latin letters beside a tenth or more in the wanted
   script: terms, names and URLs, kept unless they make sentences fastText reads as another language); a
   text mostly in a script only one language writes (Hangul, Tamil, Thai, ...) is that language.
3. **Han without kana** (a wanted `ja`): simplified Chinese forms, or 12 Han letters and more with no kana,
   are Chinese; fewer is undecided between Chinese and Japanese, and stays (fastText cannot tell them apart).
4. **fastText, with the confidence the length allows**: in the wanted script, a text is another language's
   only when fastText gives every wanted language less than 0.05 and that language (one written in the same
   script, with 2 million speakers or more) at least `confidence(words)` (0.95 up to 3 words, 0.80 for
   4 to 6) — from 4 words on, a sentence the wanted languages get almost nothing of is another language's
   once that language is fastText's top reading at 0.2 or more. Otherwise it is the wanted language fastText
   rates highest.

Each row gets (lang, score, method): method `script` when steps 1-3 decided, `fasttext` when step 4 did.
Measured on short questions of eight languages: docs/stages.md#crawl-language-by-script
(benchmarks/bench_crawl_langid.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from transforms.text.itemlang import (
    HAN_READINGS,
    KANA,
    LATIN_IN_OTHER_SCRIPT,
    LATIN_WORDS,
    SCRIPT_NAMES,
    SINGLE_LANGUAGE_SCRIPTS,
    _han_verdict,
    _predict,
    _scripts,
    _words,
    another_language,
    confidence,
    likely_script,
)
from transforms.text.languages import writes_without_spaces

# Letters read per row: the script shares of a crawl row's first few hundred letters are its shares.
SCRIPT_WINDOW = 600
MIN_SHARE = 0.5  # of a text's letters in a wanted language's script (a Japanese row naming `USB-C` passes)
MIN_TERMS_SHARE = 0.1  # ... or this much with the rest in Latin letters (terms, names, URLs: `_latin_terms`)
MAX_OWN = 0.05
SENTENCE_WORDS = 4
SENTENCE_TOP = 0.2  # fastText's probability of every wanted language under which another reading counts
# the language of a letter's script where only one language writes it (HANGUL → ko)
SINGLE_BY_NAME = {SCRIPT_NAMES[s][0]: lang for s, lang in SINGLE_LANGUAGE_SCRIPTS.items()}


def wanted_scripts(languages: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Per wanted language, the Unicode script names of its letters (empty for a language langcodes lacks)."""
    return {lang: SCRIPT_NAMES.get(likely_script(lang) or "", ()) for lang in languages}


def decide_rows(model: Any, texts: Sequence[str | None], languages: Sequence[str]
                ) -> tuple[list[str | None], list[float | None], list[str | None]]:
    """(lang, score, method) per text: see the module's docstring. Null text gets (None, None, None)."""
    scripts = wanted_scripts(languages)
    langs: list[str | None] = []
    scores: list[float | None] = []
    methods: list[str | None] = []
    for text in texts:
        lang, score, method = (None, None, None) if text is None else decide(model, text, languages, scripts)
        langs.append(lang)
        scores.append(score)
        methods.append(method)
    return langs, scores, methods


def decide(model: Any, text: str, languages: Sequence[str], scripts: dict[str, tuple[str, ...]]
           ) -> tuple[str | None, float | None, str]:
    found = _scripts(text[:SCRIPT_WINDOW])
    if not found:  # digits and symbols: no script evidence, fastText's reading as it is
        return _top(model, text)
    n = len(found)
    kana = sum(s in KANA for s in found)
    if kana and (kana + sum(s == "CJK" for s in found)) >= MIN_SHARE * n:
        return "ja", (kana + sum(s == "CJK" for s in found)) / n, "script"
    shares = {lang: sum(s in names for s in found) / n for lang, names in scripts.items() if names}
    best = max(shares, key=shares.__getitem__) if shares else None
    if best is None or shares[best] < MIN_SHARE:
        if not shares:  # no wanted language has a known script: fastText decides
            return _top(model, text)
        latin = found.count("LATIN") / n
        if (best is not None and shares[best] >= MIN_TERMS_SHARE and "LATIN" not in scripts[best]
                and shares[best] + latin >= 0.9):
            return _latin_terms(model, text, languages, best, shares[best])
        major = max(set(found), key=found.count)
        if major in SINGLE_BY_NAME:
            return SINGLE_BY_NAME[major], found.count(major) / n, "script"
        lang, score, _ = _top(model, text)
        # in another script than every wanted language's: not one of them, whatever fastText says (romanised)
        return (lang if lang not in languages else "und"), score, "script"
    if SINGLE_LANGUAGE_SCRIPTS.get(likely_script(best) or "") == best:
        return best, shares[best], "script"
    reading = _predict(model, text)
    if best == "ja" or best in HAN_READINGS:
        han = _han_verdict(text, found, likely_script(best) or "", reading)
        if han:
            return "zh" if best == "ja" else "ja", shares[best], "script"
        if best == "ja" and kana == 0:
            return "ja", shares[best], "script"  # Han alone, too short to be told from Chinese: it stays
    return _read(reading, text, languages, best, scripts[best])


def _latin_terms(model: Any, text: str, languages: Sequence[str], best: str, share: float
                 ) -> tuple[str | None, float | None, str]:
    """A text in a wanted non-Latin script whose other letters are Latin: names, terms, URLs and product codes
    (`LCD/LED/OLED 차이가 뭔가요?`) in any language, unless the Latin words make sentences that fastText reads as
    another language written in Latin letters."""
    words = re.findall(r"[A-Za-z]{2,}", re.sub(r"https?://\S+", " ", text))
    if len(words) >= LATIN_WORDS and sum(w.islower() for w in words) >= LATIN_WORDS // 2:
        reading = _predict(model, text)
        for other, p in reading.items():
            if p >= LATIN_IN_OTHER_SCRIPT and other not in languages and likely_script(other) == "Latn":
                return other, p, "fasttext"
    return best, share, "script"


def _top(model: Any, text: str) -> tuple[str | None, float | None, str]:
    reading = _predict(model, text, k=1)
    if not reading:
        return None, None, "fasttext"
    lang = next(iter(reading))
    return lang, reading[lang], "fasttext"


def _read(reading: dict[str, float], text: str, languages: Sequence[str], best: str,
          names: tuple[str, ...]) -> tuple[str | None, float | None, str]:
    """Step 4: fastText's reading, trusted against the wanted languages only as far as the length allows."""
    own = max(languages, key=lambda lang: reading.get(lang, 0.0))
    if reading and max(reading.values()) == reading.get(own, -1.0):
        return own, reading[own], "fasttext"
    if reading.get(own, 0.0) < MAX_OWN:
        words = _words(text, writes_without_spaces(best))
        # a sentence of SENTENCE_WORDS words or more that fastText gives the wanted languages almost nothing of
        # is another language's: its top reading need not be sure of which (`Make a bulletin board.` to es)
        need = confidence(words) if words < SENTENCE_WORDS else SENTENCE_TOP
        # Chinese and Japanese Han text: the kana decided above, fastText cannot; and fastText reading the wanted
        # script as a language written otherwise is no evidence
        found = another_language(reading, languages, need, best in HAN_READINGS,
                                 lambda other: SCRIPT_NAMES.get(likely_script(other) or "", ())[:1] == names[:1])
        if found is not None:
            return found[0], found[1], "fasttext"
    wanted = own if reading.get(own, 0.0) > 0 else best
    return wanted, reading.get(wanted, 0.0), "fasttext"
