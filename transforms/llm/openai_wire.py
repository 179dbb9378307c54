"""The OpenAI-compatible wire format, pure functions the `openai` engine (transforms/llm/openai_engine.py)
sends and reads with: the /chat/completions body with its output constraint, the reply's text (a choice
unwrapped from {"choice": ...}), a continuation's log-probability from an echoed prompt, Retry-After."""

from __future__ import annotations

import json
import math
from typing import Any

from transforms.llm.base import ChatMessage, EndpointError, GenerationParams


class EngineRequestError(EndpointError):
    """The endpoint refused a request (non-retryable status, no key) or sent what cannot be read."""


CHOICE_KEY = "choice"


def chat_body(conv: list[ChatMessage], params: GenerationParams, mode: str) -> dict[str, Any]:
    """The /chat/completions body for one conversation: sampling, n, seed and the output constraint."""
    body: dict[str, Any] = {"messages": conv, "max_tokens": params.max_tokens, "temperature": params.temperature,
                            "top_p": params.top_p}
    if params.n > 1:
        body["n"] = params.n
    if params.stop:
        body["stop"] = params.stop
    if params.seed is not None:
        body["seed"] = params.seed
    if mode == "vllm":
        if params.json_schema is not None:
            body["structured_outputs"] = {"json": params.json_schema}
        elif params.choices:
            body["structured_outputs"] = {"choice": list(params.choices)}
    elif mode == "response_format":
        schema = params.json_schema
        if schema is None and params.choices:  # OpenAI wants an object at the root: {"choice": one of them}
            schema = {"type": "object", "properties": {CHOICE_KEY: {"type": "string", "enum": list(params.choices)}},
                      "required": [CHOICE_KEY], "additionalProperties": False}
        if schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "reply", "schema": schema, "strict": True}}
    return body


def reply_text(choice: dict[str, Any], params: GenerationParams, mode: str) -> str:
    text: str = (choice.get("message") or {}).get("content") or ""
    if mode == "response_format" and params.json_schema is None and params.choices:
        try:  # the choice, unwrapped from {"choice": ...}; anything else goes to the stage as is
            value = json.loads(text).get(CHOICE_KEY)
            return value if isinstance(value, str) else text
        except (ValueError, AttributeError):
            return text
    return text


def continuation_logprob(response: dict[str, Any], start: int, end: int) -> tuple[float, int]:
    """Sum the echoed prompt-token logprobs whose character offset lies in [start, end)."""
    lp = response["choices"][0].get("logprobs") or {}
    offsets, values = lp.get("text_offset"), lp.get("token_logprobs")
    if not offsets or values is None:
        raise EngineRequestError("the endpoint returned no echoed prompt logprobs (needs echo=True "
                                 "and logprobs support on /completions)")
    total, n = 0.0, 0
    for off, v in zip(offsets, values, strict=False):
        if start <= off < end:
            if v is None:
                raise EngineRequestError("a continuation token has no logprob in the echoed prompt")
            total += float(v)
            n += 1
    if n == 0:
        return -math.inf, 0
    return total, n


def retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
