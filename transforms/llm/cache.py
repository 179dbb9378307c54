"""The answer cache of the LLM stages: what a model said, keyed by what it was asked.

The key is the sha256 of the rendered conversation, the model (backend, name and the options that
can change an answer), the sampling parameters (without `n`) and the sample index. It is *not* the
row id: a transform that rewrites a row's text must not get the old text's answer, and two rows that
render the same prompt share one answer. Changing `n` from 3 to 5 keeps samples 0-2.

The first answer of every chunk also records its question (`question`: the conversation as JSON), so
the run report shows what the model was asked without rebuilding it (transforms/report/prompts.py);
one in a chunk keeps the cache small (a whole conversation per answer would multiply its size).

Answers live in `<cache_dir>/<namespace>/*.parquet`, one namespace per (stage part, model, prompt),
so a stage loads only its own. Files are append-only and each is written under a hidden name and
renamed (`transforms.core.rowcache`): a process killed with -9 leaves no half file, and concurrent
actors never write the same file. When two actors answer the same question, the first file wins.

An engine that answers question by question (the HTTP engines) hands each answer over as it arrives
(`journal`): it is appended as one JSON line to this process's `journal-*.jsonl` at once, so a
SIGKILL loses only the questions still in flight; the chunk's Parquet file replaces the journal when
the chunk ends. Loading reads both (a torn last line is skipped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.core import rowcache
from transforms.llm.base import ChatMessage, EngineConfig

log = logging.getLogger("piqaforge.llm")

# Engine options that change speed or placement, never the answer: left out of the key.
THROUGHPUT_OPTIONS = frozenset({
    "device", "batch_size", "max_batch_tokens", "gen_batch_size", "prefix_cache", "min_prefix_tokens", "threads",
    "base_url", "api_key_env", "require_api_key", "max_concurrency", "max_retries", "backoff_base",
    "backoff_max", "timeout", "tensor_parallel_size", "gpu_memory_utilization", "enforce_eager", "n_threads",
})


def engine_identity(engine: EngineConfig) -> dict[str, Any]:
    options = {k: v for k, v in sorted(engine.options.items()) if k not in THROUGHPUT_OPTIONS}
    return {"backend": engine.backend, "model": engine.model, "options": options}


def answer_key(messages: list[ChatMessage] | str, engine: EngineConfig, params: dict[str, Any], sample: int) -> str:
    """sha256 of (rendered prompt, model, params without n, sample index)."""
    params = {k: v for k, v in params.items() if k != "n"}
    blob = json.dumps([messages, engine_identity(engine), params, sample], sort_keys=True, ensure_ascii=False,
                      default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def recorded_question(question: list[ChatMessage] | str | Any) -> str:
    """The question as stored beside its answer: the conversation (or text) as JSON."""
    return json.dumps(question, ensure_ascii=False)


def namespace(label: str, engine: EngineConfig, prompt_ref: str) -> str:
    """Folder name: a readable label and 12 hex digits of (model, prompt id@version)."""
    ident = json.dumps([engine_identity(engine), prompt_ref], sort_keys=True, default=str)
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", label).strip("_").lower() or "llm"
    return f"{slug}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


@dataclass
class Counters:
    """What a stage asked of its engines in this process; tests read it (second run: 0 calls)."""

    engine_calls: int = 0  # engine method invocations (one per chunk, plus retries)
    requests: int = 0      # replies (conversations x samples) or scores asked of an engine
    cache_hits: int = 0    # replies served from the answer cache

    def as_dict(self) -> dict[str, int]:
        return {"engine_calls": self.engine_calls, "requests": self.requests, "cache_hits": self.cache_hits}


class AnswerCache:
    """One namespace of answers in memory, backed by append-only Parquet files (or nothing)."""

    def __init__(self, folder: str | Path | None, schema: pa.Schema):
        if "key" not in schema.names:
            raise ValueError("an answer cache schema needs a `key` column")
        self.folder = Path(folder) if folder else None
        self.schema = schema
        self._rows: dict[str, dict[str, Any]] = {}
        self._journaled: list[dict[str, Any]] = []
        self._journal: Path | None = None
        if self.folder is not None:
            table = rowcache.load(self.folder)
            if table.num_rows:
                for row in table.to_pylist():
                    self._rows.setdefault(row["key"], row)  # the first answer written wins
            for path in sorted(self.folder.glob("journal-*.jsonl")):
                for row in _journal_rows(path):
                    self._rows.setdefault(row["key"], row)
            if self._rows:
                log.info("answer cache %s: %d answers", self.folder.name, len(self._rows))

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def get(self, key: str) -> dict[str, Any] | None:
        return self._rows.get(key)

    def journal(self, rows: list[dict[str, Any]]) -> None:
        """Remember `rows` now and append them to this process's journal (one JSON line each, written
        before this returns): answers that arrive one by one survive a kill before the chunk ends."""
        fresh = [r for r in rows if r["key"] not in self._rows]
        for r in fresh:
            self._rows[r["key"]] = r
        if self.folder is None or not fresh:
            return
        self._journaled.extend(fresh)
        if self._journal is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._journal = self.folder / f"journal-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        with self._journal.open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fresh))
            f.flush()

    def put(self, rows: list[dict[str, Any]]) -> None:
        """Remember `rows` and write them, with what was journaled, as one file; the journal goes."""
        fresh = self._journaled
        self._journaled = []
        for r in rows:
            if r["key"] not in self._rows:
                self._rows[r["key"]] = r
                fresh.append(r)
        if self.folder is not None and fresh:
            rowcache.append(self.folder, pa.Table.from_pylist(fresh, schema=self.schema))
        if self._journal is not None:
            self._journal.unlink(missing_ok=True)
            self._journal = None


def _journal_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the line a kill cut short
        if isinstance(row, dict) and "key" in row:
            rows.append(row)
    return rows
