"""Prompts as versioned data: `prompts/<task>/<language>.yaml`, rendered with Jinja2 (StrictUndefined).

A prompt file holds an id, a version, the answer options and two templates: `system` (the shared
instruction, the same for every row) and `template` (the user turn, which ends with the row's text
fenced in `<tag>...</tag>`). Row text is sanitised before rendering: any opening or closing fence
tag inside it is removed, so crawled text cannot end the fence and speak as the instruction.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

ChatMessage = dict[str, str]

PROMPTS_DIR = Path(os.environ.get("PIQAFORGE_PROMPTS", Path(__file__).resolve().parents[2] / "prompts"))


class PromptError(ValueError):
    pass


class Rendered(BaseModel):
    messages: list[ChatMessage]
    prompt_id: str
    version: str

    @property
    def ref(self) -> str:
        return f"{self.prompt_id}@{self.version}"


class PromptTemplate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., description="'<task>/<language>', the file's path under prompts/.")
    version: str = Field(..., description="Bump on any change that can change a model's answer.")
    task: str
    language: str
    description: str = ""
    options: list[str] = Field(default_factory=list, description="Answer options, the positive one first.")
    aliases: dict[str, list[str]] = Field(default_factory=dict, description="Other spellings of each option.")
    system: str = ""
    template: str
    fence: str = Field("question", description="Tag that delimits the row text in `template`.")
    max_chars: int = Field(1200, ge=1, description="Row text is cut to this many characters.")
    shots: list[dict[str, str]] = Field(
        default_factory=list, description="Worked examples, rendered as user/assistant turns between the system "
        "turn and the row: each holds the template's variables and `answer` (the assistant's reply). They are "
        "the same for every row, so an engine with prefix caching computes them once.")

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    def sanitise(self, value: str) -> str:
        """Remove fence tags (any case/spacing, full-width brackets after NFKC) and cut to max_chars."""
        text = unicodedata.normalize("NFKC", value)
        tag = re.compile(rf"<\s*/?\s*{re.escape(self.fence)}\s*>", re.IGNORECASE)
        while True:  # nested leftovers such as "<</question>/question>" need another pass
            cleaned = tag.sub(" ", text)
            if cleaned == text:
                break
            text = cleaned
        return text.strip()[: self.max_chars]

    @functools.cached_property
    def shot_turns(self) -> list[ChatMessage]:
        """The worked examples as user/assistant turns, rendered once (the same for every row)."""
        turns: list[ChatMessage] = []
        for shot in self.shots:
            shot_vars = {k: self.sanitise(v) for k, v in shot.items() if k != "answer"}
            turns.append({"role": "user", "content": compile_template(self.template).render(**shot_vars)})
            turns.append({"role": "assistant", "content": shot["answer"]})
        return turns

    def render(self, **variables: Any) -> Rendered:
        clean = {k: self.sanitise(v) if isinstance(v, str) else v for k, v in variables.items()}
        messages: list[ChatMessage] = []
        if self.system:
            messages.append({"role": "system", "content": compile_template(self.system).render(**clean)})
        messages.extend(self.shot_turns)
        messages.append({"role": "user", "content": compile_template(self.template).render(**clean)})
        return Rendered(messages=messages, prompt_id=self.id, version=self.version)

    def parse(self, output: str | None) -> str | None:
        """Map a generated reply to one of `options`, or None when it is empty or ambiguous."""
        if not output:
            return None
        text = unicodedata.normalize("NFKC", output).strip().lower()
        text = re.sub(r"^[\s\"'`*_#>:\-\[\](){}.。]+", "", text)
        spellings = sorted(((s.lower(), opt) for opt in self.options for s in [opt, *self.aliases.get(opt, [])]),
                           key=lambda pair: -len(pair[0]))
        for spelling, option in spellings:
            if text.startswith(spelling):
                rest = text[len(spelling):]
                # "yes" must not match "yesterday"; Korean answers may run on ("예, ..."), Latin ones may not.
                if not rest or not (spelling.isascii() and rest[0].isalnum()):
                    return option
        return None


def prompt_variables(prompt: PromptTemplate) -> set[str]:
    """The variables a prompt's system text and template read (a few-shot turn brings its own)."""
    import jinja2.meta

    env = _env()
    return {name for source in (prompt.system, prompt.template) if source
            for name in jinja2.meta.find_undeclared_variables(env.parse(source))}


@functools.cache
def _env() -> Any:
    import jinja2

    return jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)


@functools.lru_cache(maxsize=512)
def compile_template(source: str) -> Any:
    """A strict Jinja2 template, compiled once per distinct source (prompts render once per row)."""
    return _env().from_string(source)


@functools.cache
def load_prompt(prompt_id: str, root: str | None = None) -> PromptTemplate:
    """Load `prompts/<prompt_id>.yaml`, e.g. load_prompt("classify_piqa/ko")."""
    base = Path(root) if root else PROMPTS_DIR
    path = base / f"{prompt_id}.yaml"
    if not path.exists():
        known = sorted(str(p.relative_to(base).with_suffix("")) for p in base.rglob("*.yaml")) if base.exists() else []
        raise PromptError(f"prompt {prompt_id!r} not found at {path}; known prompts: {known}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    prompt = PromptTemplate.model_validate(data)
    if prompt.id != prompt_id:
        raise PromptError(f"{path} declares id {prompt.id!r}; it must match its path {prompt_id!r}")
    if f"<{prompt.fence}>" not in prompt.template or f"</{prompt.fence}>" not in prompt.template:
        raise PromptError(f"{path}: template must fence the row text in <{prompt.fence}>...</{prompt.fence}>")
    if not prompt.template.rstrip().endswith(f"</{prompt.fence}>"):
        raise PromptError(f"{path}: the fenced row text must come last (prefix caching, injection safety)")
    for n, shot in enumerate(prompt.shots, 1):
        if "answer" not in shot:
            raise PromptError(f"{path}: shot {n} has no `answer` (the assistant's reply)")
        if prompt.options and prompt.parse(shot["answer"]) is None:
            raise PromptError(f"{path}: shot {n}'s answer {shot['answer']!r} is none of the options {prompt.options}")
    try:
        prompt.shot_turns  # noqa: B018 -- rendered once here, so a shot that does not fill the template fails on load
    except Exception as err:  # jinja2's UndefinedError and friends: say so in one line, not a stack of frames
        raise PromptError(f"{path}: a shot does not fill the template ({err})") from err
    return prompt
