"""Turn a model's reply into a choice: exact match first, then a lenient search; refusals apart.

The parser itself lives in `transforms.llm.answers`, the one answer parser of the project (the LLM
stages, the ensemble and the evaluator all read replies there); this module keeps the evaluator's
names. Status of a parsed reply (counted per model, and replies that are not `exact`/`lenient` are
left out of accuracy with their count shown beside it, the way the Russian report does):
    exact       the reply is one of the answer labels, give or take quotes, brackets and a full stop
    lenient     one answer label (or an alias such as "first") found as a whole token, not both
    refusal     the model declined ("I can't help", "죄송합니다", "не могу ответить")
    empty       nothing but whitespace
    unparsable  anything else, including replies naming both answers
"""

from __future__ import annotations

from transforms.llm.answers import (
    EMPTY,
    EXACT,
    LENIENT,
    REFUSAL,
    REFUSAL_PATTERNS,
    SCORED,
    STATUSES,
    UNPARSABLE,
    Parsed,
    is_refusal,
    parse_answer,
)

__all__ = ["EMPTY", "EXACT", "LENIENT", "REFUSAL", "REFUSAL_PATTERNS", "SCORED", "STATUSES", "UNPARSABLE",
           "Parsed", "is_refusal", "parse_answer"]
