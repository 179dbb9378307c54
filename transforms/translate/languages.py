"""Language codes the translation backends need: ISO 639-1 in configs, each model's own tags inside.

MADLAD-400 names a target with a `<2xx>` tag whose `xx` is the ISO code (`<2hi>`); NLLB-200 uses
FLORES-200 codes (`hin_Deva`: language and script). LLM prompts use the English name.
"""

from __future__ import annotations

# ISO 639-1 -> (English name, NLLB-200 / FLORES-200 code)
LANGUAGES: dict[str, tuple[str, str]] = {
    "en": ("English", "eng_Latn"),
    "hi": ("Hindi", "hin_Deva"),
    "bn": ("Bengali", "ben_Beng"),
    "ta": ("Tamil", "tam_Taml"),
    "kn": ("Kannada", "kan_Knda"),
    "ml": ("Malayalam", "mal_Mlym"),
    "te": ("Telugu", "tel_Telu"),
    "mr": ("Marathi", "mar_Deva"),
    "gu": ("Gujarati", "guj_Gujr"),
    "ur": ("Urdu", "urd_Arab"),
    "ja": ("Japanese", "jpn_Jpan"),
    "ko": ("Korean", "kor_Hang"),
    "zh": ("Chinese", "zho_Hans"),
    "ru": ("Russian", "rus_Cyrl"),
    "fr": ("French", "fra_Latn"),
    "de": ("German", "deu_Latn"),
    "es": ("Spanish", "spa_Latn"),
}

# Scripts written without spaces between words: sentences are joined without one.
NO_SPACE_LANGUAGES = frozenset({"ja", "zh", "th", "lo", "km", "my"})


class LanguageError(ValueError):
    """A language code the backend cannot map."""


def check_language(code: str) -> str:
    if code not in LANGUAGES:
        raise LanguageError(f"unknown language code {code!r}; use an ISO 639-1 code from {sorted(LANGUAGES)} "
                            f"(add it to transforms/translate/languages.py with its NLLB code)")
    return code


def language_name(code: str) -> str:
    return LANGUAGES[check_language(code)][0]


def nllb_code(code: str) -> str:
    """`hi` -> `hin_Deva`; a code that already looks like a FLORES-200 code passes through."""
    if "_" in code and len(code) == 8:
        return code
    return LANGUAGES[check_language(code)][1]


def madlad_tag(code: str) -> str:
    """`hi` -> `<2hi>`, the token MADLAD-400 reads at the start of the source text."""
    return f"<2{check_language(code)}>"
