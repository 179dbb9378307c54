"""The OpenAI-compatible backend, offline: request/response handling and retries through
httpx.MockTransport, then end to end over real sockets against a small OpenAI-compatible stub
server on 127.0.0.1 that fails its first requests (429/503), stalls (timeouts) and counts how many
requests are in flight. The stub answers with canned text and logprobs; it tests the HTTP client,
not a model (the real-model tests are in test_llm_engines.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from transforms.llm.base import EndpointError, EngineConfig, GenerationParams, QuestionsFailed, build_engine
from transforms.llm.openai_engine import EngineRequestError, OpenAIEngine

SECRET = "sk-test-7f3a9c1e55d2b8aa-do-not-leak"


def make_engine(handler=None, *, transport=None, sleeps=None, **options) -> OpenAIEngine:
    async def fake_sleep(s: float) -> None:
        sleeps.append(s)

    opts = {"base_url": "http://llm.test/v1", "backoff_base": 0.5, "backoff_max": 10.0, **options}
    return OpenAIEngine(EngineConfig(backend="openai", model="served-model", options=opts),
                        transport=transport or httpx.MockTransport(handler),
                        sleep=fake_sleep if sleeps is not None else asyncio.sleep)


def chat_reply(text: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def top_reply(top: dict[str, float]) -> dict:
    return {"choices": [{"text": "x", "logprobs": {"tokens": ["x"], "token_logprobs": [-0.1],
                                                    "top_logprobs": [top]}}]}


# -- request building and parsing ---------------------------------------------------------------
def test_chat_body_and_reply():
    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        seen.append((req.url.path, body))
        return httpx.Response(200, json=chat_reply("답: " + body["messages"][-1]["content"]))

    eng = make_engine(handler)
    conv = [{"role": "system", "content": "s"}, {"role": "user", "content": "김치"}]
    out = eng.chat([conv, [{"role": "user", "content": "b"}]], GenerationParams(max_tokens=5, stop=["\n"]))
    assert out == ["답: 김치", "답: b"]
    path, body = seen[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "served-model" and body["max_tokens"] == 5 and body["stop"] == ["\n"]
    assert body["messages"] == conv


def test_option_logprobs_top_k_matching():
    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        assert req.url.path == "/v1/completions"
        assert body["max_tokens"] == 1 and body["logprobs"] == 20
        return httpx.Response(200, json=top_reply({" yes": -0.2, "no": -1.9, " No": -2.5, "maybe": -3.0}))

    eng = make_engine(handler)
    [row] = eng.option_logprobs(["Q?"], [" yes", " no", " 아니오"])
    assert row[0] == -0.2  # exact text match
    assert row[1] == -1.9  # matched after stripping whitespace (case kept: " No" is another option)
    assert row[2] == -math.inf  # outside the top k
    eng2 = make_engine(handler, missing_logprob=-50.0)
    assert eng2.option_logprobs(["Q?"], ["zzz"]) == [[-50.0]]


def test_loglikelihood_from_echoed_offsets():
    # prompt "The sky is blue": tokens "The", " sky", " is", " blue" (+ one generated token)
    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        assert body["echo"] is True and body["prompt"] == "The sky is blue"
        lp = {"tokens": ["The", " sky", " is", " blue", "."], "token_logprobs": [None, -3.0, -1.0, -0.5, -0.1],
              "text_offset": [0, 3, 7, 10, 15], "top_logprobs": None}
        return httpx.Response(200, json={"choices": [{"text": body["prompt"] + ".", "logprobs": lp}]})

    eng = make_engine(handler)
    got = eng.loglikelihood([("The sky is", " blue"), ("The sky", " is blue"), ("x", "")])
    assert got == [(-0.5, 1), (-1.5, 2), (0.0, 0)]


# -- retries, backoff, errors ---------------------------------------------------------------------
def test_retries_429_and_5xx_with_growing_backoff_then_succeeds():
    statuses = [429, 503, 500]
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(1)
        if statuses:
            return httpx.Response(statuses.pop(0), text="busy")
        return httpx.Response(200, json=chat_reply("ok"))

    sleeps: list[float] = []
    eng = make_engine(handler, sleeps=sleeps, max_retries=5)
    assert eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams()) == ["ok"]
    assert len(calls) == 4 and eng.stats["retries"] == 3
    # exponential with jitter in [0.5, 1] x base * 2^attempt
    for attempt, s in enumerate(sleeps):
        assert 0.5 * 0.5 * 2**attempt <= s <= 0.5 * 2**attempt
    assert sleeps[2] > sleeps[0]


def test_retry_after_header_is_honoured():
    first = [True]

    def handler(req: httpx.Request) -> httpx.Response:
        if first.pop() if first else False:
            return httpx.Response(429, headers={"Retry-After": "7"}, text="slow down")
        return httpx.Response(200, json=chat_reply("ok"))

    sleeps: list[float] = []
    eng = make_engine(handler, sleeps=sleeps)
    eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams())
    assert sleeps == [7.0]


def test_gives_up_with_clear_error():
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="overloaded")

    sleeps: list[float] = []
    eng = make_engine(handler, sleeps=sleeps, max_retries=2)
    # a question whose retries run out fails alone (QuestionsFailed carries the reason), not the call
    with pytest.raises(QuestionsFailed, match=r"completions failed after 3 attempts; last error: HTTP 503") as err:
        eng.option_logprobs(["Q"], ["a"])
    assert err.value.answers == [None] and list(err.value.reasons) == [0]
    assert len(sleeps) == 2
    assert eng.ledger.requests == 3 and dict(eng.ledger.retries) == {"http_503": 2}
    assert dict(eng.ledger.failed) == {"http_503": 1}


def test_timeouts_and_connection_errors_are_retried():
    events = [httpx.ReadTimeout("slow"), httpx.ConnectError("refused")]

    def handler(req: httpx.Request) -> httpx.Response:
        if events:
            raise events.pop(0)
        return httpx.Response(200, json=chat_reply("ok"))

    eng = make_engine(handler, sleeps=[])
    assert eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams()) == ["ok"]
    assert eng.stats["retries"] == 2

    def always_slow(req: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow")

    eng = make_engine(always_slow, sleeps=[], max_retries=1, timeout=2.5)
    # never answered, by timeouts: the endpoint is down and the stage stops (EndpointError)
    with pytest.raises(EndpointError, match="did not answer.*timed out after 2.5 s") as err:
        eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams())
    assert err.value.cause == "timeout"


def test_client_errors_are_not_retried():
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(400, json={"error": "bad model"})

    eng = make_engine(handler, sleeps=[])
    # a refused question (400) fails alone, unretried; a wrong model or URL (404) stops the engine
    with pytest.raises(QuestionsFailed, match="HTTP 400 .not retryable.*bad model"):
        eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams())
    assert len(calls) == 1
    eng = make_engine(lambda req: (calls.append(1), httpx.Response(404, json={"error": "no such model"}))[1],
                      sleeps=[])
    with pytest.raises(EngineRequestError, match="HTTP 404 .not retryable.*base_url and the model name"):
        eng.chat([[{"role": "user", "content": "hi"}]] * 5, GenerationParams())
    assert len(calls) == 2


# -- the API key ----------------------------------------------------------------------------------
def test_api_key_only_from_env_and_never_leaked(monkeypatch, caplog):
    monkeypatch.setenv("MY_LLM_KEY", SECRET)
    seen_auth = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen_auth.append(req.headers.get("authorization"))
        if len(seen_auth) == 1:
            return httpx.Response(503, text="retry me")
        if len(seen_auth) == 3:
            return httpx.Response(401, text="invalid key")
        return httpx.Response(200, json=chat_reply("ok"))

    caplog.set_level(logging.DEBUG)
    eng = make_engine(handler, sleeps=[], api_key_env="MY_LLM_KEY")
    eng.setup()
    assert eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams()) == ["ok"]
    assert seen_auth[0] == f"Bearer {SECRET}"  # the key is sent...
    with pytest.raises(EngineRequestError) as err:
        eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams())
    assert "MY_LLM_KEY" in str(err.value)
    # ...and appears nowhere else
    for text in (repr(eng), str(eng), eng.config.model_dump_json(), eng.options.model_dump_json(),
                 repr(vars(eng)), str(err.value), caplog.text):
        assert SECRET not in text
    assert "retry" in caplog.text  # the retry was logged, without the key


def test_require_api_key(monkeypatch):
    monkeypatch.delenv("ABSENT_KEY_VAR", raising=False)
    eng = make_engine(lambda r: httpx.Response(200), api_key_env="ABSENT_KEY_VAR", require_api_key=True)
    with pytest.raises(EngineRequestError, match="ABSENT_KEY_VAR is not set"):
        eng.setup()
    # the key cannot be put in the config, and the refusal does not echo it
    with pytest.raises(ValueError, match="unknown option.*api_key") as err:
        OpenAIEngine(EngineConfig(backend="openai", options={"api_key": SECRET}))
    assert SECRET not in str(err.value)


# -- concurrency ----------------------------------------------------------------------------------
def test_concurrency_bound_respected():
    state = {"now": 0, "max": 0}

    async def handler(req: httpx.Request) -> httpx.Response:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.02)
        state["now"] -= 1
        return httpx.Response(200, json=top_reply({"a": -0.5}))

    eng = make_engine(handler, max_concurrency=3)
    out = eng.option_logprobs([f"q{i}" for i in range(12)], ["a"])
    assert out == [[-0.5]] * 12
    assert state["max"] == 3


def test_sync_api_works_inside_a_running_event_loop():
    eng = make_engine(lambda r: httpx.Response(200, json=chat_reply("ok")))

    async def caller() -> list[str]:
        return eng.chat([[{"role": "user", "content": "hi"}]], GenerationParams())

    assert asyncio.run(caller()) == ["ok"]


def test_build_engine_by_backend_tag():
    eng = build_engine(EngineConfig(backend="openai", model="m", options={"base_url": "http://x/v1"}))
    assert isinstance(eng, OpenAIEngine) and eng.options.base_url == "http://x/v1"
    assert eng.render_chat([{"role": "user", "content": "a"}]) == "a"
    tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<model>{% endif %}"
    eng = build_engine(EngineConfig(backend="openai", options={"chat_template": tmpl}))
    assert eng.render_chat([{"role": "user", "content": "a"}]) == "<user>a<model>"


# -- end to end against a local OpenAI-compatible stub server -----------------------------------
def stub_tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


def stub_logprob(token: str) -> float:
    return -0.25 * len(token.strip())


class StubServer:
    """Tiny OpenAI-compatible server: canned replies, injected failures, stalls, in-flight count."""

    def __init__(self, fail_statuses=(), stall_first: float = 0.0, work: float = 0.0):
        self.fail = list(fail_statuses)
        self.stall_first = stall_first
        self.work = work
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = self.requests = 0
        self.auth: list[str | None] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.requests += 1
                    n = stub.requests
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    stub.auth.append(self.headers.get("Authorization"))
                    status = stub.fail.pop(0) if stub.fail else 200
                try:
                    if n == 1 and stub.stall_first:
                        time.sleep(stub.stall_first)
                    time.sleep(stub.work)
                    if status != 200:
                        self._send(status, {"error": {"message": "try later"}}, {"Retry-After": "0"})
                    else:
                        self._send(200, stub.answer(self.path, body))
                finally:
                    with stub.lock:
                        stub.in_flight -= 1

            def _send(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, path: str, body: dict) -> dict:
        if path == "/v1/chat/completions":
            return chat_reply("echo: " + body["messages"][-1]["content"])
        assert path == "/v1/completions", path
        prompt = body["prompt"]
        if body.get("echo"):
            toks = stub_tokens(prompt)
            offsets, pos = [], 0
            for t in toks:
                offsets.append(pos)
                pos += len(t)
            lps = [None] + [stub_logprob(t) for t in toks[1:]]
            return {"choices": [{"text": prompt + " ok", "logprobs": {
                "tokens": [*toks, " ok"], "token_logprobs": [*lps, -0.1],
                "text_offset": [*offsets, pos], "top_logprobs": None}}]}
        last = stub_tokens(prompt)[-1].strip()
        return top_reply({" yes": -0.1 if last.endswith("?") else -2.0, " no": -1.0})

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def live_engine(url: str, **options) -> OpenAIEngine:
    opts = {"base_url": url, "backoff_base": 0.05, "backoff_max": 0.5, "timeout": 5.0, **options}
    return OpenAIEngine(EngineConfig(backend="openai", model="stub", options=opts))


def test_live_stub_retries_429_503_end_to_end(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with StubServer(fail_statuses=[429, 503, 503]) as stub:
        eng = live_engine(stub.base_url, max_concurrency=1)
        t0 = time.perf_counter()
        out = eng.chat([[{"role": "user", "content": "안녕"}]], GenerationParams())
        elapsed = time.perf_counter() - t0
        assert out == ["echo: 안녕"]
        assert stub.requests == 4 and eng.stats["retries"] == 3
        assert elapsed >= 0.5 * 0.05 * (1 + 2 + 4)  # the backoff really slept
        assert set(stub.auth) == {f"Bearer {SECRET}"}


def test_live_stub_gives_up_after_retries():
    with StubServer(fail_statuses=[503] * 10) as stub:
        eng = live_engine(stub.base_url, max_retries=2)
        with pytest.raises(QuestionsFailed, match="after 3 attempts; last error: HTTP 503"):
            eng.option_logprobs(["q?"], [" yes"])
        assert stub.requests == 3 == eng.ledger.requests


def test_live_stub_timeout_is_retried():
    with StubServer(stall_first=1.5) as stub:
        eng = live_engine(stub.base_url, timeout=0.4)
        out = eng.option_logprobs(["is it?", "it is"], [" yes", " no", " maybe"])
        assert out == [[-0.1, -1.0, -math.inf], [-2.0, -1.0, -math.inf]]
        assert eng.stats["retries"] == 1


def test_live_stub_loglikelihood_and_concurrency():
    requests = [(f"문맥 {i} 은", f" 계속 {'가' * i}") for i in range(1, 11)]
    with StubServer(work=0.05) as stub:
        eng = live_engine(stub.base_url, max_concurrency=4)
        got = eng.loglikelihood(requests)
        assert 2 <= stub.max_in_flight <= 4
    for (_ctx, cont), (ll, n) in zip(requests, got, strict=True):
        toks = stub_tokens(cont)
        assert n == len(toks)
        assert ll == pytest.approx(sum(stub_logprob(t) for t in toks))


# -- structured output and native n ------------------------------------------------------------------
def capture(replies):
    """A handler that records request bodies and answers with `replies(body)` (a list of texts)."""
    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        seen.append(body)
        texts = replies(body)
        return httpx.Response(200, json={"choices": [{"index": i, "message": {"role": "assistant", "content": t}}
                                                     for i, t in reversed(list(enumerate(texts)))]})
    return handler, seen


SCHEMA = {"type": "object", "properties": {"goal": {"type": "string"}}, "required": ["goal"],
          "additionalProperties": False}


def test_json_schema_goes_as_response_format():
    handler, seen = capture(lambda b: ['{"goal": "x"}'])
    out = make_engine(handler).chat([[{"role": "user", "content": "q"}]], GenerationParams(json_schema=SCHEMA))
    assert out == ['{"goal": "x"}']
    assert seen[0]["response_format"] == {"type": "json_schema",
                                          "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True}}
    assert "structured_outputs" not in seen[0] and "n" not in seen[0]


def test_choice_goes_as_an_enum_object_and_comes_back_unwrapped():
    handler, seen = capture(lambda b: ['{"choice": "아니오"}'])
    out = make_engine(handler).chat([[{"role": "user", "content": "q"}]], GenerationParams(choices=["예", "아니오"]))
    assert out == ["아니오"]
    schema = seen[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["choice"]["enum"] == ["예", "아니오"] and schema["required"] == ["choice"]
    # a server that ignored the format: the text goes to the stage as is (it validates)
    handler, _ = capture(lambda b: ["예, 맞아요"])
    assert make_engine(handler).chat([[{"role": "user", "content": "q"}]],
                                     GenerationParams(choices=["예", "아니오"])) == ["예, 맞아요"]


def test_vllm_server_structured_outputs_extra_body():
    handler, seen = capture(lambda b: ["예"])
    eng = make_engine(handler, structured_outputs="vllm")
    eng.chat([[{"role": "user", "content": "q"}]], GenerationParams(choices=["예", "아니오"]))
    eng.chat([[{"role": "user", "content": "q"}]], GenerationParams(json_schema=SCHEMA))
    assert seen[0]["structured_outputs"] == {"choice": ["예", "아니오"]}
    assert seen[1]["structured_outputs"] == {"json": SCHEMA}
    assert all("response_format" not in b for b in seen)
    off, seen_off = capture(lambda b: ["x"])
    make_engine(off, structured_outputs="off").chat([[{"role": "user", "content": "q"}]],
                                                   GenerationParams(json_schema=SCHEMA))
    assert "response_format" not in seen_off[0] and "structured_outputs" not in seen_off[0]


def test_native_n_one_request_per_conversation_replies_in_index_order():
    handler, seen = capture(lambda b: [f"{b['messages'][0]['content']}-{k}" for k in range(b.get("n", 1))])
    eng = make_engine(handler)
    out = eng.generate([[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                       GenerationParams(n=3, temperature=0.9, seed=11))
    assert out == [["a-0", "a-1", "a-2"], ["b-0", "b-1", "b-2"]]
    assert len(seen) == 2 and all(b["n"] == 3 and b["seed"] == 11 for b in seen)


def test_llm_stage_over_the_openai_engine():
    """The LLM stage base on the HTTP engine: the schema of the json output reaches the request."""
    import pyarrow as pa

    from transforms.core import columns as C
    from transforms.llm.output import JsonOutput
    from transforms.llm.transform import LLMTransform

    def replies(body):
        text = body["messages"][-1]["content"]
        return ['{"physical": true}' if "bread" in text else '{"physical": "maybe"}']

    handler, seen = capture(replies)
    config = EngineConfig(backend="openai", model="served-model", options={"base_url": "http://llm.test/v1"})
    stage = LLMTransform(engine=config, prompt="classify_piqa/en", output=JsonOutput(fields={"physical": "bool"}))
    stage.use_engine(make_engine(handler))
    out = stage(pa.table({C.ID: ["a", "b"], C.TEXT: ["keep bread fresh", "a poem"]}))
    assert out.column("physical").to_pylist() == [True, None]
    assert out.column(C.DROP_REASON).to_pylist() == [None, "invalid_output"]
    sent = seen[0]["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["physical"]["type"] == "boolean" and sent["additionalProperties"] is False
