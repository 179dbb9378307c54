"""Every model call of the project goes through here or through `LLMStage` (transforms/llm/stage.py).

Two layers over an `LLMStage` (its engines, answer cache, retries with backoff and counters):

* `call_chat`, `call_option_logprobs`, `call_loglikelihood`: one engine call for a chunk, with the
  stage's retries (`engine_retries`, doubling `retry_backoff_s`); an endpoint that keeps failing
  (timeouts, 5xx) fails the stage with the endpoint and the attempt count named.
* `ask_chat`, `ask_option_logprobs`, `ask_loglikelihood`: the same, through the answer cache keyed
  by the question (conversation or (context, continuation), the model, the kind of question and its
  parameters): equal questions are asked once and a resumed run asks only what was not answered.

`Asker` is the LLM stage for callers that are not row stages: the automatic review annotators, the
evaluated models and the solution-only audit, LLM translation. It records the questions it asked
(`questions`: prompt ref → first rendered conversation), which reports read instead of rebuilding
them. tests/llm/test_llm_calls_through_base.py greps that no other module calls an engine directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field, PrivateAttr

from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine, QuestionsFailed
from transforms.llm.cache import answer_key, namespace, recorded_question
from transforms.llm.stage import LEDGER_EVERY_S, LLMStage, answers_to

VALUE_SCHEMA = pa.schema([("key", pa.string()), ("id", pa.string()), ("value", pa.string()),
                          ("question", pa.string())])


# -- engine calls (retries, counters) -----------------------------------------------------------------
def call_chat(stage: LLMStage, slot: str, config: EngineConfig, convs: list[list[ChatMessage]],
              params: GenerationParams, label: str) -> list[str]:
    engine = stage.engine_for(slot, config)
    try:
        replies = stage.call_engine(label, config, lambda: engine.chat(convs, params))
    except QuestionsFailed as err:  # the answered ones as text, the failed ones stay None
        err.answers = [None if r is None else str(r[0] if isinstance(r, list) else r) for r in err.answers]
        raise
    _check_len(label, replies, convs)
    return ["" if r is None else str(r) for r in replies]


def call_option_logprobs(stage: LLMStage, slot: str, config: EngineConfig, convs: list[list[ChatMessage]],
                         options: Sequence[str], label: str) -> list[list[float]]:
    """Log-probabilities of `options` after each conversation, rendered by the engine's chat template."""
    engine = stage.engine_for(slot, config)
    prompts = [engine.render_chat(c) for c in convs]
    scores = stage.call_engine(label, config, lambda: engine.option_logprobs(prompts, list(options)))
    _check_len(label, scores, convs)
    return [list(map(float, row)) for row in scores]


def call_loglikelihood(stage: LLMStage, slot: str, config: EngineConfig, requests: list[tuple[str, str]],
                       label: str) -> list[tuple[float, int]]:
    engine = stage.engine_for(slot, config)
    scores = stage.call_engine(label, config, lambda: engine.loglikelihood(requests))
    _check_len(label, scores, requests)
    return [(float(s), int(n)) for s, n in scores]


def _check_len(label: str, got: Sequence[Any], asked: Sequence[Any]) -> None:
    if len(got) != len(asked):
        raise RuntimeError(f"{label}: the engine returned {len(got)} answers for {len(asked)} questions")


# -- cached questions -----------------------------------------------------------------------------------
def ask_cached(stage: LLMStage, slot: str, config: EngineConfig, ref: str, kind: str, questions: Sequence[Any],
               ids: Sequence[str] | None, params: dict[str, Any],
               compute: Callable[[list[int]], list[Any]],
               streamed: Callable[[Any], Any] | None = None) -> list[Any]:
    """One answer (any JSON value) per question, from the answer cache or `compute(indices)` in chunks
    of `stage.chunk_rows(engine)`; equal questions are asked once. The cache folder is per (stage, slot,
    model, ref); the key holds the question, the model, `kind` and `params`. `streamed(value)`: the
    answer to store for what an HTTP engine hands over as each question is answered. None where a
    question failed at the endpoint (its reason in `stage.failure_reasons`)."""
    name = namespace(f"{stage.name}-{slot}-{kind}", config, ref)
    cache = stage.answer_cache(name, VALUE_SCHEMA)
    keyed = {"kind": kind, **params}
    keys = [answer_key(q, config, keyed, 0) for q in questions]
    stage.counters.cache_hits += sum(k in cache for k in keys)
    todo: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k not in cache:
            todo.setdefault(k, i)
    order = list(todo.values())
    engine = stage.engine_for(slot, config) if order else None
    step = stage.chunk_rows(engine) if order else 1
    failed: set[str] = set()
    for start in range(0, len(order), step):
        chunk = order[start:start + step]
        stage.counters.requests += len(chunk)

        def row_of(r: int, i: int, v: Any) -> dict[str, Any]:
            return {"key": keys[i], "id": str(ids[i]) if ids is not None else str(i),
                    "value": json.dumps(v, ensure_ascii=False),
                    "question": recorded_question(questions[i]) if r == 0 else None}

        def arrived(r: int, value: Any, chunk: list[int] = chunk) -> None:
            if streamed is not None:  # persisted as it arrives (a kill loses only what is in flight)
                stage.answer_cache(name, VALUE_SCHEMA).journal([row_of(r, chunk[r], streamed(value))])
                stage.write_requests(every_s=LEDGER_EVERY_S)  # and so is what it cost, nearly

        try:
            with answers_to(engine, arrived):
                values: list[Any] = list(compute(chunk))
        except QuestionsFailed as err:
            values = list(err.answers)
            failed.update(keys[chunk[r]] for r in err.reasons)
            stage.failure_reasons.update({keys[chunk[r]]: why for r, why in err.reasons.items()})
        finally:
            stage.write_requests()
        cache.put([row_of(r, i, v) for r, (i, v) in enumerate(zip(chunk, values, strict=True)) if v is not None])
    stage._last_failures = [stage.failure_reasons.get(k) if k in failed else None for k in keys]
    return [None if k in failed else json.loads(cache.get(k)["value"]) for k in keys]  # type: ignore[index]


def ask_chat(stage: LLMStage, slot: str, config: EngineConfig, ref: str, convs: list[list[ChatMessage]],
             params: GenerationParams, ids: Sequence[str] | None = None, label: str | None = None) -> list[str | None]:
    label = label or f"stage {stage.name!r} ({slot})"
    key_params = params.model_dump(exclude={"n"})
    return ask_cached(stage, slot, config, ref, "chat", convs, ids, key_params,
                      lambda idx: call_chat(stage, slot, config, [convs[i] for i in idx], params, label),
                      streamed=lambda replies: "" if not replies or replies[0] is None else str(replies[0]))


def ask_option_logprobs(stage: LLMStage, slot: str, config: EngineConfig, ref: str,
                        convs: list[list[ChatMessage]], options: Sequence[str],
                        ids: Sequence[str] | None = None, label: str | None = None) -> list[list[float] | None]:
    label = label or f"stage {stage.name!r} ({slot})"
    return ask_cached(stage, slot, config, ref, "option_logprobs", convs, ids, {"options": list(options)},
                      lambda idx: call_option_logprobs(stage, slot, config, [convs[i] for i in idx], options,
                                                       label))


def ask_loglikelihood(stage: LLMStage, slot: str, config: EngineConfig, ref: str,
                      requests: list[tuple[str, str]], ids: Sequence[str] | None = None,
                      label: str | None = None) -> list[tuple[float, int] | None]:
    """None for a request the endpoint did not answer (its reason in `stage.last_failures`)."""
    label = label or f"stage {stage.name!r} ({slot})"

    def scored(idx: list[int]) -> list[Any]:
        try:
            return [list(v) for v in call_loglikelihood(stage, slot, config, [requests[i] for i in idx], label)]
        except QuestionsFailed as err:
            err.answers = [None if v is None else list(v) for v in err.answers]
            raise

    values = ask_cached(stage, slot, config, ref, "loglikelihood", [list(r) for r in requests], ids, {}, scored)
    return [None if v is None else (float(v[0]), int(v[1])) for v in values]


class Asker(LLMStage):
    """The LLM stage of one model inside a larger step (review annotators, evaluated models, audit,
    translation): the answer cache, retries and counters of `LLMStage`, asked question by question."""

    name: ClassVar[str] = "ask"

    label: str = Field("ask", description="Names this model's part: cache folder and error messages.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Which model, served how.")

    _questions: dict[str, list[ChatMessage] | str] = PrivateAttr(default_factory=dict)
    _set_up: set[int] = PrivateAttr(default_factory=set)

    @classmethod
    def for_engine(cls, engine: LLMEngine | Any, label: str = "ask", **kw: Any) -> Asker:
        """An asker around an engine built elsewhere (tests, a model shared with another step)."""
        config = getattr(engine, "config", None)
        if not isinstance(config, EngineConfig):  # a duck-typed test double
            config = EngineConfig(model=type(engine).__name__)
        asker = cls(label=label, engine=config, **kw)
        asker.attach_engine(label, engine)
        return asker

    @classmethod
    def wrap(cls, engine: LLMEngine | Asker | Any, label: str, **kw: Any) -> Asker:
        """`engine` if it is an asker already, else an asker around it (in-memory answer cache)."""
        return engine if isinstance(engine, Asker) else cls.for_engine(engine, label, **kw)

    def engine_for(self, slot: str, config: EngineConfig) -> LLMEngine:
        """The engine, set up at its first use (a run whose answers are all cached never loads it)."""
        engine = super().engine_for(slot, config)
        if id(engine) not in self._set_up:
            if hasattr(engine, "setup"):
                engine.setup()
            self._set_up.add(id(engine))
        return engine

    @property
    def questions(self) -> dict[str, list[ChatMessage] | str]:
        """Prompt ref → the first question asked with it (the report shows these)."""
        return dict(self._questions)

    def _record(self, ref: str, question: list[ChatMessage] | str) -> None:
        self._questions.setdefault(ref, question)

    def _label(self) -> str:
        return f"{self.label} ({self.engine.backend}:{self.engine.model})"

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        return self.engine_for(self.label, self.engine).render_chat(conversation)

    def ask_chat(self, convs: list[list[ChatMessage]], params: GenerationParams, *, ref: str = "",
                 ids: Sequence[str] | None = None, refs: Sequence[str] | None = None) -> list[str]:
        """`refs`: each conversation's prompt ref, when they differ (recorded; the cache key holds the
        conversation itself). A question the endpoint did not answer gets "" (ask_chat_or_none keeps None)."""
        return ["" if r is None else r for r in self.ask_chat_or_none(convs, params, ref=ref, ids=ids, refs=refs)]

    def ask_chat_or_none(self, convs: list[list[ChatMessage]], params: GenerationParams, *, ref: str = "",
                         ids: Sequence[str] | None = None, refs: Sequence[str] | None = None) -> list[str | None]:
        """As ask_chat, None for a question the endpoint did not answer (reason in `failure_reasons`)."""
        for i, conv in enumerate(convs):
            self._record(refs[i] if refs is not None else ref, conv)
        return ask_chat(self, self.label, self.engine, ref, convs, params, ids, self._label())

    def ask_option_logprobs(self, convs: list[list[ChatMessage]], options: Sequence[str], *, ref: str = "",
                            ids: Sequence[str] | None = None) -> list[list[float] | None]:
        """None for a question the endpoint did not answer (its reason in `last_failures`)."""
        for conv in convs[:1]:
            self._record(ref, conv)
        return ask_option_logprobs(self, self.label, self.engine, ref, convs, options, ids, self._label())

    def ask_loglikelihood(self, requests: list[tuple[str, str]], *, ref: str = "",
                          ids: Sequence[str] | None = None) -> list[tuple[float, int] | None]:
        """None for a request the endpoint did not answer (its reason in `last_failures`)."""
        for context, _ in requests[:1]:
            self._record(ref, context)
        return ask_loglikelihood(self, self.label, self.engine, ref, requests, ids, self._label())

    def close(self) -> None:
        for engine in {id(e): e for e in self._engines.values()}.values():
            engine.close()
