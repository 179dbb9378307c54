"""Language codes of the translation backends: see transforms/text/languages.py (a lower layer, so the
item checks of transforms/piqa use the same codes); re-exported here for the translate package."""

from transforms.text.languages import (
    NO_SPACE_SCRIPTS,
    Language,
    LanguageError,
    check_language,
    language_name,
    madlad_tag,
    nllb_code,
    resolve_language,
    writes_without_spaces,
)

__all__ = ["NO_SPACE_SCRIPTS", "Language", "LanguageError", "check_language", "language_name", "madlad_tag",
           "nllb_code", "resolve_language", "writes_without_spaces"]
