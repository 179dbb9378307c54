"""A cascade of LLM classifiers voting on each row (issue 3: unanimous Qwen3-4B / HCX-14B / Qwen3-32B).

Each classifier is (engine config, prompt id, decision rule). A row goes to the classifiers from the
cheapest to the dearest (by `params_b`) and only while the vote is still open: under `unanimous`
the first "no" ends it, under k-of-n the vote ends as soon as k yeses are in or k can no longer be
reached. A verdict comes from comparing the log-probabilities of the answer options (`logprob`:
score = P(positive) normalised over the options, verdict = score >= threshold) or from generating
a short reply and parsing it (`generate`: one retry, then `llm_unparsable`).

Columns per classifier: `ens_<name>_verdict` (bool) and `ens_<name>_score` (float), null when the
classifier was not asked; per row: `ens_pass`, `ens_calls`, `ens_raw_output` (the unparsable
reply) and `ens_provenance` (model, prompt id and version of every classifier that was asked).

Resuming: every answer is appended to a verdict cache (Parquet under `cache_dir`, keyed by row id,
model and prompt version), so a rerun with the same run id does not ask a model twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from transforms.core import columns as C
from transforms.core import rowcache
from transforms.core.lake import read_table
from transforms.core.stage import Stage, put_column, set_drop_reason
from transforms.llm.base import EngineConfig, GenerationParams, LLMEngine, build_engine
from transforms.llm.prompts import PromptTemplate, load_prompt

log = logging.getLogger("piqaforge.ensemble")

UNPARSABLE = "llm_unparsable"
REJECTED_PREFIX = "ensemble_rejected:"


class EngineUnavailableError(RuntimeError):
    """An engine kept failing after its retries; the stage stops with what to do next."""


class Classifier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="Short name for columns and drop reasons; default: the "
                             "engine's short name. Must be unique within the ensemble.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    prompt: str = Field("classify_piqa/ko", description="Prompt id under prompts/.")
    mode: Literal["logprob", "generate"] = Field(
        "logprob", description="logprob: compare the options' log-probabilities; generate: parse a reply.")
    threshold: float = Field(0.5, ge=0, le=1, description="logprob mode: yes when P(positive option) >= this.")
    max_tokens: int = Field(8, ge=1, description="generate mode: reply length cap.")

    @property
    def short_name(self) -> str:
        return self.name or self.engine.short_name

    @property
    def column_key(self) -> str:
        return re.sub(r"[^0-9a-zA-Z]+", "_", self.short_name).strip("_").lower()

    @property
    def cost_order(self) -> float:
        return self.engine.params_b if self.engine.params_b is not None else math.inf

    def cache_key(self, prompt: PromptTemplate) -> str:
        # The threshold is applied on read, so changing it reuses the cached scores.
        ident = json.dumps([self.engine.backend, self.engine.model, self.engine.options, prompt.ref, self.mode,
                            self.max_tokens if self.mode == "generate" else None], sort_keys=True, default=str)
        return f"{self.column_key}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


class Vote(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: Literal["unanimous", "majority", "k_of_n"] = Field("unanimous", description="How verdicts combine.")
    k: int | None = Field(None, ge=1, description="k_of_n: yes votes needed.")

    def needed(self, n: int) -> int:
        if self.rule == "unanimous":
            return n
        if self.rule == "majority":
            return n // 2 + 1
        if self.k is None or self.k > n:
            raise ValueError(f"k_of_n needs 1 <= k <= {n} (the number of classifiers), got k={self.k}")
        return self.k


def vote_outcome(yes: int, no: int, n: int, needed: int) -> bool | None:
    """True once `needed` yeses are in, False once they can no longer be reached, else None (ask on)."""
    if yes >= needed:
        return True
    if no > n - needed:
        return False
    return None


class Answer(BaseModel):
    score: float | None
    option: str | None
    raw: str | None
    calls: int


class EnsembleClassify(Stage):
    name: ClassVar[str] = "ensemble"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = ("ens_pass", "ens_calls", "ens_raw_output", "ens_provenance")
    stateful: ClassVar[bool] = True

    classifiers: list[Classifier] = Field(..., min_length=1)
    vote: Vote = Field(default_factory=Vote)
    order: Literal["cost", "config"] = Field("cost", description="cost: cheapest `params_b` first.")
    text_column: str = Field(C.TEXT, description="Column holding the text to classify.")
    chunk_size: int = Field(16, ge=1, description="Rows per engine call (and per cache flush).")
    engine_retries: int = Field(2, ge=0, description="Retries of a failing engine call before giving up.")
    retry_backoff_s: float = Field(2.0, ge=0)
    retry_temperature: float = Field(0.7, ge=0, description="generate mode: sampling temperature of the retry.")
    cache_dir: str | None = Field(None, description="Verdict cache (set by the job to runs/<run_id>/cache/"
                                  "ensemble); unset disables resuming.")

    _engines: dict[str, LLMEngine] = PrivateAttr(default_factory=dict)
    _cache: dict[str, dict[str, Answer]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> EnsembleClassify:
        keys = [c.column_key for c in self.classifiers]
        if len(set(keys)) != len(keys):
            raise ValueError(f"classifier names must be unique (after normalising), got {keys}; set `name`.")
        self.vote.needed(len(self.classifiers))
        return self

    # -- engines -----------------------------------------------------------------------------------
    def use_engine(self, classifier: str, engine: LLMEngine) -> EnsembleClassify:
        """Inject an engine for one classifier (tests, or sharing a loaded model between stages)."""
        self._engines[classifier] = engine
        return self

    def ordered(self) -> list[Classifier]:
        if self.order == "config":
            return list(self.classifiers)
        return sorted(self.classifiers, key=lambda c: c.cost_order)  # stable: ties keep config order

    def setup(self) -> None:
        # Classifiers on the same model share one loaded engine (the demo runs one small model twice).
        shared: dict[str, LLMEngine] = {}
        for clf in self.classifiers:
            if clf.short_name in self._engines:
                continue
            key = json.dumps([clf.engine.backend, clf.engine.model, clf.engine.options], sort_keys=True, default=str)
            if key not in shared:
                engine = build_engine(clf.engine)
                engine.setup()
                shared[key] = engine
            self._engines[clf.short_name] = shared[key]
        for clf in self.classifiers:
            load_prompt(clf.prompt)  # fail before the first batch, not in the middle of a run
        self._load_cache()

    # -- the vote ----------------------------------------------------------------------------------
    def output_fields(self) -> list[pa.Field]:
        fields = [pa.field("ens_pass", pa.bool_()), pa.field("ens_calls", pa.int32()),
                  pa.field("ens_raw_output", pa.string()), pa.field("ens_provenance", pa.string())]
        for clf in self.classifiers:
            fields += [pa.field(f"ens_{clf.column_key}_verdict", pa.bool_()),
                       pa.field(f"ens_{clf.column_key}_score", pa.float64())]
        return fields

    def process_empty(self, batch: pa.Table) -> pa.Table:
        for f in self.output_fields():
            batch = put_column(batch, f.name, pa.array([], type=f.type))
        return batch

    def process(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        ids = [str(x) for x in batch.column(C.ID).to_pylist()]
        texts = ["" if t is None else str(t) for t in batch.column(self.text_column).to_pylist()]
        classifiers = self.ordered()
        needed = self.vote.needed(len(classifiers))
        yes = np.zeros(n, dtype=np.int32)
        no = np.zeros(n, dtype=np.int32)
        calls = np.zeros(n, dtype=np.int32)
        outcome: list[bool | None] = [None] * n
        reasons: list[str | None] = [None] * n
        raw: list[str | None] = [None] * n
        asked: list[list[dict[str, str]]] = [[] for _ in range(n)]
        verdicts: dict[str, list[bool | None]] = {c.column_key: [None] * n for c in classifiers}
        scores: dict[str, list[float | None]] = {c.column_key: [None] * n for c in classifiers}
        for clf in classifiers:
            open_rows = [i for i in range(n) if outcome[i] is None and reasons[i] is None]
            if not open_rows:
                break
            prompt = load_prompt(clf.prompt)
            answers = self.classify(clf, [ids[i] for i in open_rows], [texts[i] for i in open_rows])
            for i, ans in zip(open_rows, answers, strict=True):
                calls[i] += ans.calls
                asked[i].append({"name": clf.short_name, "model": clf.engine.model, "prompt": prompt.id,
                                 "version": prompt.version})
                if ans.option is None:
                    reasons[i], raw[i], outcome[i] = UNPARSABLE, ans.raw, False
                    continue
                verdict = (ans.score is not None and ans.score >= clf.threshold) if clf.mode == "logprob" \
                    else ans.option == prompt.options[0]
                verdicts[clf.column_key][i] = verdict
                scores[clf.column_key][i] = ans.score
                yes[i] += int(verdict)
                no[i] += int(not verdict)
                outcome[i] = vote_outcome(int(yes[i]), int(no[i]), len(classifiers), needed)
                if outcome[i] is False:
                    reasons[i] = REJECTED_PREFIX + clf.short_name
        out = batch
        values: dict[str, Any] = {"ens_pass": [o is True for o in outcome], "ens_calls": calls.tolist(),
                                  "ens_raw_output": raw,
                                  "ens_provenance": [json.dumps(a, ensure_ascii=False) for a in asked]}
        for clf in self.classifiers:
            values[f"ens_{clf.column_key}_verdict"] = verdicts[clf.column_key]
            values[f"ens_{clf.column_key}_score"] = scores[clf.column_key]
        for f in self.output_fields():
            out = put_column(out, f.name, pa.array(values[f.name], type=f.type))
        return set_drop_reason(out, pa.array(reasons, type=pa.string()))

    # -- one classifier on some rows -----------------------------------------------------------------
    def classify(self, clf: Classifier, ids: Sequence[str], texts: Sequence[str]) -> list[Answer]:
        self.ensure_setup()
        prompt = load_prompt(clf.prompt)
        key = clf.cache_key(prompt)
        cache = self._cache.setdefault(key, {})
        todo = [j for j, row_id in enumerate(ids) if row_id not in cache]
        for start in range(0, len(todo), self.chunk_size):
            chunk = todo[start:start + self.chunk_size]
            fresh = self._ask(clf, prompt, [texts[j] for j in chunk])
            for j, ans in zip(chunk, fresh, strict=True):
                cache[ids[j]] = ans
            self._append_cache(key, [ids[j] for j in chunk], fresh)
        return [cache[row_id] for row_id in ids]

    def _ask(self, clf: Classifier, prompt: PromptTemplate, texts: list[str]) -> list[Answer]:
        engine = self._engines[clf.short_name]
        rendered = [prompt.render(text=t).messages for t in texts]
        if clf.mode == "logprob":
            prompts = [engine.render_chat(m) for m in rendered]
            lps = self._call(clf, lambda: engine.option_logprobs(prompts, prompt.options))
            answers = []
            for row in lps:
                score = _positive_share(row)
                option = None if score is None else prompt.options[int(np.nanargmax(np.asarray(row, float)))]
                answers.append(Answer(score=score, option=option,
                                      raw=None if score is not None else json.dumps(row), calls=1))
            return answers
        params = GenerationParams(max_tokens=clf.max_tokens, temperature=0.0)
        replies = self._call(clf, lambda: engine.chat(rendered, params))
        options = [prompt.parse(r) for r in replies]
        retry = [j for j, o in enumerate(options) if o is None]
        calls = [1] * len(texts)
        if retry:
            again = GenerationParams(max_tokens=clf.max_tokens, temperature=self.retry_temperature, seed=1)
            second = self._call(clf, lambda: engine.chat([rendered[j] for j in retry], again))
            for j, reply in zip(retry, second, strict=True):
                calls[j] = 2
                options[j] = prompt.parse(reply)
                replies[j] = reply if options[j] is None else replies[j]
        return [Answer(score=None if o is None else float(o == prompt.options[0]), option=o,
                       raw=None if o is not None else (r or ""), calls=c)
                for o, r, c in zip(options, replies, calls, strict=True)]

    def _call(self, clf: Classifier, fn: Any) -> Any:
        for attempt in range(self.engine_retries + 1):
            try:
                return fn()
            except Exception as err:  # engines raise many kinds (HTTP, CUDA OOM, dead actor)
                if attempt == self.engine_retries:
                    where = f" Answers so far are cached in {self.cache_dir}; rerun with --resume <run_id> " \
                            f"to continue without asking again." if self.cache_dir else ""
                    raise EngineUnavailableError(
                        f"classifier {clf.short_name!r} ({clf.engine.backend}:{clf.engine.model}) failed "
                        f"{attempt + 1} times: {type(err).__name__}: {err}.{where}") from err
                wait = self.retry_backoff_s * 2**attempt
                log.warning("classifier %s: %s; retrying in %.1fs", clf.short_name, err, wait)
                time.sleep(wait)
        raise AssertionError("unreachable")

    # -- the verdict cache ---------------------------------------------------------------------------
    def _load_cache(self) -> None:
        if not self.cache_dir:
            return
        root = Path(self.cache_dir)
        for clf in self.classifiers:
            key = clf.cache_key(load_prompt(clf.prompt))
            table = rowcache.load(root / key)
            if table.num_rows == 0:
                continue
            cache = self._cache.setdefault(key, {})
            for row in table.to_pylist():
                cache[row["id"]] = Answer(score=row["score"], option=row["option"], raw=row["raw"],
                                          calls=row["calls"])
            log.info("ensemble cache: %d answers of %s reused", len(cache), clf.short_name)

    def _append_cache(self, key: str, ids: list[str], answers: list[Answer]) -> None:
        if not self.cache_dir or not ids:
            return
        rowcache.append(Path(self.cache_dir) / key, pa.table({
            "id": pa.array(ids, pa.string()),
            "score": pa.array([a.score for a in answers], pa.float64()),
            "option": pa.array([a.option for a in answers], pa.string()),
            "raw": pa.array([a.raw for a in answers], pa.string()),
            "calls": pa.array([a.calls for a in answers], pa.int32())}))


def _positive_share(logprobs: Sequence[float]) -> float | None:
    """P(first option) normalised over the options; None when no option has a finite log-probability."""
    arr = np.asarray(logprobs, dtype=np.float64)
    if arr.size == 0 or not np.isfinite(arr).any():
        return None
    arr = np.where(np.isfinite(arr), arr, -np.inf)
    p = np.exp(arr - arr.max())
    return float(p[0] / p.sum())


def summarise_run(*paths: Path) -> dict[str, Any]:
    """Rows, LLM calls and pass rate of an ensemble stage, from its kept + rejected Parquet files."""
    rows = calls = passed = 0
    per_reason: dict[str, int] = {}
    for path in paths:
        table = read_table(path)
        if table.num_rows == 0 or "ens_calls" not in table.column_names:
            continue
        rows += table.num_rows
        calls += int(np.asarray(table.column("ens_calls").to_pylist(), dtype=np.int64).sum())
        passed += sum(bool(x) for x in table.column("ens_pass").to_pylist())
        for reason in table.column(C.DROP_REASON).to_pylist():
            if reason and (reason.startswith(REJECTED_PREFIX) or reason == UNPARSABLE):
                per_reason[reason] = per_reason.get(reason, 0) + 1
    return {"rows": rows, "llm_calls": calls, "calls_per_row": calls / rows if rows else None,
            "passed": passed, "pass_rate": passed / rows if rows else None, "rejected": per_reason}
