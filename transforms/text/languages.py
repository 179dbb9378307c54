"""Languages by code (transforms/text: the item checks and the translators use it), from a maintained library (`langcodes` + `language_data`, IETF BCP 47 / CLDR).

A recipe names a language by its ISO 639-1 or 639-3 code, with an optional script (`th`, `tha`,
`sw`, `zh-Hant`, `sr-Latn`), or by its English name (`Thai`). `resolve_language` turns any of
them into one `Language` (name, ISO 639-1 when there is one, ISO 639-3, script): LLM prompts use
the name, language checks the codes and the script, so a new language needs no code change.

Backends with their own code tables derive them here and say, in one line, which codes their
model lacks: MADLAD-400 names a target with `<2xx>` (`xx` the ISO code); NLLB-200 uses FLORES-200
codes (ISO 639-3 + script, `hin_Deva`), a few of which name an individual language where ISO
names the macrolanguage (`swh_Latn` for Swahili, `arb_Arab` for Arabic); `nllb_code` knows those.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


class LanguageError(ValueError):
    """A language code that no standard knows, or that a backend cannot map."""


@dataclass(frozen=True)
class Language:
    code: str           # the tag as normalised: `th`, `zh-Hant`, `fil`
    name: str           # English name for prompts: "Thai", "Chinese (Traditional)"
    iso1: str | None    # ISO 639-1 (two letters) when the language has one
    iso3: str           # ISO 639-3 (three letters)
    script: str         # ISO 15924, given or the language's likely one (Thai, Latn, Hans)

    @property
    def base(self) -> str:
        """The language subtag (`zh` for `zh-Hant`): what fastText's lid.176 and item checks compare."""
        return self.code.split("-")[0]


# Scripts written without spaces between words: sentences are joined without one.
NO_SPACE_SCRIPTS = frozenset({"Hans", "Hant", "Jpan", "Hira", "Kana", "Thai", "Laoo", "Khmr", "Mymr", "Tibt"})

# FLORES-200 codes that are not ISO 639-3 + likely script (individual language of a macrolanguage).
_NLLB_EXCEPTIONS = {
    "ar": "arb_Arab", "sw": "swh_Latn", "fa": "pes_Arab", "ms": "zsm_Latn", "lv": "lvs_Latn", "uz": "uzn_Latn",
    "mn": "khk_Cyrl", "ne": "npi_Deva", "or": "ory_Orya", "ps": "pbt_Arab", "sq": "als_Latn", "az": "azj_Latn",
    "et": "est_Latn", "ko": "kor_Hang", "om": "gaz_Latn", "qu": "quy_Latn", "yi": "ydd_Hebr", "gn": "grn_Latn", "zh-Hant": "zho_Hant",
}


def _langcodes():  # type: ignore[no-untyped-def]
    try:
        import langcodes
    except ImportError as err:  # a core dependency; only a broken install gets here
        raise LanguageError("language codes need the `langcodes` and `language_data` packages "
                            "(core dependencies: pip install -e .)") from err
    return langcodes


@functools.lru_cache(maxsize=512)
def resolve_language(code: str) -> Language:
    """`th`, `tha`, `Thai`, `zh-Hant` -> Language; LanguageError naming the code when no standard knows it."""
    lc = _langcodes()
    text = str(code).strip()
    try:
        tag = lc.get(text.replace("_", "-"))
    except (ValueError, LookupError):
        tag = None
    if tag is None or not tag.is_valid() or not tag.language:
        try:  # an English name ("Thai", "Swahili"), spelled exactly (langcodes' find also takes near misses)
            tag = lc.find(text, language="en")
            if tag.display_name("en").casefold() != text.casefold():
                raise LookupError(text)
        except LookupError:
            raise LanguageError(f"unknown language {code!r}: not an ISO 639-1/639-3 code (with an optional "
                                f"script, e.g. th, tha, zh-Hant) nor an English language name") from None
    full = tag.maximize()
    try:
        iso3 = tag.to_alpha3()
    except LookupError:
        iso3 = tag.language
    language = tag.language
    iso1 = language if len(language) == 2 else None
    if iso1 is None and len(iso3) == 3:  # `tha` given: its two-letter code when it has one
        shorter = lc.get(iso3).language
        iso1 = shorter if len(shorter) == 2 else None
    base = iso1 or language
    normal = base if not tag.script else f"{base}-{tag.script}"
    return Language(code=normal, name=tag.display_name("en"), iso1=iso1, iso3=iso3,
                    script=tag.script or full.script or "Zyyy")


def check_language(code: str) -> str:
    """`code` if a standard knows it (raises LanguageError otherwise)."""
    resolve_language(code)
    return code


def language_name(code: str) -> str:
    return resolve_language(code).name


def writes_without_spaces(code: str) -> bool:
    try:
        return resolve_language(code).script in NO_SPACE_SCRIPTS
    except LanguageError:
        return False


def nllb_code(code: str) -> str:
    """`hi` -> `hin_Deva`, `sw` -> `swh_Latn`; a code that already looks like a FLORES-200 code passes
    through. Whether the model has it is the backend's check (CTranslate2Translator.missing_codes)."""
    if "_" in code and len(code) == 8:
        return code
    lang = resolve_language(code)
    exception = _NLLB_EXCEPTIONS.get(lang.code) or (None if "-" in lang.code else _NLLB_EXCEPTIONS.get(lang.base))
    return exception or f"{lang.iso3}_{lang.script}"


def madlad_tag(code: str) -> str:
    """`hi` -> `<2hi>`, the token MADLAD-400 reads at the start of the source text (the ISO code as given)."""
    lang = resolve_language(code)
    return f"<2{lang.code.replace('-', '_')}>"
