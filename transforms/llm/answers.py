"""The one answer parser of the project: every stage and the evaluator read model replies here.

* `match_choice`  a reply that should be one option of a list (예/아니오, yes/no, a label): the
                  option it starts with, after quotes, markdown and leading punctuation, by its own
                  spelling or an alias; "yes" does not match "yesterday"; None when it is none.
* `parse_answer`  an A/B (or 1/2, 0/1) answer to a two-choice item, with a status: exact, lenient
                  (one label found as a whole token, or after "Answer:"), refusal, empty, unparsable.
* `is_refusal`    the model declined ("I can't help", "죄송합니다", "не могу ответить").
* `extract_json`  the JSON value in a reply that may wrap it in a ```json fence or chat around it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXACT, LENIENT, REFUSAL, EMPTY, UNPARSABLE = "exact", "lenient", "refusal", "empty", "unparsable"
REQUEST_FAILED = "request_failed"  # no reply at all: the endpoint did not answer (retries spent), never ""
SCORED = (EXACT, LENIENT)
STATUSES = (EXACT, LENIENT, REFUSAL, EMPTY, UNPARSABLE, REQUEST_FAILED)

# Refusal phrases in the languages we work in; checked before the lenient search, so
# "Sorry, I can't choose between A and B" is a refusal and not an answer.
REFUSAL_PATTERNS = [
    r"\bI\s*(?:can ?not|can't|cannot|won't|am unable to|'m unable to|am not able to)\b",
    r"\bI'?m sorry\b", r"\bas an AI\b", r"\bI (?:do not|don't) (?:know|have enough)\b",
    r"\bunable to (?:answer|determine|help)\b", r"\bneither\b", r"\bnone of (?:them|the)\b",
    r"죄송", r"수\s*없습니다", r"모르겠",
    r"не могу", r"извините", r"к сожалению", r"как (?:ии|языковая модель)", r"не знаю",
    r"மன்னிக்கவும்", r"முடியாது",
]
_REFUSAL = re.compile("|".join(REFUSAL_PATTERNS), re.IGNORECASE)
_STRIP = " \t\r\n.。,:;!'\"`*()[]{}<>«»“”‘’「」"
# Markers after which the answer usually follows ("Answer: B", "Ответ: 1", "정답: A").
_ANSWER_MARKER = re.compile(r"(?:answer|ответ|정답|답|விடை|பதில்)\s*(?:is|:|-|=|—|는|은)?\s*[:：]?\s*",
                            re.IGNORECASE)
_LEADING_NOISE = re.compile(r"^[\s\"'`*_#>:\-\[\](){}.。]+")
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.S)


class AnswerError(ValueError):
    """A reply does not hold what was asked for (no JSON, not one of the options)."""


@dataclass(frozen=True)
class Parsed:
    choice: int | None
    status: str


def is_refusal(text: str | None) -> bool:
    return bool(text) and bool(_REFUSAL.search(text or ""))


# -- one option of a list ----------------------------------------------------------------------------
def match_choice(reply: str | None, options: Sequence[str],
                 aliases: Mapping[str, Sequence[str]] | None = None) -> str | None:
    """The option `reply` starts with (its spelling or an alias, longest first), or None.

    Korean answers may run on ("예, 맞습니다"), Latin ones may not ("yes" is not "yesterday").
    """
    if not reply:
        return None
    text = _LEADING_NOISE.sub("", unicodedata.normalize("NFKC", reply).strip().lower())
    spellings = sorted(((s.lower(), opt) for opt in options for s in [opt, *(aliases or {}).get(opt, [])]),
                       key=lambda pair: -len(pair[0]))
    for spelling, option in spellings:
        if spelling and text.startswith(spelling):
            rest = text[len(spelling):]
            if not rest or not (spelling.isascii() and rest[0].isalnum()):
                return option
    return None


# -- A/B answers to a two-choice item ------------------------------------------------------------------
def _token_pattern(label: str) -> re.Pattern[str]:
    # A label is a whole token when no letter or digit of its own script touches it:
    # "A" in "A입니다" or "(A)" counts, "A" in "Apple" or "1" in "10" does not.
    esc = re.escape(label)
    if re.fullmatch(r"[A-Za-z0-9]+", label):
        return re.compile(rf"(?<![A-Za-z0-9]){esc}(?![A-Za-z0-9])", re.IGNORECASE)
    return re.compile(rf"(?<!\w){esc}(?!\w)", re.IGNORECASE)


def parse_answer(reply: str | None, answers: Sequence[str],
                 aliases: Mapping[str, int] | None = None) -> Parsed:
    """Map `reply` to an index of `answers` (answers[0] means sol1)."""
    text = (reply or "").strip()
    if not text:
        return Parsed(None, EMPTY)
    core = text.strip(_STRIP).lower()
    for i, answer in enumerate(answers):
        if core == answer.lower():
            return Parsed(i, EXACT)
    if is_refusal(text):
        return Parsed(None, REFUSAL)
    # An explicit "Answer: X" wins over a stray mention of the other label earlier in the reply.
    for marker in _ANSWER_MARKER.finditer(text):
        rest = text[marker.end():].strip(_STRIP)
        for i, answer in enumerate(answers):
            if _token_pattern(answer).match(rest):
                return Parsed(i, LENIENT)
    found = {i for i, answer in enumerate(answers) if _token_pattern(answer).search(text)}
    for alias, index in (aliases or {}).items():
        if _token_pattern(alias).search(text):
            found.add(int(index))
    if len(found) == 1:
        return Parsed(found.pop(), LENIENT)
    return Parsed(None, UNPARSABLE)


# -- JSON in a chatty reply ----------------------------------------------------------------------------
def extract_json(reply: str | None, *, expect: type | tuple[type, ...] = (dict, list)) -> Any:
    """The first JSON value of type `expect` in `reply`: a fenced ```json block first, else the first
    '{' or '[' from which a whole value decodes ("Sure! Here it is: {...} Hope it helps").

    Raises AnswerError (with what was wrong, to show the model when retrying)."""
    text = (reply or "").strip()
    if not text:
        raise AnswerError("the reply is empty")
    if is_refusal(text) and "{" not in text and "[" not in text:
        raise AnswerError("the reply is a refusal, not JSON")
    candidates = [m.group(1).strip() for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    wrong_type: str | None = None
    for candidate in candidates:
        for start, char in enumerate(candidate):
            if char not in "{[":
                continue
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, expect):
                return value
            wrong_type = type(value).__name__
    if wrong_type is not None:
        want = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise AnswerError(f"the reply holds a JSON {wrong_type}, expected a JSON {want}")
    raise AnswerError("the reply holds no valid JSON value")
