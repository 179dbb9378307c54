"""What one kind of question to an LLM is: `LLMCall` (engine, versioned prompt, variables, output spec,
sampling params, `on_invalid`), the prompt reference it loads, and one parsed `Reply`.

`LLMStage.replies` (transforms/llm/stage.py) asks an `LLMCall` of a batch; `provenance_fields` are the
columns every generated row records (prompt id@version, model, sampling params).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.llm.answers import REQUEST_FAILED
from transforms.llm.base import EngineConfig, GenerationParams
from transforms.llm.output import ChoiceOutput, JsonOutput, OutputSpec, TextOutput
from transforms.llm.prompts import PromptError, PromptTemplate, load_prompt


class LLMDrops(DropReason):
    """Why a row gets no usable reply: the row-wise LLM stages' reasons (`Reply.drop_reason`)."""

    INVALID_OUTPUT = "invalid_output", "the model's answer did not parse as the output asks (after the retries)"
    REQUEST_FAILED = REQUEST_FAILED, "the endpoint never answered the row's question (its retries spent)"


INVALID = LLMDrops.INVALID_OUTPUT
RETRY_MESSAGE = ("Your reply could not be used: {error}. Answer again, following the instructions exactly, "
                 "and write nothing but the answer.")


class PromptRef(BaseModel):
    """A prompt file: 'task/lang', 'task/lang@version' or {id, version, root}."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., description="Prompt id, the file's path under prompts/ without .yaml.")
    version: str | None = Field(None, description="When set, the file must have this version (else a clear error).")
    root: str | None = Field(None, description="Prompts folder; unset: the project's prompts/.")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            pid, _, version = value.partition("@")
            return {"id": pid, "version": version or None}
        return value

    def load(self) -> PromptTemplate:
        prompt = load_prompt(self.id, self.root)
        if self.version is not None and prompt.version != self.version:
            raise PromptError(f"prompt {self.id!r} is at version {prompt.version!r}, the config pins "
                              f"{self.version!r}: update the config or restore that version")
        return prompt


@dataclass
class Reply:
    """One sample's answer: the text parsed (the retry's after a retry), its value or the error."""

    text: str | None
    value: Any
    error: str | None
    attempts: int
    sample: int
    failed: bool = False  # no answer at all (request_failed), not an answer that was invalid

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def drop_reason(self) -> LLMDrops | None:
        return None if self.ok else LLMDrops.REQUEST_FAILED if self.failed else LLMDrops.INVALID_OUTPUT


class LLMCall(BaseModel):
    """One kind of question to an LLM (the fields every LLM stage shares)."""

    model_config = ConfigDict(extra="forbid")

    engine: EngineConfig = Field(default_factory=EngineConfig, description="Which model, served how.")
    prompt: PromptRef = Field(..., description="Versioned prompt (prompts/<task>/<lang>.yaml).")
    variables: dict[str, str] = Field(default_factory=lambda: {"text": C.TEXT},
                                      description="Prompt variable → column that fills it.")
    output: OutputSpec = Field(default_factory=TextOutput, description="text | choice | json.")
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=256),
                                     description="Sampling: n, temperature, top_p, seed, max_tokens, stop.")
    on_invalid: Literal["drop", "retry"] = Field(
        "drop", description="drop: reason invalid_output, the raw reply kept in `raw_column`; retry: once "
        "more with the problem shown to the model, then drop.")
    raw_column: str = Field("llm_raw", description="Holds the raw reply of rows (or items) that were invalid.")
    retry_message: str = Field(RETRY_MESSAGE, description="The follow-up turn of a retry; {error} is filled in.")

    def choices(self, prompt: PromptTemplate) -> tuple[list[str], dict[str, list[str]]]:
        out = self.output
        assert isinstance(out, ChoiceOutput)
        choices = out.choices or list(prompt.options)
        if not choices:
            raise PromptError(f"choice output needs `choices` in the config or `options` in {prompt.ref}")
        return choices, out.aliases if out.aliases is not None else dict(prompt.aliases)

    def generation_params(self, prompt: PromptTemplate) -> GenerationParams:
        """The sampling params with the output's constraint (engines constrain decoding where they can)."""
        update: dict[str, Any] = {"json_schema": None, "choices": None}
        if isinstance(self.output, JsonOutput):
            update["json_schema"] = self.output.json_schema()
        elif isinstance(self.output, ChoiceOutput):
            update["choices"] = self.choices(prompt)[0]
        return self.params.model_copy(update=update)

    def parse(self, reply: str, prompt: PromptTemplate) -> Any:
        out = self.output
        if isinstance(out, ChoiceOutput):
            return out.parse(reply, *self.choices(prompt))
        return out.parse(reply)

    def provenance(self, prompt: PromptTemplate, sample: int | None = None) -> dict[str, str]:
        p = self.params
        gen: dict[str, Any] = {"temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens,
                               "n": p.n, "seed": p.seed}
        if sample is not None:
            gen["sample"] = sample  # sample k of a request with seed s (the engines' default: seed s + k)
        return {C.PROMPT: prompt.ref, C.MODEL: self.engine.model, C.GEN_PARAMS: json.dumps(gen, sort_keys=True)}

    def output_fields(self) -> list[pa.Field]:
        return [*self.output.arrow_fields(), pa.field(self.raw_column, pa.string())]


def provenance_fields() -> list[pa.Field]:
    return [pa.field(C.PROMPT, pa.string()), pa.field(C.MODEL, pa.string()), pa.field(C.GEN_PARAMS, pa.string())]

