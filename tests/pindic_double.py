"""A test double of the *engine interface* (transforms/llm/base.py:LLMEngine) for the PIndicQA tests.

It is not a model and pretends to be none: each reply is computed from the conversation by fixed
rules, so the tests can check what the stages do with well-formed, malformed and retried replies.
Which PIndicQA prompt is being answered is read from the system turn; a "translation" maps Latin
letters onto letters of the target script so script checks see the right block.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine

SCRIPT_BASE = {"Hindi": 0x0915, "Bangla": 0x0995,  # CLDR's English name of bn (langcodes)
               "Tamil": 0x0B95, "Kannada": 0x0C95, "Malayalam": 0x0D15}


def h(text: str) -> int:
    return int(hashlib.sha1(text.encode()).hexdigest(), 16)


def fake_script(text: str, language: str) -> str:
    base = SCRIPT_BASE[language]
    return " ".join("".join(chr(base + (ord(c) % 26)) for c in w if c.isalnum()) or w for w in text.split())


def fenced(text: str, tag: str) -> str:
    m = re.search(rf"<{tag}>(.*)</{tag}>", text, re.S)
    return m.group(1).strip() if m else text


class ScriptedEngine(LLMEngine):
    """Rules per prompt; `bad_open_labels` lists goals whose open-label replies are always malformed,
    `extra_key_once` goals whose first reply has an extra key (fixed on the retry)."""

    def __init__(self, config: EngineConfig | None = None, *, bad_open_labels: Sequence[str] = (),
                 extra_key_once: Sequence[str] = ()):
        super().__init__(config or EngineConfig(backend="transformers", model="scripted-double"))
        self.bad, self.extra_once = set(bad_open_labels), set(extra_key_once)
        self.asked: list[str] = []

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [self._reply(c, params) for c in conversations]

    def _reply(self, conv: list[ChatMessage], params: GenerationParams) -> str:
        system, user = conv[0]["content"], conv[1]["content"] if len(conv) > 1 else ""
        retry = len(conv) > 2
        if "four kinds of short labels" in system:
            self.asked.append("open_labels")
            goal = re.search(r"Goal: (.*)", user).group(1)  # type: ignore[union-attr]
            if any(goal.startswith(b) for b in self.bad):
                return "I think this item is about cooking, probably."
            words = [w.lower() for w in re.findall(r"[A-Za-z]{4,}", goal)] or ["thing"]
            reply: dict[str, Any] = {"Domain": [words[0]], "Core_Principle": [f"principle {h(goal) % 3}"],
                                     "Key_Properties_Materials": words[:2], "Action_Type": [words[-1]]}
            if any(goal.startswith(b) for b in self.extra_once) and not retry:
                reply["Notes"] = "extra"
            return json.dumps(reply)
        if "candidate names" in system:
            self.asked.append("name_cluster")
            first = fenced(user, "labels").split(";")[0].strip()
            return json.dumps({"names": [first.title(), f"{first.title()} Group"]})
        if "You classify everyday" in system:
            self.asked.append("classify")
            props = params.json_schema["properties"]  # type: ignore[index]
            item = fenced(user, "item")
            return json.dumps({k: v["enum"][h(item + k) % 2] for k, v in props.items()})
        if "You write items for a benchmark" in system:
            self.asked.append("generate")
            n = int(re.search(r"Write (\d+) new items", user).group(1))  # type: ignore[union-attr]
            locale = re.search(r"Locale: (.*)", user).group(1)  # type: ignore[union-attr]
            seed = params.seed or 0
            items = [{"goal": f"In {locale} how do you keep item {h(user) % 997} number {k} seed {seed} fresh "
                               f"through a long humid monsoon week at home",
                      "answer": f"Store it in a closed steel box with a tight lid for variant {k}",
                      "word": "closed steel box", "wrong_word": "open paper bag near the stove"}
                     for k in range(n)]
            return json.dumps({"items": items})
        if "careful translator" in system:
            self.asked.append("translate")
            target = re.search(r"into (\w+)\.", system).group(1)  # type: ignore[union-attr]
            return f"<text>{fake_script(fenced(user, 'text'), target)}</text>"
        if "editor" in system:
            self.asked.append("correct")
            lang = re.search(r"careful (\w+) editor", system).group(1)  # type: ignore[union-attr]
            mt = dict(re.findall(r"Machine translation of (?:the )?(goal|solution 1|solution 2): (.*)", user))
            return json.dumps({"goal": mt["goal"] + " " + fake_script("fixed", lang),
                               "sol1": mt["solution 1"], "sol2": mt["solution 2"]})
        raise AssertionError(f"the double has no rule for this prompt: {system[:80]!r}")

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        return "\n\n".join(m["content"] for m in conversation)

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        return [[0.0 if i == 0 else -1.0 for i in range(len(options))] for _ in prompts]

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        raise NotImplementedError
