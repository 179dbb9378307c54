"""The one base of every stage that calls an LLM, and its two common shapes.

`LLMStage` owns what every LLM stage needs: engines (built once per actor, shared between parts of a
stage that use the same model, or injected by tests), the answer cache (transforms/llm/cache.py:
keyed by what was asked, not by row id), chunked engine calls with retries, the engine-call
counters, and the provenance columns `_prompt` (id@version), `_model` and `_gen_params` (JSON).

`LLMCall` (transforms/llm/call.py) is what one kind of question is: an engine, a versioned prompt,
which column fills each prompt variable, the output spec (text | choice | json, transforms/llm/output.py),
sampling params and `on_invalid` (drop with `invalid_output`, the raw reply kept; or retry once with the
problem shown to the model in a follow-up turn, then drop). `LLMStage.replies` asks it of a batch.

* `LLMTransform` (transforms/llm/transform.py, row-wise): same rows, adds the output columns (refinement, classification...).
* `LLMGenerate` (transforms/llm/generate.py, an ExpandStage): each row's replies become children.
The ensemble and the cultural tagger are LLMStages whose parts are classifiers (ensemble.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa
from pydantic import Field, PrivateAttr

from transforms.core.accounting import write_ledgers
from transforms.core.stage import R, Stage, StageError
from transforms.llm.answers import REQUEST_FAILED, AnswerError
from transforms.llm.base import (
    ChatMessage,
    EndpointError,
    EngineConfig,
    GenerationParams,
    LLMEngine,
    QuestionsFailed,
    build_engine,
)
from transforms.llm.cache import AnswerCache, Counters, answer_key, namespace, recorded_question
from transforms.llm.call import INVALID, RETRY_MESSAGE, LLMCall, PromptRef, Reply, provenance_fields  # noqa: F401 (re-exported)
from transforms.llm.output import ChoiceOutput, JsonOutput, TextOutput  # noqa: F401 (re-exported)
from transforms.llm.prompts import PromptTemplate

log = logging.getLogger("piqaforge.llm")
T = TypeVar("T")
REPLY_SCHEMA = pa.schema([("key", pa.string()), ("id", pa.string()), ("sample", pa.int32()),
                          ("reply", pa.string()), ("question", pa.string())])
LEDGER_EVERY_S = 0.2  # request ledgers rewritten at most this often while answers arrive


class EngineUnavailableError(RuntimeError):
    """An engine kept failing after its retries; the stage stops with what to do next."""


class LLMStage(Stage[R], Generic[R]):
    """Base of every stage that calls an LLM: engines, answer cache, chunking, retries, counters."""

    stateful: ClassVar[bool] = True

    cache_dir: str | None = Field(None, description="Answer cache root (jobs pass <lake>/cache/llm or a "
                                  "per-run folder); unset: answers are kept in memory only.")
    chunk_size: int = Field(16, ge=1, description="Conversations per engine call (and per cache file); when "
                            "not set, at least the engine's preferred batch (the transformers engine on a "
                            "GPU: 256).")
    engine_retries: int = Field(2, ge=0, description="Retries of a failing engine call before giving up.")
    retry_backoff_s: float = Field(2.0, ge=0, description="First wait between engine retries; doubles.")

    _engines: dict[str, LLMEngine] = PrivateAttr(default_factory=dict)
    _built: dict[str, LLMEngine] = PrivateAttr(default_factory=dict)
    _caches: dict[str, AnswerCache] = PrivateAttr(default_factory=dict)
    _counters: Counters = PrivateAttr(default_factory=Counters)
    _prompt_override: PromptTemplate | None = PrivateAttr(None)
    _requests_dir: str | None = PrivateAttr(None)
    _failures: dict[str, str] = PrivateAttr(default_factory=dict)
    _last_failures: list[str | None] = PrivateAttr(default_factory=list)
    _requests_written: float = PrivateAttr(0.0)

    @property
    def counters(self) -> Counters:
        return self._counters

    # -- engines -------------------------------------------------------------------------------------
    def attach_engine(self, slot: str, engine: LLMEngine) -> None:
        """Use `engine` for the part named `slot` (tests; or a model already loaded by another stage)."""
        self._engines[slot] = engine

    def engine_for(self, slot: str, config: EngineConfig) -> LLMEngine:
        """The injected engine of `slot`, else one built from `config`, shared by equal configs."""
        if slot not in self._engines:
            key = json.dumps([config.backend, config.model, config.options], sort_keys=True, default=str)
            if key not in self._built:
                engine = build_engine(config)
                engine.setup()
                self._built[key] = engine
            self._engines[slot] = self._built[key]
        return self._engines[slot]

    @property
    def failure_reasons(self) -> dict[str, str]:
        """Answer key -> why the endpoint did not answer it (questions that failed after their retries)."""
        return self._failures

    @property
    def last_failures(self) -> list[str | None]:
        """Per question of the last cached ask (transforms/llm/asking.py), why the endpoint did not answer
        it, or None: callers that are not row stages record the reason beside their result."""
        return self._last_failures

    def record_requests_to(self, folder: str | None) -> None:
        """Write the HTTP engines' request ledgers under `folder` after every chunk (the runner sets it:
        runs/<run id>/requests/<stage>/; transforms/core/accounting.py)."""
        self._requests_dir = folder

    def write_requests(self, every_s: float = 0.0) -> None:
        """The engines' ledgers to the run's folder; `every_s`: not again sooner (as answers arrive, so a
        kill loses at most that long of the accounting, not a whole chunk's)."""
        if not self._requests_dir or time.monotonic() - self._requests_written < every_s:
            return
        self._requests_written = time.monotonic()
        # one file per engine: two askers sharing an engine (review annotators) write its ledger once
        for engine in {id(e): e for e in self._engines.values()}.values():
            if hasattr(engine, "ledger"):
                write_ledgers(self._requests_dir, engine, [engine.ledger])

    def call_engine(self, label: str, config: EngineConfig, fn: Callable[[], T]) -> T:
        for attempt in range(self.engine_retries + 1):
            self._counters.engine_calls += 1
            try:
                return fn()
            except (QuestionsFailed, EndpointError):  # retried per request by the engine: never ask again
                raise
            except Exception as err:  # engines raise many kinds (HTTP, CUDA OOM, dead actor)
                if attempt == self.engine_retries:
                    where = f" Answers so far are cached in {self.cache_dir}; a resumed run asks only the rest." \
                        if self.cache_dir else ""
                    endpoint = config.options.get("base_url")
                    at = f" at {endpoint}" if endpoint else ""
                    raise EngineUnavailableError(
                        f"{label} ({config.backend}:{config.model}{at}) failed {attempt + 1} times: "
                        f"{type(err).__name__}: {err}.{where}") from err
                wait = self.retry_backoff_s * 2**attempt
                log.warning("%s: %s; retrying in %.1fs", label, err, wait)
                time.sleep(wait)
        raise AssertionError("unreachable")

    def chunk_rows(self, engine: LLMEngine | None) -> int:
        """Questions per engine call: `chunk_size` when set, else at least what the engine uses well."""
        if "chunk_size" in self.model_fields_set:
            return self.chunk_size
        return max(self.chunk_size, int(getattr(engine, "preferred_batch", 0) or 0))

    def answer_cache(self, name: str, schema: pa.Schema) -> AnswerCache:
        if name not in self._caches:
            folder = None if not self.cache_dir else f"{self.cache_dir.rstrip('/')}/{name}"
            self._caches[name] = AnswerCache(folder, schema)
        return self._caches[name]

    # -- asking ----------------------------------------------------------------------------------------
    def use_prompt(self, prompt: PromptTemplate) -> None:
        """Ask with this template instead of loading `prompt` (benchmarks compare prompt layouts)."""
        self._prompt_override = prompt

    def load_call_prompt(self, call: LLMCall) -> PromptTemplate:
        return self._prompt_override or call.prompt.load()

    def replies(self, call: LLMCall, slot: str, rows: Sequence[dict[str, Any]], ids: Sequence[str]) -> list[list[Reply]]:
        """`params.n` parsed replies per row (variables already mapped); cached answers are not asked again."""
        prompt = self.load_call_prompt(call)
        params = call.generation_params(prompt)
        convs = [prompt.render(**row).messages for row in rows]
        texts = self._ask(call, slot, prompt, params, convs, ids, [list(range(params.n))] * len(convs))
        out = [[self._parse(call, prompt, t, k) for k, t in enumerate(row_texts)] for row_texts in texts]
        if call.on_invalid == "retry":
            self._retry(call, slot, prompt, params, convs, ids, out)
        return out

    def _parse(self, call: LLMCall, prompt: PromptTemplate, text: str | None, sample: int,
               attempts: int = 1) -> Reply:
        if text is None:  # the question failed at the endpoint
            return Reply(None, None, "the endpoint did not answer", attempts, sample, failed=True)
        try:
            return Reply(text, call.parse(text, prompt), None, attempts, sample)
        except AnswerError as err:
            return Reply(text, None, str(err), attempts, sample)

    def _retry(self, call: LLMCall, slot: str, prompt: PromptTemplate, params: GenerationParams,
               convs: list[list[ChatMessage]], ids: Sequence[str], out: list[list[Reply]]) -> None:
        bad = [(i, r.sample) for i, row in enumerate(out) for r in row if not r.ok and not r.failed]
        follow = [[*convs[i], {"role": "assistant", "content": out[i][k].text or ""},
                   {"role": "user", "content": call.retry_message.format(error=out[i][k].error)}] for i, k in bad]
        texts = self._ask(call, slot, prompt, params, follow, [ids[i] for i, _ in bad], [[k] for _, k in bad])
        for (i, k), (text,) in zip(bad, texts, strict=True):
            out[i][k] = self._parse(call, prompt, text, k, attempts=2)

    def _ask(self, call: LLMCall, slot: str, prompt: PromptTemplate, params: GenerationParams,
             convs: list[list[ChatMessage]], ids: Sequence[str], samples: list[list[int]]) -> list[list[str | None]]:
        """The reply text of each (conversation, sample index), from the cache or the engine; None where
        the endpoint did not answer (the row is rejected as request_failed)."""
        cache = self.answer_cache(namespace(self.name, call.engine, prompt.ref), REPLY_SCHEMA)
        key_params = params.model_dump(exclude={"n"})
        keys = [[answer_key(c, call.engine, key_params, k) for k in ks] for c, ks in zip(convs, samples, strict=True)]
        hits = sum(key in cache for row in keys for key in row)
        self._counters.cache_hits += hits
        todo: dict[tuple[str, ...], int] = {}  # equal questions are asked once
        for i, row in enumerate(keys):
            if any(key not in cache for key in row):
                todo.setdefault(tuple(row), i)
        by_samples: dict[tuple[int, ...], list[int]] = {}
        for i in todo.values():
            by_samples.setdefault(tuple(samples[i]), []).append(i)
        engine = self.engine_for(slot, call.engine) if todo else None
        failed: set[str] = set()
        for ks, rows in by_samples.items():
            step = self.chunk_rows(engine)
            for start in range(0, len(rows), step):
                chunk = rows[start:start + step]

                def row_of(r: int, i: int, j: int, k: int, reply: str) -> dict[str, Any]:
                    return {"key": keys[i][j], "id": str(ids[i]), "sample": k, "reply": reply,
                            "question": recorded_question(convs[i]) if r == 0 and j == 0 else None}

                def arrived(r: int, replies: list[str], chunk: list[int] = chunk, ks: tuple[int, ...] = ks) -> None:
                    if len(replies) == len(ks):  # one conversation's samples, persisted as they arrive
                        cache.journal([row_of(r, chunk[r], j, k, replies[j]) for j, k in enumerate(ks)])
                        self.write_requests(every_s=LEDGER_EVERY_S)

                try:
                    with answers_to(engine, arrived):
                        got: list[list[str] | None] = list(self._generate(call, engine, params,
                                                                            [convs[i] for i in chunk], ks))
                except QuestionsFailed as err:
                    got = list(err.answers)
                    for r, why in err.reasons.items():
                        failed.update(keys[chunk[r]])
                        log.warning("stage %s: question of row %s failed: %s", self.name, ids[chunk[r]], why)
                finally:
                    self.write_requests()
                cache.put([row_of(r, i, j, k, answer[j])
                           for r, (i, answer) in enumerate(zip(chunk, got, strict=True)) if answer is not None
                           for j, k in enumerate(ks)])
        return [[None if key in failed else str(cache.get(key)["reply"] or "")  # type: ignore[index]
                 for key in row] for row in keys]

    def _generate(self, call: LLMCall, engine: Any, params: GenerationParams, convs: list[list[ChatMessage]],
                  samples: tuple[int, ...]) -> list[list[str]]:
        """Replies for `samples` of each conversation: all n natively, or one sample index (retries)."""
        self._counters.requests += len(convs) * len(samples)
        label = f"stage {self.name!r}"
        if list(samples) == list(range(params.n)):
            return self.call_engine(label, call.engine, lambda: engine.generate(convs, params))
        (k,) = samples
        one = params.model_copy(update={"n": 1, "seed": None if params.seed is None else params.seed + k})
        return [[r] for r in self.call_engine(label, call.engine, lambda: engine.chat(convs, one))]

    @staticmethod
    def row_variables(call: LLMCall, batch: pa.Table) -> list[dict[str, Any]]:
        missing = [col for col in call.variables.values() if col not in batch.schema.names]
        if missing:
            raise StageError(f"prompt variables {call.variables} need column(s) {missing}; the batch has "
                             f"{batch.schema.names}")
        cols = {var: batch.column(col).to_pylist() for var, col in call.variables.items()}
        return [{var: ("" if v[i] is None else v[i]) for var, v in cols.items()} for i in range(batch.num_rows)]


class answers_to:  # noqa: N801 - used as a context manager, reads as one
    """Point an engine's `on_answer` (HTTP engines: called as each question is answered) at `sink`."""

    def __init__(self, engine: Any, sink: Callable[[int, Any], None]):
        self.engine, self.sink = engine, sink

    def __enter__(self) -> None:
        if hasattr(self.engine, "on_answer"):
            self.engine.on_answer = self.sink

    def __exit__(self, *exc: object) -> None:
        if hasattr(self.engine, "on_answer"):
            self.engine.on_answer = None


__all__ = ["INVALID", "REQUEST_FAILED", "ChoiceOutput", "EngineUnavailableError", "JsonOutput", "LLMCall", "LLMStage",
           "PromptRef", "Reply", "TextOutput"]
