"""The supervised prefilter: a linear judge trained on seed labels gates rows before any LLM sees them.

1. Fit (transforms/judge/linear.py): embed the seed labels, choose the threshold for `target_recall`
   on out-of-fold scores, refit on every seed.
2. Score every row (a Ray actor pool; embeddings go through the disk cache, so a resumed run or the
   seed rows that also sit in the crawl cost nothing).
3. Print the pass rate that threshold implies, before the LLM stage starts. If more rows would pass
   than `llm_budget_rows`, stop and say what the recall costs (`on_over_budget: error`) or raise the
   threshold to the budget and report the lower cross-validated recall (`cap`).

Why this and not distillation from the ensemble (DistilledPrefilter, still available with
`prefilter.mode=distilled`): the local teacher (Gemma 3 270M) cannot tell physical questions apart,
and a prefilter distilled from it learnt its yes-bias (docs/judges.md has the figures).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, note_placement, put_column
from transforms.judge.linear import FittedLinear, LinearJudge, embedder_for, kept_estimate, tier_audit, train
from transforms.judge.rounds import kept_line, learning_curve

log = logging.getLogger("piqaforge.prefilter")
AUDIT = "prefilter_tier_audit"  # the first tier's audit (FittedLinear.score_and_audit), read by decide, dropped by mark


class OverBudgetError(ValueError):
    """The recall asked for would send more rows to the LLMs than the budget allows."""


class SupervisedDrops(DropReason):
    PREFILTER_REJECTED = "prefilter_rejected", "the linear judge scores it under the threshold"


class SupervisedPrefilter(GlobalStage[SupervisedDrops]):
    name: ClassVar[str] = "supervised_prefilter"
    extras: ClassVar[tuple[str, ...]] = ("embed",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = ("prefilter_score",)

    mode: Literal["supervised"] = Field("supervised", description="Linear judge trained on seed labels.")
    judge: LinearJudge = Field(default_factory=LinearJudge, description="Labels, embedder and recall target.")
    llm_budget_rows: int | None = Field(None, ge=1, description="Most rows the LLM stage may get; null: no limit.")
    on_over_budget: Literal["error", "cap"] = Field(
        "error", description="error: stop and say what the recall costs; cap: raise the threshold to the "
        "budget and report the cross-validated recall that leaves.")
    output_dir: str | None = Field(None, description="Where model.json and report.json go (runs/<run_id>/prefilter).")
    embed_cache_dir: str | None = Field(None, description="Disk cache of embeddings (the job sets "
                                        "<lake>/cache/embeddings); unset embeds every text every time.")

    _report: dict[str, Any] = PrivateAttr(default_factory=dict)
    _fitted: FittedLinear | None = PrivateAttr(None)

    @property
    def report(self) -> dict[str, Any]:
        return self._report

    def fit(self) -> FittedLinear:
        fitted = train(self.judge, self.embed_cache_dir)
        # labels imported over several labelling rounds: the judge refitted per round (transforms/judge/rounds.py)
        fitted.cv["label_rounds"] = learning_curve(self.judge, fitted, self.embed_cache_dir)
        return fitted

    def score(self, table: pa.Table, fitted: FittedLinear, embedder: Any = None) -> pa.Table:
        """`prefilter_score`; with views, the minimum over a row's prefix views for the rows whose
        window reaches the threshold (the others keep their window's score: they are rejected anyway)."""
        embedder = embedder or embedder_for(self.judge, self.embed_cache_dir)
        scores, audit = fitted.score_and_audit(table.column(C.TEXT).to_pylist(), embedder, lazy_below=fitted.threshold)
        table = put_column(table, "prefilter_score", pa.array(scores, pa.float64()))
        return put_column(table, AUDIT, pa.array(audit, pa.float64())) if fitted.first_tier is not None else table

    def decide(self, fitted: FittedLinear, scores: np.ndarray, audit: np.ndarray | None = None) -> float:
        """The threshold to apply: the recall one, unless it breaks the budget. Prints the pass rate, and with the
        first tier's `audit` (score's column) what the tier cost on these rows."""
        threshold = fitted.threshold
        passing = int((scores >= threshold).sum())
        cv = fitted.cv
        report: dict[str, Any] = {
            "mode": "supervised", "labels": self.judge.labels_path, "label": self.judge.label, "labels_sha": fitted.labels_sha,
            "seed_rows": cv.get("seed_rows"), "seed_positives": cv.get("positives"),
            "target_recall": self.judge.target_recall, "threshold": threshold,
            "cv_recall": cv.get("recall"), "cv_precision": cv.get("precision"), "cv_auc": cv.get("auc"),
            # 95% Wilson intervals: with a few dozen positives a recall of 0.90 may be anything from ~0.75 up
            "cv_recall_interval": cv.get("recall_interval"), "cv_precision_interval": cv.get("precision_interval"),
            "held_out": cv.get("held_out"), "label_rounds": cv.get("label_rounds") or [],
            "cv_pass_rate_by_source": cv.get("pass_rate_by_source"), "folds": self.judge.folds,
            "embedder": fitted.embedder.model_dump(), "embed_chars": fitted.embed_chars,
            # the first tier's out-of-fold figures, or why it stood aside (`dropped`)
            "first_tier": cv.get("first_tier"),
            "rows": len(scores), "rows_at_target_recall": passing,
            "pass_rate_at_target_recall": passing / len(scores) if len(scores) else None,
            "llm_budget_rows": self.llm_budget_rows, "budget_capped": False}
        if self.llm_budget_rows is not None and passing > self.llm_budget_rows:
            cap = float(np.sort(scores)[::-1][self.llm_budget_rows - 1])
            cap = np.nextafter(cap, np.inf) if (scores >= cap).sum() > self.llm_budget_rows else cap
            recall = fitted.recall_at(cap)
            msg = (f"the prefilter's threshold for recall {self.judge.target_recall:.2f} (cross-validated on "
                   f"{cv.get('positives')} seed positives) passes {passing} of {len(scores)} rows, more than the "
                   f"LLM budget of {self.llm_budget_rows}; within the budget the recall would be {recall:.2f}. "
                   f"Raise prefilter.llm_budget_rows, lower prefilter.judge.target_recall, or set "
                   f"prefilter.on_over_budget=cap to accept the lower recall.")
            if self.on_over_budget == "error":
                self._report = report | {"error": msg}
                self.save(fitted)
                raise OverBudgetError(msg)
            log.warning("prefilter: %s", msg)
            report.update(budget_capped=True, threshold_for_target_recall=threshold, threshold=float(cap),
                          cv_recall_at_threshold=recall)
            threshold = float(cap)
        kept = int((scores >= threshold).sum())
        # the kept set's precision and recall from the labels drawn at random, weighted to this crawl's kept scores
        estimate = kept_estimate(cv.get("samples") or {}, threshold, scores)
        report.update(rows_kept=kept, pass_rate=kept / len(scores) if len(scores) else None, kept_estimate=estimate)
        if audit is not None and fitted.first_tier is not None:
            report["first_tier_audit"] = tier_audit(audit, threshold, kept, fitted.first_tier.config.audit_share)
        self._report, self._fitted = report, fitted
        print(f"prefilter: threshold {threshold:.3f} (cross-validated recall {report.get('cv_recall_at_threshold', cv.get('recall')):.2f}"
              f"{_interval(cv.get('recall_interval'))}, precision {cv.get('precision'):.2f}"
              f"{_interval(cv.get('precision_interval'))}, AUC {cv.get('auc'):.3f} on {cv.get('seed_rows')} seed rows) "
              f"passes {kept} of {len(scores)} rows ({100 * kept / max(len(scores), 1):.1f}%) to the LLM stage",
              file=sys.stderr, flush=True)
        held = cv.get("held_out")
        if held:
            print(f"prefilter: on {held['rows']} held-out labelled rows ({held['positives']} positive): recall "
                  f"{held['recall']:.2f}{_interval(held.get('recall_interval'))}, precision {held['precision']:.2f}"
                  f"{_interval(held.get('precision_interval'))}", file=sys.stderr, flush=True)
        if estimate:
            print(f"prefilter: {kept_line(estimate)}", file=sys.stderr, flush=True)
        if report.get("first_tier_audit"):
            print(f"prefilter: {audit_line(report['first_tier_audit'], fitted.first_tier)}", file=sys.stderr, flush=True)
        for p in report["label_rounds"]:
            print(f"prefilter: labels of rounds <= {p['round']} ({p['labels']} rows): "
                  + (p["error"] if "error" in p else f"out of fold precision {p['cv_precision']:.2f}, recall "
                     f"{p['cv_recall']:.2f}" + (f"; held out precision {p['held_out_precision']:.2f}, recall "
                                                 f"{p['held_out_recall']:.2f}" if p.get("held_out_rows") else "")),
                  file=sys.stderr, flush=True)
        self.save(fitted)
        return threshold

    def mark(self, table: pa.Table, threshold: float) -> pa.Table:
        if AUDIT in table.schema.names:
            table = table.drop_columns([AUDIT])
        keep = pc.greater_equal(table.column("prefilter_score"), pa.scalar(threshold, pa.float64()))
        return self.drop_where(table, pc.invert(keep), SupervisedDrops.PREFILTER_REJECTED)

    def save(self, fitted: FittedLinear) -> None:
        if not self.output_dir:
            return
        out = Path(self.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.json").write_text(fitted.model_dump_json(indent=1), encoding="utf-8")
        (out / "report.json").write_text(json.dumps(self._report, indent=2, default=str), encoding="utf-8")

    # -- in-process path (unit tests, judge-eval) ------------------------------------------------------
    def process_table(self, table: pa.Table) -> pa.Table:
        fitted = self._fitted or self.fit()
        scored = self.score(table, fitted)
        audit = scored.column(AUDIT).to_numpy() if AUDIT in scored.schema.names else None
        return self.mark(scored, self.decide(fitted, scored.column("prefilter_score").to_numpy(), audit))

    # -- Ray path: one fitting task → scoring actors → threshold → marking -----------------------------
    def run_dataset(self, ds: Any) -> Any:
        import ray

        fitted = ray.get(ray.remote(**self.resources.ray_remote_args())(_fit_task).remote(self))
        scored = ds.map_batches(_ScoreActor, fn_constructor_kwargs={"stage": self, "fitted": fitted},
                                concurrency=self.resources.concurrency or 1, batch_format="pyarrow",
                                batch_size=self.resources.batch_size, **self.resources.ray_remote_args())
        scored = scored.materialize()
        read = ["prefilter_score"] + ([AUDIT] if fitted.first_tier is not None else [])
        parts = list(scored.select_columns(read).iter_batches(batch_format="pyarrow", batch_size=None))
        scores = np.concatenate([b.column(0).to_numpy() for b in parts] or [np.zeros(0)])
        audit = (np.concatenate([b.column(1).to_numpy(zero_copy_only=False) for b in parts] or [np.zeros(0)])
                 if fitted.first_tier is not None else None)
        threshold = self.decide(fitted, scores, audit)
        stage = self
        return scored.map_batches(lambda b: stage.mark(b, threshold), batch_format="pyarrow")


def audit_line(audit: dict[str, Any], tier: Any) -> str:
    """The first tier's audit in one line: what it spared, what the judge says of the spared rows it checked."""
    head = (f"the first tier spared {audit['rows_spared']} rows from the embedder; ")
    if not audit["audited"]:
        return head + (f"none was drawn for its check (first_tier.audit_share {audit['audit_share']:g}): what it "
                       f"cost on this crawl is not known")
    line = (head + f"of the {audit['audited']} of them embedded to check, the judge alone keeps "
            f"{audit['judge_would_keep']}: the tier keeps about {audit['recall_vs_judge']:.2f}"
            f"{_interval(audit['recall_vs_judge_interval'])} of the rows the judge alone would keep"
            if audit["recall_vs_judge"] is not None else
            head + f"of the {audit['audited']} of them embedded to check, the judge alone keeps none")
    allowed = max(tier.config.max_recall_loss, 0.01)
    hi = audit["recall_vs_judge_interval"][1] if audit["recall_vs_judge_interval"] else None
    if hi is not None and hi < 1 - allowed:
        line += (f"; more than its max_recall_loss {tier.config.max_recall_loss:g} on this crawl: set "
                 f"first_tier: null to embed every row, or add labelled rows like the spared ones")
    return line


def _interval(bounds: Any) -> str:
    """` [0.75-0.96]`: a 95% Wilson interval as the report prints it ('' without one)."""
    return f" [95% {bounds[0]:.2f}-{bounds[1]:.2f}]" if bounds else ""


def _fit_task(stage: SupervisedPrefilter) -> FittedLinear:
    note_placement(stage.name)  # the fitting task runs with the stage's own resources, as its scoring actors
    return stage.fit()


class _ScoreActor:
    def __init__(self, stage: SupervisedPrefilter, fitted: FittedLinear):
        stage.exit_actor_if_finished()
        note_placement(stage.name)
        self.stage, self.fitted = stage, fitted
        self.embedder = embedder_for(stage.judge, stage.embed_cache_dir)  # loads the model once

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        return self.stage.score(batch, self.fitted, self.embedder)
