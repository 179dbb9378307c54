"""The CI tier's served roles: the rehearsal's engine double (harness/rehearsal/double.py) behind an
OpenAI-compatible HTTP server, so a served role's stage is still an HTTP client on a CPU worker (the openai
backend, its requests, retries and ledger) while its answers are the double's. Standard library only.

    python -m harness.rehearsal.double_server --port 8001

Answers /v1/models, /v1/chat/completions (n, seed, a json_schema response format) and /v1/completions (top
logprobs of the next token for option scoring; echo for log-likelihoods). It prints `listening on
http://127.0.0.1:<port>` and serves until it is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.rehearsal.double import VERDICT_LETTERS, RehearsalDouble
from transforms.llm.base import EngineConfig, GenerationParams
from transforms.llm.openai_wire import CHOICE_KEY

MODEL = "rehearsal-served"
# the next tokens option scoring may ask about besides the review letters: a classifier's yes (kept) and no
YES_NO = {"예": 0.0, "yes": 0.0, "Yes": 0.0, "아니오": -9.0, "no": -9.0, "No": -9.0}


def params_of(body: dict[str, Any]) -> tuple[GenerationParams, bool]:
    """The request's generation parameters; True when the reply must be wrapped as {"choice": ...}."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    choices, wrapped = None, False
    props = (schema or {}).get("properties") or {}
    if schema and list(props) == [CHOICE_KEY]:
        choices, schema, wrapped = list(props[CHOICE_KEY].get("enum") or []), None, True
    return GenerationParams(max_tokens=int(body.get("max_tokens") or 64), temperature=float(body.get("temperature") or 0),
                            seed=body.get("seed"), n=int(body.get("n") or 1), json_schema=schema,
                            choices=choices), wrapped


def chat_response(double: RehearsalDouble, body: dict[str, Any]) -> dict[str, Any]:
    params, wrapped = params_of(body)
    replies = double.generate([list(body.get("messages") or [])], params)[0]
    if wrapped:
        replies = [json.dumps({CHOICE_KEY: r}, ensure_ascii=False) for r in replies]
    return {"id": "rehearsal", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": i, "message": {"role": "assistant", "content": r}, "finish_reason": "stop"}
                        for i, r in enumerate(replies)],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def completion_response(double: RehearsalDouble, body: dict[str, Any]) -> dict[str, Any]:
    prompt = str(body.get("prompt") or "")
    if body.get("echo"):  # log-likelihood: one token a character, each -1
        logprobs: dict[str, Any] = {"text_offset": list(range(len(prompt))), "token_logprobs": [-1.0] * len(prompt),
                                    "tokens": list(prompt)}
        text = ""
    else:
        letters = double.option_logprobs([prompt], VERDICT_LETTERS)[0]
        top = {**dict(zip(VERDICT_LETTERS, letters, strict=True)), **YES_NO}
        logprobs, text = {"top_logprobs": [top], "tokens": [max(top, key=lambda t: top[t])]}, ""
    return {"id": "rehearsal", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def handler_for(double: RehearsalDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path.rstrip("/").endswith("/chat/completions"):
                self._send(200, chat_response(double, body))
            elif self.path.rstrip("/").endswith("/completions"):
                self._send(200, completion_response(double, body))
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (quiet: the stages keep ledgers)
            return

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="double_server", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    double = RehearsalDouble(EngineConfig(backend="openai", model=MODEL, name="rehearsal-double"))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(double))
    print(f"listening on http://127.0.0.1:{args.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
