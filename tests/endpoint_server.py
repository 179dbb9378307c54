"""A real OpenAI-compatible HTTP server on 127.0.0.1 with injected faults, and its request log.

It behaves like a team's endpoint: a key from the environment (401 without it), HTTP 500s, 429s with
Retry-After, empty and English replies, slow replies, and questions it never answers. Which question
gets which fault is decided by the question's text (a hash), so a retried or resumed question meets
the same plan. Every request is logged (question, attempt, status) before the reply is sent: the
test compares the run's accounting with this log. Translations are made-up Thai: each English word
becomes one Thai syllable, so fastText's lid.176 reads Thai and a minimal pair stays minimal.

Beyond translation it answers what a recipe's other roles ask, from `correct` (the texts of the correct
solutions, as the test translated them): a review annotator's option scores on /completions (top
logprobs: A when solution 1 is correct, B when solution 2 is), an evaluated model's "1"/"2" on
/chat/completions, and echoed prompt logprobs for log-likelihood scoring. Content faults (empty,
English) are chat replies; HTTP faults hit every path.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_WORD = re.compile(r"[A-Za-z0-9']+")
_THAI_CONS = "กขคงจฉชซญดตถทนบปผพฟมยรลวสหอฮ"
_THAI_VOW = "ะาิีึืุูเแโ"


def thai_word(word: str) -> str:
    h = int(hashlib.sha256(word.lower().encode()).hexdigest(), 16)
    return "".join(_THAI_CONS[(h >> (8 * k)) % len(_THAI_CONS)] + _THAI_VOW[(h >> (8 * k + 4)) % len(_THAI_VOW)]
                   for k in range(2))


def fake_thai(text: str) -> str:
    return " ".join(thai_word(w) for w in _WORD.findall(text)) or "ว่าง"


@dataclass
class Faults:
    """Per question (by text hash h): rate-style faults on the first attempt(s), and always-fail ones."""

    http500_every: int = 0        # h % n == 0: the first attempt answers HTTP 500
    http429_every: int = 0        # h % n == 1: the first attempt answers 429 with Retry-After
    empty_every: int = 0          # h % n == 2: an empty reply (200)
    english_every: int = 0        # h % n == 3: the English text back (200)
    slow_every: int = 0           # h % n == 4: the first attempt sleeps `slow_s` (the client times out)
    slow_s: float = 1.0
    always_fail: set[str] = field(default_factory=set)  # substrings: such questions always get HTTP 500
    status_for_all: int | None = None  # e.g. 401: every request answered with it
    key: str | None = None             # the Bearer key the server wants (401 otherwise)
    correct: set[str] = field(default_factory=set)  # correct solutions' texts: what annotators and models pick


class FaultyEndpoint:
    """`with FaultyEndpoint(faults) as ep:` ... ep.base_url, ep.log (one dict per request)."""

    def __init__(self, faults: Faults | None = None):
        self.faults = faults or Faults()
        self.log: list[dict[str, Any]] = []
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if not length or len(raw) < length:
                    # a client SIGKILLed while it was sending: no question reached the server, so none is logged
                    self.close_connection = True
                    return
                body = json.loads(raw)
                status, payload, headers = outer.answer(self.path, body, self.headers.get("Authorization"))
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the plan -------------------------------------------------------------------------------
    def answer(self, path: str, body: dict[str, Any], auth: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        f = self.faults
        messages = body.get("messages") or [{"content": body.get("prompt", "")}]
        question = messages[-1]["content"]
        h = int(hashlib.sha256(question.encode()).hexdigest(), 16)
        with self._lock:
            self._attempts[question] += 1
            attempt = self._attempts[question]
        status, text, headers = 200, None, {}
        if f.status_for_all is not None:
            status = f.status_for_all
        elif f.key is not None and auth != f"Bearer {f.key}":
            status = 401
        elif any(s in question for s in f.always_fail) or f.http500_every and h % f.http500_every == 0 and attempt == 1:
            status = 500
        elif f.http429_every and h % f.http429_every == 1 and attempt == 1:
            status, headers = 429, {"Retry-After": "0.05"}
        slow = bool(status == 200 and f.slow_every and h % f.slow_every == 4 and attempt == 1)
        chat = path.endswith("chat/completions")
        if status == 200 and chat:
            source = re.search(r"<text>\s*(.*?)\s*</text>", question, re.S)
            english = source.group(1) if source else question
            if f.empty_every and h % f.empty_every == 2:
                text = ""
            elif f.english_every and h % f.english_every == 3:
                text = english
            elif source is None and self.pick(question, r"^1: (.*)$", r"^2: (.*)$") is not None:
                text = str(self.pick(question, r"^1: (.*)$", r"^2: (.*)$"))  # an evaluated model's answer
            else:
                text = fake_thai(english)
        with self._lock:  # logged as it arrives, before a slow reply's wait
            self.log.append({"question": question, "attempt": attempt, "status": status, "path": path,
                             "answered": status == 200 and not slow, "slow": slow})
        if slow:
            time.sleep(f.slow_s)
        if status != 200:
            return status, {"error": {"message": f"injected {status}"}}, headers
        if not chat:
            return 200, self.completion(question, body), headers
        usage = {"prompt_tokens": len(question.split()), "completion_tokens": len(text.split()) if text else 0}
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                     "usage": usage}, headers

    def pick(self, question: str, first: str, second: str) -> int | None:
        """1 or 2: which of the question's two solutions is in `correct` (1 when neither is known)."""
        a, b = (re.search(p, question, re.M) for p in (first, second))
        if a is None or b is None:
            return None
        return 2 if b.group(1).strip() in self.faults.correct and a.group(1).strip() not in self.faults.correct else 1

    def completion(self, prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        """/completions: echoed prompt logprobs (log-likelihood), or the top logprobs of the next token
        (a review annotator's option scores: A for solution 1, B for solution 2)."""
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}
        if body.get("echo"):
            spans = [m.span() for m in re.finditer(r"\S+", prompt)]
            logprobs = {"tokens": [prompt[a:b] for a, b in spans], "text_offset": [a for a, _ in spans],
                        "token_logprobs": [None] + [-1.0 - (i % 3) / 10 for i in range(1, len(spans))]}
            return {"choices": [{"index": 0, "text": "", "logprobs": logprobs}], "usage": usage}
        best = "B" if self.pick(prompt, r"^Solution 1: (.*)$", r"^Solution 2: (.*)$") == 2 else "A"
        top = {o: (-0.05 if o == best else -4.0 - i) for i, o in enumerate("ABCDEF")}
        return {"choices": [{"index": 0, "text": best, "logprobs": {"tokens": [best], "token_logprobs": [top[best]],
                                                                     "top_logprobs": [top]}}], "usage": usage}

    # -- what the log says ----------------------------------------------------------------------
    def statuses(self) -> Counter[int]:
        return Counter(e["status"] for e in self.log)

    def questions(self) -> set[str]:
        return {e["question"] for e in self.log}

    def asked_twice_after_answer(self) -> list[str]:
        """Questions asked again after the server had answered them (what a resume must never do)."""
        answered: set[str] = set()
        again = []
        for e in self.log:
            if e["question"] in answered:
                again.append(e["question"])
            if e["answered"]:
                answered.add(e["question"])
        return again
