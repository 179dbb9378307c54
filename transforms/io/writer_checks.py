"""Checks of one writer item, pure: encoding and script problems of a text field, form problems of a row.

Each returns (reason, detail) pairs; writers_intake.py lists the reasons in order.
"""

from __future__ import annotations

from typing import Any

from transforms.core.drop_reasons import DropReason
from transforms.text import textcheck as tc


class IntakeDrops(DropReason):
    """Why a writer's record becomes no item: the writers' intake's reasons, in the order they are checked."""

    MALFORMED_ROW = "malformed_row", "a line that cannot be read (with --allow-malformed)"
    MOJIBAKE = "mojibake", "UTF-8 read as cp1252/latin-1"
    NOT_IN_SCRIPT = "not_in_script", "too few letters in the language's script"
    EMPTY_FIELD = "empty_field", "goal, sol1 or sol2 is empty"
    BAD_LABEL = "bad_label", "the label is not 0 or 1"
    IDENTICAL_SOLUTIONS = "identical_solutions", "sol1 and sol2 are the same text"
    DUPLICATE_ID = "duplicate_id", "an id already used by an earlier row"
    INVALID_UTF8 = "invalid_utf8", "bytes that are not UTF-8"
    STRAY_BOM = "stray_bom", "a byte-order mark inside the text"
    REPLACEMENT_CHAR = "replacement_char", "U+FFFD: the text was damaged by an earlier lossy conversion"
    MISSING_COLUMN = "missing_column", "the file or record lacks a required column"


Problem = tuple[IntakeDrops, str]  # (reason, detail)

_CP1252 = {ch: b for b in range(0x80, 0xA0) for ch in [bytes([b]).decode("cp1252", errors="ignore")] if ch}


def has_surrogates(text: str) -> bool:
    return any(0xDC80 <= ord(ch) <= 0xDCFF for ch in text)


def unmojibake(text: str) -> str | None:
    """What `text` reads as when it is UTF-8 that was decoded as cp1252 (or latin-1); None if it is not."""
    if text.isascii() or not any(0x80 <= ord(ch) <= 0xFF or ch in _CP1252 for ch in text):
        return None
    raw = bytearray()
    for ch in text:
        if ch in _CP1252:
            raw.append(_CP1252[ch])
        elif ord(ch) <= 0xFF:
            raw.append(ord(ch))
        else:
            return None
    try:
        fixed = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return fixed if fixed != text else None


def text_problems(field: str, text: str, lang: str, min_share: float) -> list[Problem]:
    """Encoding and script problems of one text field."""
    if has_surrogates(text):
        bad = next(i for i, ch in enumerate(text) if 0xDC80 <= ord(ch) <= 0xDCFF)
        return [(IntakeDrops.INVALID_UTF8, f"{field}: bytes that are not UTF-8 at character {bad}")]
    if "\ufeff" in text:
        return [(IntakeDrops.STRAY_BOM, f"{field}: a byte-order mark (U+FEFF) inside the text")]
    if "\ufffd" in text:
        return [(IntakeDrops.REPLACEMENT_CHAR, f"{field}: U+FFFD (the text was damaged by an earlier conversion)")]
    fixed = unmojibake(text)
    if fixed is not None:
        return [(IntakeDrops.MOJIBAKE, f"{field}: UTF-8 read as cp1252/latin-1; it should read {fixed[:60]!r}")]
    if lang in tc.SCRIPT_RANGES:
        share = tc.script_share(text, lang)
        if share < min_share:
            return [(IntakeDrops.NOT_IN_SCRIPT, f"{field}: {share:.0%} of its letters are in the {lang} script "
                                      f"(at least {min_share:.0%} needed)")]
    return []


def form_problems(item: dict[str, Any], label: Any) -> list[Problem]:
    problems = [(IntakeDrops.EMPTY_FIELD, f"{k} is empty") for k in ("goal", "sol1", "sol2") if not item.get(k)]
    text = "" if label is None else str(label).strip()
    if text not in ("0", "1", "0.0", "1.0"):
        problems.append((IntakeDrops.BAD_LABEL, f"label {text!r} is not 0 (sol1 correct) or 1 (sol2 correct)"))
    if item.get("sol1") and item.get("sol1") == item.get("sol2"):
        problems.append((IntakeDrops.IDENTICAL_SOLUTIONS, "sol1 and sol2 are the same text"))
    return problems
