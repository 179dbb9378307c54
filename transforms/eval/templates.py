"""Which prompt evaluates which language, on top of the shared loader (transforms/llm/prompts.py).

Generation prompts are ordinary prompt files, `prompts/eval_<name>/<lang>.yaml`; this module only
picks one per language and turns its options/aliases into the index map the parser needs.
Log-likelihood contexts are not chat prompts, so they live in one small versioned file,
`prompts/eval_loglik/contexts.yaml`, rendered here with the same strict Jinja2 settings; the same
file holds the per-language answer cue ("Answer:") the generation mode can append after the item.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from transforms.llm.prompts import PROMPTS_DIR, PromptError, PromptTemplate, compile_template, load_prompt

DEFAULT_PROMPTS = {"ko": "eval_ko/ko", "ru": "eval_ru/ru", "default": "eval_generic/en"}
# The Global-PIQA-style A/B prompt: one English instruction for every language ("*" wins over all).
GLOBAL_PIQA_PROMPT = "eval_global/en"
PROMPT_STYLES = {"paper": {}, "global_piqa": {"*": GLOBAL_PIQA_PROMPT}}
# How to render a Global-PIQA-shaped row (prompt/solution0/solution1) with our prompts' variables.
_GLOBAL_VARS = "{% set goal = prompt %}{% set sol1 = solution0 %}{% set sol2 = solution1 %}"


def prompt_for(lang: str | None, prompts: dict[str, str] | None = None) -> PromptTemplate:
    """The generation prompt for `lang`: a "*" entry for every language, else the language's own, else 'default'."""
    table = {**DEFAULT_PROMPTS, **(prompts or {})}
    return load_prompt(table.get("*") or table.get(lang or "", table["default"]))


def prompts_for_style(style: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The prompt table of a style: "paper" (each paper's own prompt per language) or "global_piqa" (A/B)."""
    if style not in PROMPT_STYLES:
        raise PromptError(f"unknown prompt style {style!r}; known: {sorted(PROMPT_STYLES)}")
    return {**PROMPT_STYLES[style], **(overrides or {})}


def single_turn_template(prompt: PromptTemplate, *, global_piqa_fields: bool = True) -> str:
    """The prompt as one Jinja2 string: system, a blank line, the user turn.

    Gemma-style chat templates fold a system turn into the first user turn exactly this way, so a
    harness that sends this string as the only user message shows the model what our evaluator
    shows it. With `global_piqa_fields` the string reads prompt/solution0/solution1 (the export's
    columns) into our variables. Unlike `PromptTemplate.render`, nothing sanitises the row text
    here (no NFKC, no fence-tag removal, no cut to max_chars).
    """
    text = f"{prompt.system}\n\n{prompt.template}" if prompt.system else prompt.template
    return (_GLOBAL_VARS + text) if global_piqa_fields else text


def answer_index(prompt: PromptTemplate) -> tuple[list[str], dict[str, int]]:
    """(answers, aliases → index): options[0] names sol1, options[1] sol2."""
    if len(prompt.options) != 2:
        raise PromptError(f"{prompt.ref}: an evaluation prompt needs exactly two options, has {prompt.options}")
    aliases = {alias: i for i, opt in enumerate(prompt.options) for alias in prompt.aliases.get(opt, [])}
    return list(prompt.options), aliases


class LoglikContexts:
    """`contexts.yaml`: a Jinja2 context per language; each solution is scored as ' ' + solution."""

    def __init__(self, data: dict[str, Any]):
        self.id = str(data["id"])
        self.version = str(data["version"])
        self.default = str(data.get("default", "en"))
        self.contexts: dict[str, str] = {str(k): str(v) for k, v in data["contexts"].items()}
        self.cues: dict[str, str] = {str(k): str(v) for k, v in (data.get("answer_cues") or {}).items()}
        if self.default not in self.contexts:
            raise PromptError(f"{self.id}: default language {self.default!r} has no context")

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    def template_for(self, lang: str | None) -> str:
        return self.contexts.get(lang or "", self.contexts[self.default])

    def cue_for(self, lang: str | None) -> str:
        """The line that asks for the answer after a generation prompt ("Answer:")."""
        return self.cues.get(lang or "", self.cues.get(self.default, ""))

    def render(self, lang: str | None, goal: str) -> str:
        return str(compile_template(self.template_for(lang)).render(goal=goal))


@functools.cache
def load_loglik_contexts(root: str | None = None) -> LoglikContexts:
    path = Path(root or PROMPTS_DIR) / "eval_loglik" / "contexts.yaml"
    if not path.exists():
        raise PromptError(f"log-likelihood contexts not found at {path}")
    return LoglikContexts(yaml.safe_load(path.read_text(encoding="utf-8")))


@functools.cache
def load_global_cloze_contexts(root: str | None = None) -> LoglikContexts:
    """The Global PIQA cloze context (`prompts/eval_global/cloze.yaml`): the bare goal, for every language."""
    path = Path(root or PROMPTS_DIR) / "eval_global" / "cloze.yaml"
    if not path.exists():
        raise PromptError(f"Global PIQA cloze context not found at {path}")
    return LoglikContexts(yaml.safe_load(path.read_text(encoding="utf-8")))
