"""The endpoint paths against a real OpenAI-compatible HTTP server on 127.0.0.1 with injected faults.

A team's endpoint, as it behaves: HTTP 500, 429 with Retry-After, empty and English replies, slow
replies, a question it never answers, a wrong key, and no server at all. The translation stage
translates real PIQA items (lake/samples) into Thai, a language outside the old hand list, and the
run's accounting (transforms/core/accounting.py) must equal the server's own request log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tests.endpoint_server import Faults, FaultyEndpoint
from transforms.core import columns as C
from transforms.core.accounting import read_ledgers
from transforms.llm.base import EndpointError
from transforms.translate.config import OpenAITranslateConfig
from transforms.translate.stage import TranslateStage

ROOT = Path(__file__).resolve().parents[2]
PIQA = ROOT / "lake" / "samples" / "piqa_valid_minimal_pairs.jsonl"


def piqa_goals(n: int) -> list[str]:
    goals = []
    with PIQA.open(encoding="utf-8") as f:
        for line in f:
            goal = json.loads(line)["goal"].strip()
            if goal and "." not in goal[:-1] and "?" not in goal[:-1] and goal not in goals:
                goals.append(goal)  # one sentence each: one question per row
            if len(goals) == n:
                break
    return goals


def stage_for(ep: FaultyEndpoint, cache: Path | None, **options) -> TranslateStage:
    opts = {"max_retries": 2, "backoff_base": 0.01, "backoff_max": 0.2, "timeout": 0.6, "max_concurrency": 4,
            **options}
    engine = OpenAITranslateConfig(model="team-model", base_url=ep.base_url, api_key_env="TEAM_KEY",
                                   options=opts, cache_dir=str(cache) if cache else None, engine_retries=0,
                                   batch_size=8)
    return TranslateStage(engine=engine, columns=["goal"], source_lang="en", target_lang="th", outputs={"goal": "goal_th"})


def table(goals: list[str]) -> pa.Table:
    return pa.table({C.ID: [f"q{i}" for i in range(len(goals))], "goal": goals})


def test_accounting_equals_the_server_log_under_faults(tmp_path, monkeypatch):
    monkeypatch.setenv("TEAM_KEY", "k-123")
    goals = piqa_goals(40)
    doomed = goals[7]
    faults = Faults(http500_every=9, http429_every=13, empty_every=29, english_every=31, slow_every=17, slow_s=1.0,
                    always_fail={doomed}, key="k-123")
    with FaultyEndpoint(faults) as ep:
        stage = stage_for(ep, tmp_path / "cache")
        stage.record_requests_to(str(tmp_path / "requests"))
        stage.setup()
        out = stage.process(table(goals))
        stage.close()
        log = list(ep.log)
    (acc,) = read_ledgers(tmp_path / "requests").values()
    statuses = [e["status"] for e in log]
    slow_first = [e for e in log if e["slow"]]  # the server replied after the client's timeout
    # every request the server saw is accounted, and nothing else
    assert acc["requests"] == len(log)
    assert acc["questions"] == len({e["question"] for e in log}) == len(goals)
    assert acc["answered"] == statuses.count(200) - len(slow_first)  # a reply after the timeout was not read
    # retries by cause: each 500/429/timeout that was followed by another attempt
    assert acc["retries"].get("http_500", 0) == statuses.count(500) - 1  # the doomed question's last 500
    assert acc["retries"].get("http_429", 0) == statuses.count(429)
    assert acc["retries"].get("timeout", 0) == len(slow_first)
    assert statuses.count(500) > 1 and statuses.count(429) > 0 and slow_first  # the faults really happened
    assert acc["failed"] == {"http_500": 1}
    assert acc["latency_ms"]["p50"] is not None and acc["prompt_tokens"] > 0
    # the doomed question's row is rejected with its reason; the run went on for every other row
    reasons = dict(zip(out.column("goal").to_pylist(), out.column(C.DROP_REASON).to_pylist(), strict=True))
    assert reasons[doomed] == "translation_failed"
    empties = [g for g, r in reasons.items() if r == "translation_empty"]
    assert sum(1 for e in log if not e["question"].count(doomed) and e["status"] == 200) >= len(goals) - 1
    assert all(r is None for g, r in reasons.items() if g != doomed and g not in empties)
    assert empties  # the empty replies became rejected rows, not translations

    # a second run asks nothing that was answered (an empty reply is an answer): only the failed question
    with FaultyEndpoint(Faults(key="k-123")) as ep2:
        again = stage_for(ep2, tmp_path / "cache")
        again.setup()
        out2 = again.process(table(goals))
        again.close()
        assert ep2.questions() == {e["question"] for e in log if doomed in e["question"]} and len(ep2.log) == 1
    reasons2 = out2.column(C.DROP_REASON).to_pylist()
    assert reasons2.count(None) == len(goals) - len(empties) and reasons2.count("translation_empty") == len(empties)


def test_a_wrong_key_stops_at_the_first_request(tmp_path, monkeypatch):
    monkeypatch.setenv("TEAM_KEY", "wrong")
    with FaultyEndpoint(Faults(key="right")) as ep:
        stage = stage_for(ep, tmp_path / "cache")
        stage.record_requests_to(str(tmp_path / "requests"))
        stage.setup()
        with pytest.raises(EndpointError, match="HTTP 401 .not retryable.*TEAM_KEY") as err:
            stage.process(table(piqa_goals(20)))
        assert len(ep.log) == 1 and ep.log[0]["status"] == 401
    assert err.value.cause == "HTTP 401" and "wrong" not in str(err.value)
    (acc,) = read_ledgers(tmp_path / "requests").values()
    assert acc["requests"] == 1 and acc["failed"] == {"http_401": 1}


def test_an_endpoint_that_is_down_stops_at_once(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = FaultyEndpoint()
    ep.base_url = f"http://127.0.0.1:{port}/v1"
    stage = stage_for(ep, None, max_retries=1)
    stage.setup()
    t0 = time.perf_counter()
    with pytest.raises(EndpointError, match="did not answer.*connection error") as err:
        stage.process(table(piqa_goals(20)))
    assert err.value.cause == "connection" and time.perf_counter() - t0 < 5


def test_consecutive_failures_mean_down(tmp_path):
    with FaultyEndpoint(Faults(always_fail={"<text>"})) as ep:
        stage = stage_for(ep, None, max_retries=1, max_consecutive_failures=3)
        stage.setup()
        with pytest.raises(EndpointError, match="looks down: 3 questions failed in a row"):
            stage.process(table(piqa_goals(20)))
        assert len(ep.questions()) == 3 and len(ep.log) == 3 * 2  # asked alone, one at a time, each retried once


KILLED_CLIENT = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.llm.test_endpoint_faults import stage_for, table, piqa_goals
from tests.endpoint_server import FaultyEndpoint
ep = FaultyEndpoint(); ep.base_url = {url!r}
stage = stage_for(ep, Path({cache!r}), max_concurrency=2, timeout=10)
stage.engine.batch_size = 40  # one chunk: without the journal a kill would lose every answer in it
stage.setup()
stage.process(table(piqa_goals(40)))
"""


def test_sigkill_loses_only_the_questions_in_flight(tmp_path, monkeypatch):
    monkeypatch.setenv("TEAM_KEY", "")
    with FaultyEndpoint(Faults(slow_every=1, slow_s=0.15)) as ep:  # h % 1 == 0 never equals 4: see below
        ep.faults.slow_every = 0
        original = ep.answer

        def slow_answer(path, body, auth):  # every answer takes 0.1 s, so the kill lands mid-chunk
            time.sleep(0.1)
            return original(path, body, auth)

        ep.answer = slow_answer  # type: ignore[method-assign]
        script = KILLED_CLIENT.format(root=str(ROOT), url=ep.base_url, cache=str(tmp_path / "cache"))
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.time() + 60
        while sum(e["answered"] for e in ep.log) < 12 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        answered_before = {e["question"] for e in ep.log if e["answered"]}
        assert 12 <= len(answered_before) < 40
        stage = stage_for(ep, tmp_path / "cache", timeout=10)
        stage.setup()
        out = stage.process(table(piqa_goals(40)))
        stage.close()
        # after the kill, at most the requests in flight (max_concurrency 2) are asked again
        assert len(ep.asked_twice_after_answer()) <= 2
        assert ep.questions() == {e["question"] for e in ep.log} and len(ep.questions()) == 40
    assert out.column(C.DROP_REASON).to_pylist() == [None] * 40


def test_a_request_cut_off_mid_send_is_no_question():
    """A client SIGKILLed between its headers and its body asked nothing: the server logs no question for it
    (CI once saw a 41st, empty question logged from such a cut-off request)."""
    with FaultyEndpoint() as ep:
        host, port = ep.server.server_address[:2]
        for head in (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",  # cut inside the headers
                     b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 90\r\n\r\n{\"mess"):
            with socket.create_connection((host, port)) as s:
                s.sendall(head)
            time.sleep(0.2)
        # then a whole request: it is answered, and it is the only question in the log
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "<text>\nMake tea.\n</text>"}]})
        with socket.create_connection((host, port)) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      + f"Content-Length: {len(body.encode())}\r\n\r\n".encode() + body.encode())
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 200") or reply.startswith(b"HTTP/1.1 200"), reply[:80]
        assert [e["question"] for e in ep.log] == ["<text>\nMake tea.\n</text>"]
