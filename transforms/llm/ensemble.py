"""A cascade of LLM classifiers voting on each row (issue 3: unanimous Qwen3-4B / HCX-14B / Qwen3-32B).

Each classifier is (engine config, prompt id, decision rule). A row goes to the classifiers from the
cheapest to the dearest (by `params_b`) and only while the vote is still open: under `unanimous`
the first "no" ends it, under k-of-n the vote ends as soon as k yeses are in or k can no longer be
reached. A verdict comes from comparing the log-probabilities of the answer options (`logprob`:
score = P(positive) normalised over the options, verdict = score >= threshold) or from generating
a short reply and parsing it (`generate`: one retry, then `llm_unparsable`).

Columns per classifier: `ens_<name>_verdict` (bool) and `ens_<name>_score` (float), null when the
classifier was not asked; per row: `ens_pass`, `ens_calls`, `ens_raw_output` (the unparsable
reply), `ens_provenance` (model, prompt id and version of every classifier that was asked), and the
LLM stages' provenance columns `_prompt`, `_model` (the classifiers asked, comma-separated, in the
order asked) and `_gen_params` (a JSON list, one object per classifier asked).

The stage is an `LLMStage` (transforms/llm/stage.py): engines, engine retries and the answer cache
come from the base. Each classifier's answers are cached under `cache_dir/<classifier key>/`, keyed
by the sha256 of the rendered prompt, the model and the mode (not by row id), so a rerun with the
same run id asks no model twice, and the prefilter's teacher run is reused by the ensemble stage.
A member is anything with `ask(stage, ids, texts) -> list[Answer]`; `Classifier` is the LLM one,
`LinearClassifier` (transforms/judge/member.py, `kind: linear`) a supervised one on embeddings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from transforms.core import columns as C
from transforms.core.lake import read_table
from transforms.core.stage import put_column, set_drop_reason
from transforms.judge.member import LinearClassifier
from transforms.llm.answers import match_choice
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.cache import answer_key
from transforms.llm.prompts import PromptTemplate
from transforms.llm.stage import EngineUnavailableError, LLMStage, PromptRef

log = logging.getLogger("piqaforge.ensemble")

UNPARSABLE = "llm_unparsable"
REJECTED_PREFIX = "ensemble_rejected:"
ANSWER_SCHEMA = pa.schema([("key", pa.string()), ("id", pa.string()), ("score", pa.float64()),
                           ("option", pa.string()), ("raw", pa.string()), ("calls", pa.int32())])
__all__ = ["ANSWER_SCHEMA", "Answer", "Classifier", "EngineUnavailableError", "EnsembleClassify", "Vote"]

class Answer(BaseModel):
    score: float | None
    option: str | None
    raw: str | None
    calls: int


class Classifier(BaseModel):
    """An LLM member of the ensemble: asks its prompt of its engine and turns the reply into a verdict."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="Short name for columns and drop reasons; default: the "
                             "engine's short name. Must be unique within the ensemble.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    prompt: str = Field("classify_piqa/ko", description="Prompt id under prompts/ ('id' or 'id@version').")
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

    def load_prompt(self) -> PromptTemplate:
        return PromptRef.model_validate(self.prompt).load()

    def cache_key(self, prompt: PromptTemplate) -> str:
        """The folder of this classifier's answers (one per model, prompt version and mode)."""
        # The threshold is applied on read, so changing it reuses the cached scores.
        ident = json.dumps([self.engine.backend, self.engine.model, self.engine.options, prompt.ref, self.mode,
                            self.max_tokens if self.mode == "generate" else None], sort_keys=True, default=str)
        return f"{self.column_key}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"

    def verdict(self, answer: Answer, prompt: PromptTemplate) -> bool:
        if self.mode == "logprob":
            return answer.score is not None and answer.score >= self.threshold
        return answer.option == prompt.options[0]

    def gen_params(self, retry_temperature: float) -> dict[str, Any]:
        if self.mode == "logprob":
            return {"member": self.short_name, "mode": "logprob"}
        return {"member": self.short_name, "mode": "generate", "temperature": 0.0, "max_tokens": self.max_tokens,
                "n": 1, "seed": 0, "retry": {"temperature": retry_temperature, "seed": 1}}

    # -- asking --------------------------------------------------------------------------------------
    def ask(self, stage: LLMStage, ids: Sequence[str], texts: Sequence[str],
            retry_temperature: float = 0.7) -> list[Answer]:
        """One answer per text, from `stage`'s answer cache or this classifier's engine."""
        prompt = self.load_prompt()
        cache = stage.answer_cache(self.cache_key(prompt), ANSWER_SCHEMA)
        convs = [prompt.render(text=t).messages for t in texts]
        params = self.gen_params(retry_temperature) | {"options": prompt.options}
        keys = [answer_key(c, self.engine, params, 0) for c in convs]
        stage.counters.cache_hits += sum(k in cache for k in keys)
        todo, seen = [], set()
        for j, k in enumerate(keys):  # an equal question on two rows is asked once
            if k not in cache and k not in seen:
                seen.add(k)
                todo.append(j)
        for start in range(0, len(todo), stage.chunk_size):
            chunk = todo[start:start + stage.chunk_size]
            stage.counters.requests += len(chunk)
            fresh = self._answer(stage, prompt, [convs[j] for j in chunk], retry_temperature)
            cache.put([{"key": keys[j], "id": str(ids[j]), **a.model_dump()} for j, a in zip(chunk, fresh, strict=True)])
        return [Answer.model_validate({f: cache.get(k)[f] for f in Answer.model_fields}) for k in keys]  # type: ignore[index]

    def _answer(self, stage: LLMStage, prompt: PromptTemplate, convs: list[list[ChatMessage]],
                retry_temperature: float) -> list[Answer]:
        engine = stage.engine_for(self.short_name, self.engine)
        label = f"classifier {self.short_name!r}"
        if self.mode == "logprob":
            prompts = [engine.render_chat(m) for m in convs]
            lps = stage.call_engine(label, self.engine, lambda: engine.option_logprobs(prompts, prompt.options))
            answers = []
            for row in lps:
                score = _positive_share(row)
                option = None if score is None else prompt.options[int(np.nanargmax(np.asarray(row, float)))]
                answers.append(Answer(score=score, option=option,
                                      raw=None if score is not None else json.dumps(row), calls=1))
            return answers
        params = GenerationParams(max_tokens=self.max_tokens, temperature=0.0)
        replies = stage.call_engine(label, self.engine, lambda: engine.chat(convs, params))
        options = [match_choice(r, prompt.options, prompt.aliases) for r in replies]
        retry = [j for j, o in enumerate(options) if o is None]
        calls = [1] * len(convs)
        if retry:  # a second, sampled try of the same question
            again = GenerationParams(max_tokens=self.max_tokens, temperature=retry_temperature, seed=1)
            second = stage.call_engine(label, self.engine, lambda: engine.chat([convs[j] for j in retry], again))
            for j, reply in zip(retry, second, strict=True):
                calls[j] = 2
                options[j] = match_choice(reply, prompt.options, prompt.aliases)
                replies[j] = reply if options[j] is None else replies[j]
        return [Answer(score=None if o is None else float(o == prompt.options[0]), option=o,
                       raw=None if o is not None else (r or ""), calls=c)
                for o, r, c in zip(options, replies, calls, strict=True)]


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


def _member_kind(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "linear" if kind == "linear" else "llm"


Member = Annotated[Annotated[Classifier, Tag("llm")] | Annotated[LinearClassifier, Tag("linear")],
                   Discriminator(_member_kind)]


class EnsembleClassify(LLMStage):
    name: ClassVar[str] = "ensemble"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = ("ens_pass", "ens_calls", "ens_raw_output", "ens_provenance")

    classifiers: list[Member] = Field(..., min_length=1, description="LLM members and supervised ones "
                                      "(`kind: linear`); asked cheapest first.")
    vote: Vote = Field(default_factory=Vote)
    order: Literal["cost", "config"] = Field("cost", description="cost: cheapest `params_b` first.")
    text_column: str = Field(C.TEXT, description="Column holding the text to classify.")
    retry_temperature: float = Field(0.7, ge=0, description="generate mode: sampling temperature of the retry.")

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
        self.attach_engine(classifier, engine)
        return self

    def ordered(self) -> list[Classifier | LinearClassifier]:
        if self.order == "config":
            return list(self.classifiers)
        return sorted(self.classifiers, key=lambda c: c.cost_order)  # stable: ties keep config order

    def setup(self) -> None:
        # Classifiers on the same model share one loaded engine (the demo runs one small model twice).
        for clf in self.classifiers:
            if isinstance(clf, Classifier):
                self.engine_for(clf.short_name, clf.engine)
            clf.load_prompt()  # fail before the first batch, not in the middle of a run

    # -- the vote ----------------------------------------------------------------------------------
    def output_fields(self) -> list[pa.Field]:
        fields = [pa.field("ens_pass", pa.bool_()), pa.field("ens_calls", pa.int32()),
                  pa.field("ens_raw_output", pa.string()), pa.field("ens_provenance", pa.string())]
        for clf in self.classifiers:
            fields += [pa.field(f"ens_{clf.column_key}_verdict", pa.bool_()),
                       pa.field(f"ens_{clf.column_key}_score", pa.float64())]
        return [*fields, pa.field(C.PROMPT, pa.string()), pa.field(C.MODEL, pa.string()),
                pa.field(C.GEN_PARAMS, pa.string())]

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
        gen: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        verdicts: dict[str, list[bool | None]] = {c.column_key: [None] * n for c in classifiers}
        scores: dict[str, list[float | None]] = {c.column_key: [None] * n for c in classifiers}
        for clf in classifiers:
            open_rows = [i for i in range(n) if outcome[i] is None and reasons[i] is None]
            if not open_rows:
                break
            prompt = clf.load_prompt()
            answers = self.classify(clf, [ids[i] for i in open_rows], [texts[i] for i in open_rows])
            for i, ans in zip(open_rows, answers, strict=True):
                calls[i] += ans.calls
                asked[i].append({"name": clf.short_name, "model": _model_of(clf), "prompt": prompt.id,
                                 "version": prompt.version})
                gen[i].append(clf.gen_params(self.retry_temperature))
                if ans.option is None:
                    reasons[i], raw[i], outcome[i] = UNPARSABLE, ans.raw, False
                    continue
                verdict = clf.verdict(ans, prompt)
                verdicts[clf.column_key][i] = verdict
                scores[clf.column_key][i] = ans.score
                yes[i] += int(verdict)
                no[i] += int(not verdict)
                outcome[i] = vote_outcome(int(yes[i]), int(no[i]), len(classifiers), needed)
                if outcome[i] is False:
                    reasons[i] = REJECTED_PREFIX + clf.short_name
        out = batch
        values: dict[str, Any] = {
            "ens_pass": [o is True for o in outcome], "ens_calls": calls.tolist(), "ens_raw_output": raw,
            "ens_provenance": [json.dumps(a, ensure_ascii=False) for a in asked],
            C.PROMPT: [",".join(f"{a['prompt']}@{a['version']}" for a in row) or None for row in asked],
            C.MODEL: [",".join(a["model"] for a in row) or None for row in asked],
            C.GEN_PARAMS: [json.dumps(g, sort_keys=True) if g else None for g in gen]}
        for clf in self.classifiers:
            values[f"ens_{clf.column_key}_verdict"] = verdicts[clf.column_key]
            values[f"ens_{clf.column_key}_score"] = scores[clf.column_key]
        for f in self.output_fields():
            out = put_column(out, f.name, pa.array(values[f.name], type=f.type))
        return set_drop_reason(out, pa.array(reasons, type=pa.string()))

    def classify(self, clf: Classifier | LinearClassifier, ids: Sequence[str], texts: Sequence[str]) -> list[Answer]:
        """One classifier's answers about some rows (cached ones are not asked again)."""
        self.ensure_setup()
        return clf.ask(self, ids, texts, self.retry_temperature)


def _model_of(clf: Classifier | LinearClassifier) -> str:
    return clf.model_label if isinstance(clf, LinearClassifier) else clf.engine.model


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
