"""A cascade of classifiers (LLMs and supervised linear ones) voting on each row; a row the vote does not pass
is dropped (`ensemble_rejected`).

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

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.lake import read_table
from transforms.core.stage import put_column
from transforms.judge.member import LinearClassifier
from transforms.llm.base import LLMEngine
from transforms.llm.classifier import ANSWER_SCHEMA, Answer, Classifier, _positive_share
from transforms.llm.stage import EngineUnavailableError, LLMStage

log = logging.getLogger("piqaforge.ensemble")


class EnsembleDrops(DropReason):
    ENSEMBLE_REJECTED = ("ensemble_rejected",
                         "the classifiers did not all vote for it (ensemble_rejected:<the classifier that said no>)")
    LLM_UNPARSABLE = "llm_unparsable", "a classifier's answer could not be read as a verdict"


UNPARSABLE = EnsembleDrops.LLM_UNPARSABLE
REJECTED_PREFIX = f"{EnsembleDrops.ENSEMBLE_REJECTED}:"
__all__ = ["ANSWER_SCHEMA", "Answer", "Classifier", "EngineUnavailableError", "EnsembleClassify", "Vote",
           "_positive_share"]
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


class EnsembleClassify(LLMStage[EnsembleDrops]):
    name: ClassVar[str] = "ensemble"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = ("ens_pass", "ens_calls", "ens_raw_output", "ens_provenance")

    classifiers: list[Member] = Field(..., min_length=1, description="LLM members and supervised ones "
                                      "(`kind: linear`); asked cheapest first.")
    vote: Vote = Field(default_factory=Vote, description="How the classifiers' verdicts combine (rule: unanimous, majority or k_of_n with k).")
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

    def use_engine_factory(self, make: Any) -> EnsembleClassify:
        """Every LLM member's engine from `make(member_name, engine_config)` (the orchestrator's engine
        factory: test doubles, or engines shared between stages); a factory returning None leaves one as is."""
        for member in self.classifiers:
            if hasattr(member, "engine") and member.name and (engine := make(member.name, member.engine)) is not None:
                self.attach_engine(member.name, engine)
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
        reasons: list[EnsembleDrops | tuple[EnsembleDrops, str] | None] = [None] * n
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
                    reasons[i] = (EnsembleDrops.ENSEMBLE_REJECTED, clf.short_name)
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
        return self.drop(out, reasons)

    def classify(self, clf: Classifier | LinearClassifier, ids: Sequence[str], texts: Sequence[str]) -> list[Answer]:
        """One classifier's answers about some rows (cached ones are not asked again)."""
        self.ensure_setup()
        return clf.ask(self, ids, texts, self.retry_temperature)


def _model_of(clf: Classifier | LinearClassifier) -> str:
    return clf.model_label if isinstance(clf, LinearClassifier) else clf.engine.model


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
