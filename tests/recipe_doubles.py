"""An engine double for whole recipes: translates English into made-up but well-formed Chinese
(each English word to one Han character, the same word to the same character, so a minimal pair stays
minimal) and reviews as an oracle annotator that knows which translated solutions are correct.

The content is the test's, not a model's: recipes are judged by their mechanics here (accounting,
resume, review, gates); the real engines' code is tested against their real APIs elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import xxhash

from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine

_WORD = re.compile(r"[A-Za-z0-9']+")


def zh(text: str) -> str:
    """English → one Han character per word (from a hash of the word), with a full stop."""
    chars = [chr(0x4E00 + xxhash.xxh32_intdigest(w.lower().encode()) % 0x5000) for w in _WORD.findall(text or "")]
    return "".join(chars) + "。"


class RecipeDouble(LLMEngine):
    """`correct`: the solution texts (as the annotators see them) that achieve their goal."""

    def __init__(self, correct: set[str] | None = None):
        super().__init__(EngineConfig(backend="transformers", model="recipe-double", name="double"))
        self.correct = correct or set()
        self.calls: list[str] = []

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            self.calls.append(user)
            text = re.search(r"<text>\s*(.*?)\s*</text>", user, re.S)
            out.append(zh(text.group(1)) if text else "")
        return out

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        return "\n".join(m["content"] for m in conversation)

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        out = []
        for prompt in prompts:
            self.calls.append(prompt)
            s1 = re.search(r"Solution 1: (.*)", prompt)
            s2 = re.search(r"Solution 2: (.*)", prompt)
            first = s1 is not None and s1.group(1).strip() in self.correct
            second = s2 is not None and s2.group(1).strip() in self.correct
            pick = 0 if first and not second else 1 if second and not first else 2
            out.append([0.0 if i == pick else -9.0 for i in range(len(options))])
        return out

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        return [(-float(len(c)), max(1, len(c))) for _, c in requests]
