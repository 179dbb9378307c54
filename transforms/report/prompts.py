"""Prompts and replies of an LLM stage, for the run report.

The answer cache (transforms/llm/cache.py) stores each reply under a key, the sha256 of the rendered
conversation, the model and the sampling parameters; the first answer of every chunk also records
the question itself (`question`). The report reads those recorded questions from the stage's cache
folder (found from the stage's config in the manifest) and shows them with their replies: exactly
what the model was sent, with nothing rebuilt.

Caches written before questions were recorded have none; for them the report falls back to
rebuilding: it re-renders the stage's prompt with a few of the stage's input rows, computes the key
exactly as the stage does, and shows a prompt only when its key is found (the first attempt; a retry
adds a follow-up turn). If the prompt file or the engine config changed since the run, no key
matches and the report says so.

Two shapes of LLM stage are known: an `LLMCall` (LLMTransform, LLMGenerate: `engine`, `prompt`,
`variables`, `params`, `output` in the config) and a `Classifier` member (the ensemble's
`classifiers`, the cultural tagger's `llm`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core import columns as C
from transforms.core.lake import parquet_files
from transforms.core.manifest import RunManifest, StageRecord
from transforms.report.sampling import cell, sample_zone, seeded

N_INPUT_ROWS = 40        # input rows whose prompts are re-rendered
N_SHOWN = 3              # prompts and replies shown per call
CACHE_FILES_BUDGET = 500  # cache files whose keys are read, at most, per call
MESSAGE_CHARS = 2000


@dataclass
class Asked:
    """One question a stage asked: the conversation, its cache key and the row it came from."""

    row_id: str
    messages: list[dict[str, str]]
    key: str


@dataclass
class CallPlan:
    label: str
    folder: Path
    asked: list[Asked]
    reply_fields: tuple[str, ...]


def _call_plans(rec: StageRecord, inputs: list[dict[str, Any]]) -> list[CallPlan]:
    """Every kind of question the stage's config describes, with the keys of `inputs`' questions."""
    from transforms.llm.cache import answer_key, namespace

    cfg, cache_dir = rec.config, rec.config.get("cache_dir")
    if not cache_dir:
        return []
    plans = []
    if all(k in cfg for k in ("engine", "prompt", "variables", "params", "output")):
        from transforms.llm.call import LLMCall

        call = LLMCall.model_validate({k: cfg[k] for k in LLMCall.model_fields if k in cfg})
        prompt = call.prompt.load()
        params = call.generation_params(prompt)
        key_params = params.model_dump(exclude={"n"})
        asked = []
        for row in inputs:
            variables = {var: ("" if row.get(col) is None else row[col]) for var, col in call.variables.items()}
            messages = prompt.render(**variables).messages
            asked.append(Asked(str(row.get(C.ID)), messages, answer_key(messages, call.engine, key_params, 0)))
        plans.append(CallPlan(f"prompt {prompt.ref} · {call.engine.backend}:{call.engine.model}",
                              Path(cache_dir) / namespace(rec.name, call.engine, prompt.ref), asked, ("reply",)))
    members = [m for m in cfg.get("classifiers") or [] if isinstance(m, dict)]
    if isinstance(cfg.get("llm"), dict):
        members.append(cfg["llm"])
    for member in members:
        if "mode" not in member or "prompt" not in member:
            continue  # a supervised member (kind: linear) asks no LLM
        from transforms.llm.classifier import Classifier

        clf = Classifier.model_validate({k: member[k] for k in Classifier.model_fields if k in member})
        prompt = clf.load_prompt()
        clf_params = clf.gen_params(float(cfg.get("retry_temperature", 0.7))) | {"options": prompt.options}
        column = cfg.get("text_column", C.TEXT)
        asked = []
        for row in inputs:
            for text in _asked_texts(clf, "" if row.get(column) is None else str(row[column])):
                messages = prompt.render(text=text).messages
                asked.append(Asked(str(row.get(C.ID)), messages, answer_key(messages, clf.engine, clf_params, 0)))
        plans.append(CallPlan(f"classifier {clf.short_name} · prompt {prompt.ref} · {clf.mode}",
                              Path(cache_dir) / clf.cache_key(prompt), asked, ("option", "score", "raw")))
    return plans


def _asked_texts(clf: Any, text: str) -> list[str]:
    """What a classifier may have been asked about a row: the text, or the prefix views it reads
    (`views`: first / all; transforms/text/views.py). Each is a candidate; the cache key decides."""
    views = getattr(clf, "views", "whole")
    if views == "whole":
        return [text]
    from transforms.text.views import llm_views

    cut = llm_views(text, clf.view_chars)
    return cut[:1] if views == "first" else list(reversed(cut))


def recorded_answers(folder: Path, want: int, budget: int = CACHE_FILES_BUDGET) -> list[dict[str, Any]]:
    """Up to `want` cached rows that recorded their question, from the first `budget` files."""
    found: list[dict[str, Any]] = []
    for f in parquet_files(folder)[:budget]:
        if "question" not in pq.read_schema(f).names:
            continue
        for row in pq.read_table(f).to_pylist():
            if row.get("question"):
                found.append(row)
                break  # one per file: examples from different chunks
        if len(found) >= want:
            break
    return found


def _recorded_html(rows: list[dict[str, Any]], reply_fields: tuple[str, ...]) -> str:
    items = []
    for row in rows:
        question = json.loads(row["question"])
        if isinstance(question, list) and all(isinstance(m, dict) for m in question):
            messages = question  # a conversation
        elif isinstance(question, list) and len(question) == 2:  # a log-likelihood request
            messages = [{"role": "context", "content": str(question[0])},
                        {"role": "continuation", "content": str(question[1])}]
        else:
            messages = [{"role": "question", "content": str(question)}]
        fields = [f for f in reply_fields if row.get(f) is not None] or ["value"]
        reply = "".join(f"<p><b>{escape(f)}</b>: {cell(row.get(f), MESSAGE_CHARS)}</p>"
                        for f in fields if row.get(f) is not None)
        items.append(f"<div class='llm-example'><p>row <code>{escape(str(row.get('id')))}</code> · cache key "
                     f"<code>{escape(str(row.get('key'))[:16])}</code> · question as recorded</p>"
                     f"{_messages_html(messages)}{reply or '<p><b>reply</b>: (empty)</p>'}</div>")
    return "".join(items)


def _recorded_folders_html(cache_dir: Path) -> str:
    """A stage that asks several models through `Asker`s (the evaluation's predictions): the recorded
    questions of each cache folder (one per model and kind of question)."""
    if not cache_dir.is_dir():
        return ""
    out = []
    for folder in sorted(p for p in cache_dir.iterdir() if p.is_dir()):
        recorded = recorded_answers(folder, N_SHOWN)
        if recorded:
            out.append(f"<h4>{escape(folder.name)}</h4>" + _recorded_html(recorded, ("value",)))
    if not out:
        return ""
    return ("<h3>Prompts and replies</h3><p class='meta'>Questions as the stage recorded them beside its "
            "answers (the first of every cache chunk).</p>" + "".join(out))


def find_answers(folder: Path, keys: set[str], want: int, budget: int = CACHE_FILES_BUDGET
                 ) -> tuple[dict[str, dict[str, Any]], int]:
    """Cached rows whose key is in `keys` (until `want` are found), and how many files were read."""
    found: dict[str, dict[str, Any]] = {}
    files = parquet_files(folder)
    read = 0
    for f in files[:budget]:
        read += 1
        got = pq.read_table(f, columns=["key"]).column(0).to_pylist()
        if keys.intersection(got):
            for row in pq.read_table(f).to_pylist():
                if row["key"] in keys:
                    found.setdefault(row["key"], row)
        if len(found) >= want:
            break
    return found, read


def _messages_html(messages: list[dict[str, str]]) -> str:
    return "".join(f"<p class='meta'>{escape(m.get('role', ''))}</p><pre class='msg'>"
                   f"{cell(m.get('content', ''), MESSAGE_CHARS)}</pre>" for m in messages)


def llm_examples(manifest: RunManifest, rec: StageRecord) -> str:
    """The section of one stage: a few prompts with the model's replies, or why there are none."""
    cfg = rec.config
    if "cache_dir" in cfg and isinstance(cfg.get("engines"), dict) and rec.index > 0:
        return _recorded_folders_html(Path(cfg["cache_dir"])) if cfg.get("cache_dir") else ""
    is_llm = "cache_dir" in cfg and ("prompt" in cfg or "classifiers" in cfg or cfg.get("llm"))
    if not is_llm or rec.index == 0:
        return ""
    if not cfg.get("cache_dir"):
        return ("<p class='meta'>This LLM stage kept its answers in memory only (no <code>cache_dir</code>), "
                "so there are no prompts and replies on disk to show.</p>")
    prev = manifest.stages[rec.index - 1]
    rng = seeded(manifest.run_id, rec.name, "prompts")
    table = sample_zone(Path(prev.outputs["kept"]) if prev.outputs.get("kept") else None, rng, max_files=3)
    if table.num_rows > N_INPUT_ROWS:
        table = table.take(pa.array(sorted(rng.sample(range(table.num_rows), N_INPUT_ROWS)), pa.int64()))
    plans = _call_plans(rec, table.to_pylist())
    out = []
    for plan in plans:
        recorded = recorded_answers(plan.folder, N_SHOWN)
        if recorded:
            out.append(f"<h4>{escape(plan.label)}</h4>" + _recorded_html(recorded, plan.reply_fields))
            continue
        keys = {a.key for a in plan.asked}
        found, read = find_answers(plan.folder, keys, N_SHOWN)
        rows_shown: set[str] = set()
        shown: list[Asked] = []
        for a in plan.asked:  # one question per row (a row asked about several views shows its first)
            if a.key in found and a.row_id not in rows_shown and len(shown) < N_SHOWN:
                rows_shown.add(a.row_id)
                shown.append(a)
        head = f"<h4>{escape(plan.label)}</h4>"
        if not shown:
            out.append(head + f"<p class='meta'>None of the {len(plan.asked)} sampled input rows' re-rendered "
                       f"prompts has an answer in <code>{escape(str(plan.folder))}</code> ({read} cache files "
                       "read): the rows may not have been asked (a cascade stops early), or the prompt file or "
                       "engine config changed since the run.</p>")
            continue
        items = []
        for a in shown:
            answer = found[a.key]
            reply = "".join(f"<p><b>{escape(f)}</b>: {cell(answer.get(f), MESSAGE_CHARS)}</p>"
                            for f in plan.reply_fields if answer.get(f) is not None)
            items.append(f"<div class='llm-example'><p>row <code>{escape(a.row_id)}</code> · cache key "
                         f"<code>{escape(a.key[:16])}</code> found</p>{_messages_html(a.messages)}"
                         f"{reply or '<p><b>reply</b>: (empty)</p>'}</div>")
        out.append(head + "".join(items))
    if not out:
        return ""
    note = ("<p class='meta'>Questions as the stage recorded them beside its answers; for caches written "
            "before questions were recorded, prompts re-rendered from the stage's config and its input rows, "
            "each shown only where its cache key matches the one stored with the answer, i.e. it is exactly "
            "what the model was sent.</p>")
    return "<h3>Prompts and replies</h3>" + note + "".join(out)
