"""The one interface every LLM backend implements (vLLM, OpenAI-compatible HTTP, transformers).

Stages and the evaluator only talk to `LLMEngine`; the config's `backend` tag picks the class,
registered as a "module:Class" string so nothing heavy is imported until an engine is built.
Implementations: see the modules named in ENGINES (issue 3 fills these in).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

ChatMessage = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}

ENGINES: dict[str, str] = {
    "transformers": "transforms.llm.hf:TransformersEngine",
    "vllm": "transforms.llm.vllm_engine:VLLMEngine",
    "openai": "transforms.llm.openai_engine:OpenAIEngine",
    "llamacpp": "transforms.llm.llamacpp_engine:LlamaCppEngine",
}


class EndpointError(RuntimeError):
    """The endpoint refuses (401, 403, 404, a bad model) or looks down: the stage stops at once, the
    answers so far kept. `endpoint` and `cause` name it in the run's one error line."""

    def __init__(self, message: str, endpoint: str = "", cause: str = ""):
        super().__init__(message)
        self.endpoint, self.cause = endpoint, cause

    def __reduce__(self) -> tuple[Any, ...]:  # crosses Ray's process boundary with its fields
        return (type(self), (str(self), self.endpoint, self.cause))


class QuestionsFailed(RuntimeError):
    """Some questions of a call failed for good (retries spent); the others were answered.

    `answers[i]` is None for a failed question, whose reason is `reasons[i]`; callers keep the
    answers and reject the failed questions' rows with their reason, instead of stopping the run."""

    def __init__(self, answers: list[Any], reasons: dict[int, str], endpoint: str = ""):
        super().__init__(f"{len(reasons)} of {len(answers)} questions failed at {endpoint}: "
                         f"{next(iter(reasons.values()), '')}")
        self.answers, self.reasons, self.endpoint = answers, reasons, endpoint

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.answers, self.reasons, self.endpoint))


# "package.module:Class": an engine class outside ENGINES, registered by the string that names it
ENGINE_REF_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
EngineRef = Annotated[str, StringConstraints(pattern=ENGINE_REF_PATTERN)]


class EngineConfig(BaseModel):
    """Which model, served how. Backend-specific knobs live in `options`."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["transformers", "vllm", "openai", "llamacpp"] | EngineRef = Field(
        "transformers", description="Engine class: a registered name (ENGINES), or a 'package.module:Class' string "
        "naming an `LLMEngine` subclass built as `Class(config)`, imported only when the engine is built (a team's "
        "own engine; the cluster rehearsal's double).")
    model: str = Field("gemma3-270m", description="Model name or path (a name in the local model cache, "
                       "a HF id on a cluster, or the served model name of an endpoint).")
    name: str | None = Field(None, description="Short name used in verdict columns and drop reasons.")
    params_b: float | None = Field(None, description="Parameters in billions, for cost estimates.")
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options.")
    resources: dict[str, Any] | None = Field(
        None, description="Where this engine can run on a cluster (a stage's `resources` fields: env, gpus, cpus): "
        "a stage using it gets these under its own resources, and steps that call it outside a stage (automatic "
        "review) run it in a Ray task placed the same way. Engine profiles set it (jobs/engines.yaml).")

    @property
    def short_name(self) -> str:
        return self.name or self.model.rsplit("/", 1)[-1]


class GenerationParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = Field(default_factory=list)
    seed: int | None = 0
    n: int = Field(1, ge=1, description="Replies per conversation (`generate`); sample k uses seed + k.")
    json_schema: dict[str, Any] | None = Field(
        None, description="Constrain each reply to JSON valid under this schema (engines that cannot "
        "constrain decoding return free text; the caller validates either way).")
    choices: list[str] | None = Field(
        None, description="Constrain each reply to exactly one of these strings.")


class LLMEngine(ABC):
    """Batched calls; every method takes and returns lists aligned with its input."""

    def __init__(self, config: EngineConfig):
        self.config = config

    def setup(self) -> None:
        """Load weights / open connections. Called once per worker (inside a Ray actor)."""

    @abstractmethod
    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        """Generate one reply per conversation (the chat template is applied by the engine)."""

    def generate(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[list[str]]:
        """`params.n` replies per conversation. Engines with native n (vLLM, OpenAI) override this;
        the default calls `chat` n times, sample k with seed + k, so every sample is reproducible."""
        if params.n == 1:
            return [[r] for r in self.chat(conversations, params)]
        out: list[list[str]] = [[] for _ in conversations]
        for k in range(params.n):
            seed = None if params.seed is None else params.seed + k
            for i, reply in enumerate(self.chat(conversations, params.model_copy(update={"n": 1, "seed": seed}))):
                out[i].append(reply)
        return out

    @abstractmethod
    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        """For each fully rendered prompt, the log-probability of each option as the next text.

        Used by classifiers ("yes"/"no") and A/B answers: only the last position's logits are needed.
        """

    @abstractmethod
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        """For each (context, continuation): sum of log P(continuation | context) and its token count."""

    def choose(self, prompts: Sequence[str], choices: Sequence[str]) -> list[str]:
        """For each prompt, the choice the model prefers. vLLM decodes under a choice constraint
        (structured outputs); the default is the argmax of option_logprobs (same answer for greedy)."""
        rows = self.option_logprobs(prompts, choices)
        return [choices[row.index(max(row))] for row in rows]

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        """The prompt text the chat template produces (for option_logprobs on chat models)."""
        raise NotImplementedError

    @property
    def preferred_batch(self) -> int:
        """Questions per call this engine uses well (0: no preference); LLM stages whose `chunk_size`
        is not set send at least this many per call (a GPU engine wants hundreds, not 16)."""
        return 0

    def close(self) -> None:
        """Release resources."""


def encode_prompt(tokenizer: Any, text: str, *, special: bool = True) -> list[int]:
    """Token ids with one BOS: none is added when the text (a rendered chat) already starts with it.

    Shared by the transformers and vLLM engines so both score exactly the same token sequence.
    """
    bos = tokenizer.bos_token
    add = special and not (bos and text.startswith(bos))
    ids: list[int] = tokenizer(text, add_special_tokens=add)["input_ids"]
    if special and not ids and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id]
    return ids


def has_chat_template(tokenizer: Any, mode: str) -> bool:
    """mode "auto" uses the tokenizer's chat template when it has one; "plain" never does."""
    return mode == "auto" and bool(getattr(tokenizer, "chat_template", None))


def render_with_tokenizer(tokenizer: Any, conversation: list[ChatMessage], mode: str) -> str:
    """The chat template's prompt text, or for base models the contents in order, blank-line separated."""
    if has_chat_template(tokenizer, mode):
        text: str = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        return text
    return "\n\n".join(m["content"] for m in conversation)


def build_engine(config: EngineConfig) -> LLMEngine:
    """The engine `config.backend` names: a registered backend, or a "module:Class" string, imported now."""
    ref = ENGINES.get(config.backend, config.backend)
    module_name, cls_name = ref.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, LLMEngine)):
        raise TypeError(f"engine backend {config.backend!r}: {ref} is not an LLMEngine subclass")
    engine: LLMEngine = cls(config)
    return engine
