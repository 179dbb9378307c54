"""Turn a model's reply into a choice: exact match first, then a lenient search; refusals apart.

Status of a parsed reply (counted per model, and replies that are not `exact`/`lenient` are left
out of accuracy with their count shown beside it, the way the Russian report does):
    exact       the reply is one of the answer labels, give or take quotes, brackets and a full stop
    lenient     one answer label (or an alias such as "first") found as a whole token, not both
    refusal     the model declined ("I can't help", "죄송합니다", "не могу ответить")
    empty       nothing but whitespace
    unparsable  anything else, including replies naming both answers
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EXACT, LENIENT, REFUSAL, EMPTY, UNPARSABLE = "exact", "lenient", "refusal", "empty", "unparsable"
SCORED = (EXACT, LENIENT)
STATUSES = (EXACT, LENIENT, REFUSAL, EMPTY, UNPARSABLE)

# Refusal phrases in the languages we evaluate; checked before the lenient search, so
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


@dataclass(frozen=True)
class Parsed:
    choice: int | None
    status: str


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
    if _REFUSAL.search(text):
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
