"""`openai` backend: any OpenAI-compatible HTTP endpoint (a vLLM server, a hosted API).

* chat / generate  -> POST {base_url}/chat/completions (the server applies the chat template); one
                      request per conversation, `n` samples natively (`n` in the body, one seed).
                      Structured output (`structured_outputs` option): `response_format` sends a
                      json_schema response format (OpenAI; vLLM servers accept it too), a `choices`
                      constraint as a schema {"choice": enum} whose value is returned; `vllm` sends a
                      vLLM server's `structured_outputs` extra body ({"json": ...} or {"choice": ...});
                      `off` sends neither (the stage validates replies either way).
* option_logprobs  -> POST {base_url}/completions, max_tokens=1, logprobs=top_logprobs: an option's
                      score is the log-probability of the top-k token whose text equals it (exactly,
                      else after stripping whitespace); an option outside the top k gets
                      `missing_logprob` (default -inf). Options that are several tokens long need
                      `option_scoring: echo`, which scores every option with `loglikelihood`.
* loglikelihood    -> POST {base_url}/completions, echo=True, max_tokens=1, logprobs=1: the prompt
                      is context+continuation and the continuation is the tokens whose character
                      offset is at or after len(context) (a token straddling the boundary counts as
                      context, so end contexts on a word boundary).

Requests run concurrently on one httpx.AsyncClient per call, bounded by a semaphore, and are
retried on 429, 5xx, timeouts and connection errors with exponential backoff and jitter (honouring
Retry-After). Every attempt is accounted in `self.ledger` (transforms/core/accounting.py). A question
whose retries run out does not stop the call: the others are answered and `QuestionsFailed` carries
them with each failed question's reason, so the stage rejects only those rows. The engine's first
question is sent alone: a wrong key, model or URL (401, 403, 404, 400) or an endpoint that does not
answer costs one question and stops the stage (`EndpointError`), as does a later non-retryable status
or an endpoint that looks down (`max_consecutive_failures` questions failed in a row, or a failure
rate over `max_failure_rate` after `failure_rate_min_questions`). `on_answer(i, value)`, when set,
is called as each question is answered, so callers persist answers as they arrive. The API key is read from the environment variable named by `api_key_env` when a call
starts and is only ever placed in the Authorization header: it is not stored on the engine, not
logged and not put in error messages. The HTTP transport is injectable (`transport=`), so tests
drive the client with httpx.MockTransport or a local stub server.

One module over 300 lines because it is one responsibility: the HTTP client's request loop, retries,
ledger and failure judgement share the engine's state; the pure wire format is in openai_wire.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.accounting import RequestLedger
from transforms.llm.base import (
    ChatMessage,
    EndpointError,
    EngineConfig,
    GenerationParams,
    LLMEngine,
    QuestionsFailed,
)
from transforms.llm.openai_wire import (  # noqa: F401 (CHOICE_KEY re-exported)
    CHOICE_KEY,
    EngineRequestError,
    chat_body,
    continuation_logprob,
    reply_text,
    retry_after_seconds,
)
from transforms.llm.prompts import compile_template

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
ENDPOINT_REFUSES = {401, 403, 404}  # a wrong key, no access, a wrong URL or model name: stop at the first one


class _Failed:
    """One question whose retries ran out: its reason (`http_500`, `timeout`...) and the last error."""

    def __init__(self, reason: str, detail: str):
        self.reason, self.detail = reason, detail


class OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field("http://127.0.0.1:8000/v1", description="Endpoint root, including /v1.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    require_api_key: bool = Field(False, description="Fail at setup when the key variable is unset "
                                  "(a local vLLM server needs none).")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight at once.")
    max_retries: int = Field(5, ge=0, description="Retries per request after the first attempt.")
    backoff_base: float = Field(0.5, ge=0, description="First retry delay in seconds; doubles each retry.")
    backoff_max: float = Field(30.0, ge=0, description="Cap on one retry delay (and on Retry-After).")
    timeout: float = Field(60.0, gt=0, description="Seconds per request (connect, read, write).")
    top_logprobs: int = Field(20, ge=1, le=20, description="Top tokens returned for option scoring.")
    missing_logprob: float = Field(float("-inf"), description="Score of an option outside the top k.")
    option_scoring: Literal["top_logprobs", "echo"] = Field(
        "top_logprobs", description="top_logprobs: one request per prompt, single-token options; "
        "echo: one loglikelihood request per (prompt, option), exact for multi-token options.")
    chat_template: str | None = Field(None, description="Jinja chat template used by render_chat "
                                      "(the server applies its own in chat()); unset: plain text.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Merged into every request body.")
    max_consecutive_failures: int = Field(5, ge=1, description="Questions failed in a row (after their "
                                          "retries) at which the endpoint counts as down and the stage stops.")
    max_failure_rate: float = Field(0.5, gt=0, le=1, description="Share of failed questions at which the "
                                    "endpoint counts as down (once `failure_rate_min_questions` were asked).")
    failure_rate_min_questions: int = Field(20, ge=1, description="Questions asked before the failure rate "
                                            "is judged.")
    structured_outputs: Literal["response_format", "vllm", "off"] = Field(
        "response_format", description="How json_schema/choices constraints are sent: OpenAI's response_format, "
        "a vLLM server's structured_outputs extra body, or not at all.")


class OpenAIEngine(LLMEngine):
    def __init__(self, config: EngineConfig, *, transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        super().__init__(config)
        unknown = sorted(set(config.options) - set(OpenAIOptions.model_fields))
        if unknown:  # said without the values: a misplaced API key must not end up in a traceback
            raise ValueError(f"unknown option(s) for the openai backend: {unknown}; the API key is read "
                             f"from the environment variable named by `api_key_env`")
        self.options = OpenAIOptions(**config.options)
        if not os.environ.get("PIQAFORGE_VERBOSE"):  # httpx logs every request at INFO: thousands of console
            logging.getLogger("httpx").setLevel(logging.WARNING)  # lines; the ledger counts them (-v shows them)
        self._transport = transport
        self._sleep = sleep
        self.stats = {"requests": 0, "retries": 0}
        self.ledger = RequestLedger(self.options.base_url, config.model)
        self.on_answer: Callable[[int, Any], None] | None = None
        self._probed = False
        self._in_a_row = 0

    def __repr__(self) -> str:
        return (f"OpenAIEngine(model={self.config.model!r}, base_url={self.options.base_url!r}, "
                f"api_key_env={self.options.api_key_env!r})")

    def setup(self) -> None:
        if self.options.require_api_key and not os.environ.get(self.options.api_key_env):
            raise EngineRequestError(
                f"the API key variable {self.options.api_key_env} is not set in the environment")

    # -- public API ----------------------------------------------------------------------------
    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [replies[0] for replies in self.generate(conversations, params.model_copy(update={"n": 1}))]

    def generate(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[list[str]]:
        mode = self.options.structured_outputs

        def texts(r: dict[str, Any]) -> list[str]:
            return [reply_text(c, params, mode) for c in sorted(r["choices"], key=lambda c: c.get("index", 0))]

        return self._post_all("chat/completions", [chat_body(c, params, mode) for c in conversations], texts)

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        if self.options.option_scoring == "echo":
            k = len(options)
            try:
                flat: list[Any] = list(self.loglikelihood([(p, o) for p in prompts for o in options]))
                reasons: dict[int, str] = {}
            except QuestionsFailed as err:  # a prompt fails when one of its options failed
                flat, reasons = err.answers, {j // k: why for j, why in err.reasons.items()}
            scores = [None if i in reasons else [ll for ll, _ in flat[i * k:(i + 1) * k]] for i in range(len(prompts))]
            if reasons:
                raise QuestionsFailed(scores, reasons, self.endpoint)
            return scores  # type: ignore[return-value]
        bodies = [{"prompt": p, "max_tokens": 1, "temperature": 0.0, "logprobs": self.options.top_logprobs}
                  for p in prompts]
        return self._post_all("completions", bodies, lambda r: self._match_options(r, options))

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        todo = [i for i, (_, cont) in enumerate(requests) if cont]
        bodies = [{"prompt": requests[i][0] + requests[i][1], "max_tokens": 1, "temperature": 0.0,
                   "echo": True, "logprobs": 1} for i in todo]
        results: list[Any] = [(0.0, 0)] * len(requests)
        try:
            responses: list[Any] = self._post_all("completions", bodies, lambda r: r, stream=False)
            reasons: dict[int, str] = {}
        except QuestionsFailed as err:  # the answered ones scored, the failed ones None with their reason
            responses, reasons = err.answers, {todo[j]: why for j, why in err.reasons.items()}
        for i, r in zip(todo, responses, strict=True):
            ctx, cont = requests[i]
            results[i] = None if r is None else continuation_logprob(r, len(ctx), len(ctx) + len(cont))
        if reasons:
            raise QuestionsFailed(results, reasons, self.endpoint)
        return results

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        if self.options.chat_template is None:
            return "\n\n".join(m["content"] for m in conversation)
        return compile_template(self.options.chat_template).render(
            messages=conversation, add_generation_prompt=True, bos_token="")

    # -- option matching -----------------------------------------------------------------------
    def _match_options(self, response: dict[str, Any], options: Sequence[str]) -> list[float]:
        lp = response["choices"][0].get("logprobs") or {}
        tops = lp.get("top_logprobs") or [{}]
        top: dict[str, float] = tops[0] or {}
        if not lp.get("top_logprobs") and lp.get("content"):
            # llama.cpp's server (and the chat API's shape): a list per generated token, each with a list of
            # {token, logprob} alternatives, instead of the completions API's token -> logprob map
            top = {}
            for alt in lp["content"][0].get("top_logprobs") or []:
                top[str(alt.get("token"))] = max(float(alt.get("logprob")), top.get(str(alt.get("token")), -1e30))
        scores = []
        for opt in options:
            exact = top.get(opt)
            if exact is None:
                loose = [v for t, v in top.items() if t.strip() == opt.strip()]
                exact = max(loose) if loose else None
            scores.append(float(exact) if exact is not None else self.options.missing_logprob)
        return scores

    # -- HTTP ----------------------------------------------------------------------------------
    def _post_all(self, path: str, bodies: list[dict[str, Any]], convert: Callable[[dict[str, Any]], T],
                  stream: bool = True) -> list[T]:
        """`convert(response)` per body, in order; QuestionsFailed when some questions failed for good
        (the answered ones in it), EndpointError when the endpoint refuses or looks down."""
        if not bodies:
            return []
        results: list[Any] = [None] * len(bodies)
        start = 0
        while not self._probed and start < len(bodies):  # questions alone until one is answered: a wrong
            _run_sync(self._post_all_async(path, bodies[start:start + 1], convert, results, start, stream))
            start += 1                                    # key or URL costs one question, not a batch
        if start < len(bodies):
            _run_sync(self._post_all_async(path, bodies[start:], convert, results, start, stream))
        failed = {i: r for i, r in enumerate(results) if isinstance(r, _Failed)}
        if failed:
            raise QuestionsFailed([None if i in failed else r for i, r in enumerate(results)],
                                  {i: f"{f.reason}: {f.detail}" for i, f in failed.items()}, self.endpoint)
        return results

    @property
    def endpoint(self) -> str:
        return f"{self.options.base_url.rstrip('/')} ({self.config.model})"

    async def _post_all_async(self, path: str, bodies: list[dict[str, Any]], convert: Callable[[dict[str, Any]], Any],
                              results: list[Any], offset: int, stream: bool) -> None:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.options.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        del key
        sem = asyncio.Semaphore(self.options.max_concurrency)
        base = self.options.base_url.rstrip("/") + "/"
        async with httpx.AsyncClient(base_url=base, headers=headers, transport=self._transport,
                                     timeout=self.options.timeout) as client:
            async def one(i: int, body: dict[str, Any]) -> None:
                full = {"model": self.config.model, **self.options.extra_body, **body}
                async with sem:
                    got = await self._post_with_retries(client, path, full)
                if isinstance(got, _Failed):
                    results[offset + i] = got
                    self._judge(got)
                    return
                value = convert(got)
                results[offset + i] = value
                self._in_a_row = 0
                if stream and self.on_answer is not None:
                    self.on_answer(offset + i, value)

            try:
                async with asyncio.TaskGroup() as group:  # the first error cancels the requests in flight
                    for i, b in enumerate(bodies):
                        group.create_task(one(i, b))
            except BaseExceptionGroup as group_error:
                errors = list(_leaves(group_error))
                raise next((e for e in errors if isinstance(e, EndpointError)), errors[0]) from None

    def _judge(self, failed: _Failed) -> None:
        """After a question failed for good: is the endpoint down?"""
        opts, ledger = self.options, self.ledger
        self._in_a_row += 1
        asked = ledger.questions
        rate = sum(ledger.failed.values()) / asked if asked else 0.0
        where = f"{opts.base_url.rstrip('/')}"
        if not ledger.answered and failed.reason in ("timeout", "connection"):
            raise EndpointError(f"the endpoint {where} did not answer: {failed.detail}", endpoint=where,
                                cause=failed.reason)
        if self._in_a_row >= opts.max_consecutive_failures:
            raise EndpointError(f"the endpoint {where} looks down: {self._in_a_row} questions failed in a row "
                                f"(max_consecutive_failures {opts.max_consecutive_failures}); last: {failed.detail}",
                                endpoint=where, cause=failed.reason)
        if asked >= opts.failure_rate_min_questions and rate > opts.max_failure_rate:
            raise EndpointError(f"the endpoint {where} looks down: {rate:.0%} of {asked} questions failed "
                                f"(max_failure_rate {opts.max_failure_rate:g}); last: {failed.detail}",
                                endpoint=where, cause=failed.reason)

    async def _post_with_retries(self, client: httpx.AsyncClient, path: str,
                                 body: dict[str, Any]) -> dict[str, Any] | _Failed:
        opts, ledger = self.options, self.ledger
        attempts = opts.max_retries + 1
        where = f"{opts.base_url.rstrip('/')}/{path}"
        last, cause = "", ""
        with ledger._lock:
            ledger.questions += 1
        for attempt in range(attempts):
            self.stats["requests"] += 1
            ledger.attempt()
            retry_after: float | None = None
            started = time.perf_counter()
            try:
                resp = await client.post(path, json=body)
            except httpx.TimeoutException:
                last, cause = f"timed out after {opts.timeout:g} s", "timeout"
            except httpx.TransportError as err:
                last, cause = f"connection error ({type(err).__name__})", "connection"
            else:
                if resp.status_code < 400:
                    data: dict[str, Any] = resp.json()
                    ledger.answer(time.perf_counter() - started, data.get("usage"))
                    self._probed = True
                    return data
                detail = " ".join(resp.text[:200].split())
                if resp.status_code not in RETRY_STATUS and resp.status_code not in ENDPOINT_REFUSES:
                    ledger.fail(f"http_{resp.status_code}")  # this question is refused (too long, bad input): it
                    return _Failed(f"http_{resp.status_code}",  # fails alone, asking again would not help
                                   f"POST {where} answered HTTP {resp.status_code} (not retryable): {detail}")
                if resp.status_code not in RETRY_STATUS:
                    hint = (f"; check the key in ${opts.api_key_env}" if resp.status_code in (401, 403)
                            else "; check base_url and the model name" if resp.status_code in (400, 404) else "")
                    ledger.fail(f"http_{resp.status_code}")
                    raise EngineRequestError(f"POST {where} answered HTTP {resp.status_code} (not retryable){hint}: "
                                        f"{detail}", endpoint=opts.base_url.rstrip("/"),
                                        cause=f"HTTP {resp.status_code}")
                last, cause = f"HTTP {resp.status_code}: {detail}", f"http_{resp.status_code}"
                retry_after = retry_after_seconds(resp.headers.get("retry-after"))
            if attempt + 1 == attempts:
                break
            delay = min(opts.backoff_max, opts.backoff_base * 2**attempt) * random.uniform(0.5, 1.0)
            if retry_after is not None:
                delay = max(delay, min(retry_after, opts.backoff_max))
            self.stats["retries"] += 1
            ledger.retry(cause)
            log.warning("POST /%s: %s; retry %d/%d in %.2f s", path, last.split(":")[0], attempt + 1,
                        opts.max_retries, delay)
            await self._sleep(delay)
        ledger.fail(cause)
        return _Failed(cause, f"POST {where} failed after {attempts} attempts; last error: {last}")


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def _run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine from sync code, also when the caller already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)  # type: ignore[arg-type]
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
