"""What a stage asked of an endpoint: requests, retries by cause, questions failed by reason, tokens, latency.

Every HTTP engine keeps one `RequestLedger` (transforms/llm/openai_engine.py fills it, attempt by
attempt). A stage running in Ray actors writes its engines' ledgers to the run's folder
(`runs/<run id>/requests/<index>-<stage>/<pid>-<n>.json`, atomically, after every chunk), so the
driver can sum them when the stage ends, over every actor and every attempt of a resumed run, into
the stage's record in the manifest (`StageRecord.requests`), the console line and the report.

Words: a *question* is one conversation asked; a *request* is one HTTP attempt (a question retried
twice is three requests); a *retry* is a request after the first, counted by the cause of the failure
before it (`http_500`, `http_429`, `timeout`, `connection`); a question *fails* when its retries run
out, with the last cause as its reason, and becomes a rejected row.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RequestLedger:
    endpoint: str
    model: str
    questions: int = 0
    answered: int = 0
    requests: int = 0
    retries: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.model} @ {self.endpoint}"

    def __getstate__(self) -> dict[str, Any]:  # an engine built in the driver travels to its Ray actor
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def attempt(self) -> None:
        with self._lock:
            self.requests += 1

    def answer(self, latency_s: float, usage: dict[str, Any] | None) -> None:
        with self._lock:
            self.answered += 1
            self.latencies_ms.append(round(latency_s * 1000.0, 2))
            usage = usage or {}
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)

    def retry(self, cause: str) -> None:
        with self._lock:
            self.retries[cause] += 1

    def fail(self, reason: str) -> None:
        with self._lock:
            self.failed[reason] += 1

    def raw(self) -> dict[str, Any]:
        with self._lock:
            return {"endpoint": self.endpoint, "model": self.model, "questions": self.questions,
                    "answered": self.answered, "requests": self.requests, "retries": dict(self.retries),
                    "failed": dict(self.failed), "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "latencies_ms": list(self.latencies_ms)}


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least 1
    return ordered[int(rank) - 1]


def summarise(raws: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Raw ledgers (one per engine and process) -> one summary per `model @ endpoint`."""
    merged: dict[str, dict[str, Any]] = {}
    for r in raws:
        key = f"{r['model']} @ {r['endpoint']}"
        m = merged.setdefault(key, {"endpoint": r["endpoint"], "model": r["model"], "questions": 0, "answered": 0,
                                    "requests": 0, "retries": Counter(), "failed": Counter(), "prompt_tokens": 0,
                                    "completion_tokens": 0, "latencies_ms": []})
        for k in ("questions", "answered", "requests", "prompt_tokens", "completion_tokens"):
            m[k] += int(r.get(k, 0))
        m["retries"].update(r.get("retries", {}))
        m["failed"].update(r.get("failed", {}))
        m["latencies_ms"].extend(r.get("latencies_ms", []))
    out: dict[str, dict[str, Any]] = {}
    for key, m in merged.items():
        lat = m.pop("latencies_ms")
        out[key] = {**m, "retries": dict(sorted(m["retries"].items())), "failed": dict(sorted(m["failed"].items())),
                    "retries_total": sum(m["retries"].values()), "failed_total": sum(m["failed"].values()),
                    "latency_ms": {f"p{q}": percentile(lat, q) for q in (50, 90, 99)} | {"max": max(lat, default=None)}}
    return out


_TOKEN = uuid.uuid4().hex[:8]


def write_ledgers(folder: str | Path | None, owner: object, ledgers: list[RequestLedger]) -> None:
    """This process's ledgers of `owner` (a stage) as one JSON file, replaced atomically."""
    from transforms.core.manifest import write_atomic

    if not folder or not ledgers:
        return
    write_atomic(Path(folder) / f"{os.getpid()}-{_TOKEN}-{id(owner):x}.json", json.dumps([lg.raw() for lg in ledgers]))


def read_ledgers(folder: str | Path | None) -> dict[str, dict[str, Any]]:
    """The summaries of every ledger file under `folder` ({} when there is none)."""
    if not folder or not Path(folder).is_dir():
        return {}
    raws: list[dict[str, Any]] = []
    for f in sorted(Path(folder).glob("*.json")):
        try:
            raws.extend(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a file being replaced right now: the next read has it
    return summarise(raws)


def retries_line(requests: dict[str, dict[str, Any]]) -> str:
    """`; 142 requests, 22 retries (http_500 14, http_429 8), 1 failed` for a console line; "" when none retried."""
    total = sum(r.get("retries_total", 0) for r in requests.values())
    failed = sum(r.get("failed_total", 0) for r in requests.values())
    if not total and not failed:
        return ""
    causes: Counter[str] = Counter()
    for r in requests.values():
        causes.update(r.get("retries", {}))
    sent = sum(r.get("requests", 0) for r in requests.values())
    why = ", ".join(f"{c} {n}" for c, n in sorted(causes.items()))
    text = f"{sent:,} requests, {total:,} retries" + (f" ({why})" if why else "")
    return text + (f", {failed:,} question{'s' if failed != 1 else ''} failed" if failed else "")
