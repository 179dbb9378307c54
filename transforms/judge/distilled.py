"""The distilled prefilter (`prefilter.mode: distilled`): a cheap prefilter distilled from the LLM
ensemble, so the ensemble only sees likely positives. The default mode is `supervised`
(transforms/judge/gate.py); transforms/judge/prefilter.py holds the `Prefilter` config type.

1. Draw a fixed-seed random sample of the rows (`sample_size`) and run the ensemble on it.
2. Embed the sample (multilingual USE by default) and fit a logistic regression to the ensemble's
   verdict on a training part; on the held-out part choose the highest threshold whose recall
   against the ensemble is at least `target_recall`.
3. Score every row; rows under the threshold get `prefilter_rejected`, except sampled rows the
   ensemble already passed (known positives are never thrown away).

Why distil instead of training once on English PIQA: a multilingual-USE + LR model trained on
English PIQA goals vs general questions reached only AUC 0.76 on real Korean KiN questions (issue 3),
so the prefilter is fitted per crawl, on the crawl's own rows, against the verdict it must predict.

The fitted model is a weight vector, saved as JSON (`model.json`) with `report.json` beside it under
`output_dir` (the job sets runs/<run_id>/prefilter). The ensemble's answers on the sample land in its
verdict cache, so sampled rows that pass the prefilter cost nothing in the ensemble stage.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from transforms.core import columns as C
from transforms.core import rowcache
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, note_placement, put_column
from transforms.embed.base import Embedder, EmbedderConfig
from transforms.judge.ensemble import EnsembleClassify
from transforms.llm.distil_fit import (
    FittedPrefilter,
    fit_prefilter,
    recall_and_pass_rate,
    sample_indices,
    sample_keys,
)

log = logging.getLogger("piqaforge.prefilter")



# -- the stage ---------------------------------------------------------------------------------------
class PrefilterDrops(DropReason):
    PREFILTER_REJECTED = "prefilter_rejected", "the distilled prefilter scores it under the threshold"


DROP = PrefilterDrops.PREFILTER_REJECTED  # the name transforms/judge/prefilter.py re-exports


class DistilledPrefilter(GlobalStage[PrefilterDrops]):
    name: ClassVar[str] = "distilled_prefilter"
    extras: ClassVar[tuple[str, ...]] = ("embed",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = ("prefilter_score", "prefilter_sampled", "prefilter_known_positive")

    mode: Literal["distilled"] = Field("distilled", description="Learn the ensemble's verdict on a sample.")
    teacher: EnsembleClassify | None = Field(
        None, description="The ensemble whose verdict the prefilter learns (the job passes its ensemble stage).")
    sample_size: int = Field(200, ge=2, description="Rows the ensemble labels for distillation.")
    seed: int = Field(0, description="Sampling and split seed.")
    holdout_fraction: float = Field(0.4, gt=0, lt=1, description="Part of the sample held out to set the threshold.")
    target_recall: float = Field(0.98, gt=0, le=1, description="Recall against the ensemble on the held-out part.")
    min_per_class: int = Field(4, ge=2, description="Fewest positives and negatives the sample must hold.")
    on_degenerate: Literal["error", "pass_all"] = Field(
        "error", description="When the sample is (nearly) one class: stop, or keep every row.")
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig, description="The student's embedder (backend, model, batch size).")
    embed_chars: int = Field(256, ge=16, description="Text is cut to this many characters before embedding.")
    max_pass_rate: float | None = Field(
        None, gt=0, le=1, description="Budget cap: pass at most this share of rows to the ensemble. When the "
        "recall threshold would pass more, it rises and the report records the lower held-out recall.")
    output_dir: str | None = Field(None, description="Where model.json and report.json go (runs/<run_id>/prefilter).")
    cache_dir: str | None = Field(None, description="Score cache (the job sets runs/<run_id>/cache/prefilter): a "
                                  "resumed run embeds only the rows it has no score for; unset disables it.")

    _fitted: FittedPrefilter | None = PrivateAttr(None)
    _report: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def report(self) -> dict[str, Any]:
        """The last run's report: sample, threshold, held-out recall and pass rates."""
        return self._report

    def part_resources(self) -> list[Any]:
        """The distillation task runs the teacher, so it asks for the teacher's resources, not the stage's
        (transforms/flow/demand.py `demands`: placement checks and the rehearsal read both)."""
        return [self.teacher.resources] if self.teacher is not None else []

    # -- distillation (one task; it runs the ensemble, so it gets the ensemble's resources) ---------
    def distil(self, sample: pa.Table, covers_all: bool = False) -> tuple[FittedPrefilter, dict[str, Any]]:
        """Label `sample` with the teacher and fit; when the sample is every row, nothing is left to filter."""
        started = time.perf_counter()
        if self.teacher is None:
            raise ValueError("the prefilter needs a teacher: an EnsembleClassify stage whose verdict it learns")
        judged = self.teacher(sample.select([C.ID, C.TEXT]))
        labels = np.asarray(judged.column("ens_pass").to_pylist(), dtype=bool)
        positives = [str(i) for i, yes in zip(judged.column(C.ID).to_pylist(), labels, strict=True) if yes]
        teacher_s = time.perf_counter() - started
        if covers_all:
            # Every row is already classified (and cached for the ensemble stage): pass them all on.
            n_pos = int(labels.sum())
            fitted = FittedPrefilter(coef=[], intercept=0.0, threshold=-math.inf, embedder=self.embedder,
                                     embed_chars=self.embed_chars, note="pass_all: the sample is every row")
            report: dict[str, Any] = {"sample_rows": len(labels), "sample_positives": n_pos, "degenerate": False,
                                      "teacher_pass_rate_on_sample": n_pos / max(len(labels), 1),
                                      "note": fitted.note, "threshold": None}
            calls = judged.column("ens_calls").to_numpy()
            report.update(teacher_seconds=round(teacher_s, 2), teacher_calls=int(calls.sum()), seed=self.seed)
            fitted.teacher_positives = positives
            return fitted, report
        embedder = Embedder(self.embedder)
        emb = embedder.encode(_cut(sample.column(C.TEXT).to_pylist(), self.embed_chars))
        fitted, report = fit_prefilter(emb, labels, target_recall=self.target_recall,
                                       holdout_fraction=self.holdout_fraction, seed=self.seed,
                                       min_per_class=self.min_per_class, embedder=self.embedder,
                                       embed_chars=self.embed_chars, on_degenerate=self.on_degenerate)
        calls = judged.column("ens_calls").to_numpy()
        report.update(teacher_seconds=round(teacher_s, 2), teacher_calls=int(calls.sum()),
                      teacher_calls_per_row=float(calls.mean()) if len(calls) else 0.0,
                      distil_seconds=round(time.perf_counter() - started, 2), seed=self.seed)
        fitted.teacher_positives = positives
        log.info("prefilter fitted: %s", {k: report.get(k) for k in ("sample_positives", "holdout_recall",
                                                                      "holdout_pass_rate", "holdout_auc")})
        return fitted, report

    def score(self, table: pa.Table, fitted: FittedPrefilter, sampled: set[str],
              embedder: Embedder | None = None, cached: pa.Table | None = None) -> pa.Table:
        """Score rows; pass a loaded `embedder` so repeated calls (one per batch) reuse the model, and
        `cached` (id, score) from an earlier attempt so only the rows missing from it are embedded."""
        ids = table.column(C.ID).cast(pa.string()).combine_chunks()
        if fitted.coef:
            scores = np.full(len(ids), np.nan)
            todo: np.ndarray = np.arange(len(ids))
            if cached is not None and cached.num_rows:
                hit = pc.index_in(ids, value_set=cached.column("id"))
                found = pc.is_valid(hit).to_numpy(zero_copy_only=False)
                scores[found] = cached.column("score").to_numpy()[pc.drop_null(hit).to_numpy()]
                todo = np.flatnonzero(~found)
            if len(todo):
                embedder = embedder or Embedder(fitted.embedder)
                texts = table.column(C.TEXT).take(pa.array(todo)).to_pylist()
                scores[todo] = fitted.scores(embedder.encode(_cut(texts, fitted.embed_chars)))
                if self.cache_dir:
                    rowcache.append(Path(self.cache_dir) / fitted.cache_key(), pa.table(
                        {"id": ids.take(pa.array(todo)), "score": pa.array(scores[todo], pa.float64())}))
        else:
            scores = np.ones(table.num_rows)
        known = pa.array(list(fitted.teacher_positives), pa.string())
        out = put_column(table, "prefilter_score", pa.array(scores, pa.float64()))
        out = put_column(out, "prefilter_sampled", pc.is_in(ids, value_set=pa.array(list(sampled), pa.string())))
        # The ensemble already passed these sampled rows: dropping them would throw away known positives.
        return put_column(out, "prefilter_known_positive", pc.is_in(ids, value_set=known))

    def cached_scores(self, fitted: FittedPrefilter) -> pa.Table | None:
        """Scores an earlier attempt of this run computed with the same fitted model."""
        if not self.cache_dir or not fitted.coef:
            return None
        table = rowcache.load(Path(self.cache_dir) / fitted.cache_key())
        if table.num_rows:
            log.info("prefilter: %d scores reused from %s", table.num_rows, self.cache_dir)
        return table if table.num_rows else None

    def final_threshold(self, fitted: FittedPrefilter, scores: np.ndarray, report: dict[str, Any]) -> float:
        """The recall threshold, raised to the budget cap when it would pass more than max_pass_rate."""
        threshold = fitted.threshold
        report["budget_capped"] = False
        if len(scores):
            report["pass_rate_at_target_recall"] = float((scores >= threshold).mean())
        if self.max_pass_rate is not None and fitted.coef and len(scores):
            allowed = max(1, int(self.max_pass_rate * len(scores)))
            cap = float(np.sort(scores)[::-1][allowed - 1])
            if cap > threshold:
                held = np.asarray(fitted.holdout_scores)
                labels = np.asarray(fitted.holdout_labels, dtype=bool)
                recall, rate = recall_and_pass_rate(held, labels, cap)
                report.update(budget_capped=True, threshold_for_target_recall=threshold, threshold=cap,
                              holdout_recall=recall, holdout_pass_rate=rate)
                log.warning("prefilter: the %.2f-recall threshold would pass more than %.1f%% of rows; capped, "
                            "held-out recall is now %.2f", self.target_recall, 100 * self.max_pass_rate, recall)
                threshold = cap
        return threshold

    def mark(self, table: pa.Table, threshold: float) -> pa.Table:
        keep = pc.or_(pc.greater_equal(table.column("prefilter_score"), pa.scalar(threshold, pa.float64())),
                      table.column("prefilter_known_positive"))
        return self.drop_where(table, pc.invert(keep), PrefilterDrops.PREFILTER_REJECTED)

    def save(self, fitted: FittedPrefilter, report: dict[str, Any]) -> None:
        if not self.output_dir:
            return
        out = Path(self.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.json").write_text(fitted.model_dump_json(indent=1), encoding="utf-8")
        (out / "report.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")

    def finish_report(self, fitted: FittedPrefilter, report: dict[str, Any], rows: int, kept: int) -> None:
        report.update(rows=rows, rows_kept=kept, pass_rate=kept / rows if rows else float("nan"))
        fitted = fitted.model_copy(update={"threshold": report.get("threshold", fitted.threshold)})
        self._fitted, self._report = fitted, report
        self.save(fitted, report)

    # -- in-process path (unit tests, small tables) ---------------------------------------------------
    def process_table(self, table: pa.Table) -> pa.Table:
        ids = [str(i) for i in table.column(C.ID).to_pylist()]
        idx = sample_indices(ids, self.sample_size, self.seed)
        fitted, report = self.distil(table.take(pa.array(idx)), covers_all=len(idx) >= table.num_rows)
        scored = self.score(table, fitted, {ids[i] for i in idx}, cached=self.cached_scores(fitted))
        scores = scored.column("prefilter_score").to_numpy()
        threshold = self.final_threshold(fitted, scores, report)
        known = np.asarray(scored.column("prefilter_known_positive").to_pylist(), dtype=bool)
        report["teacher_positives_kept_below_threshold"] = int((known & (scores < threshold)).sum())
        out = self.mark(scored, threshold)
        self.finish_report(fitted, report, table.num_rows, _kept(out))
        return out

    # -- Ray path: sample → one distillation task → distributed scoring --------------------------------
    def run_dataset(self, ds: Any) -> Any:
        import ray

        seed = self.seed
        keyed = ds.select_columns([C.ID, C.TEXT]).map_batches(
            lambda b: b.append_column("_key", pa.array(sample_keys([str(i) for i in b.column(C.ID).to_pylist()],
                                                                   seed))), batch_format="pyarrow")
        sample = pa.concat_tables(ray.get(keyed.sort("_key").limit(self.sample_size).to_arrow_refs()))
        resources = self.teacher.resources if self.teacher is not None else self.resources
        remote = ray.remote(**resources.ray_remote_args())(_distil_task)
        covers_all = sample.num_rows >= ds.count()
        fitted, report = ray.get(remote.remote(self, sample.drop_columns(["_key"]), covers_all))
        sampled = set(sample.column(C.ID).to_pylist())
        scored = ds.map_batches(_ScoreActor, fn_constructor_kwargs={"stage": self, "fitted": fitted,
                                                                    "sampled": sampled},
                                concurrency=self.resources.concurrency or 1, batch_format="pyarrow",
                                batch_size=self.resources.batch_size, **self.resources.ray_remote_args())
        scored = scored.materialize()
        parts = list(scored.select_columns(["prefilter_score", "prefilter_known_positive"])
                     .iter_batches(batch_format="pyarrow", batch_size=None))
        scores = np.concatenate([b.column(0).to_numpy() for b in parts] or [np.zeros(0)])
        known = np.concatenate([b.column(1).to_numpy(zero_copy_only=False) for b in parts] or [np.zeros(0, bool)])
        threshold = self.final_threshold(fitted, scores, report)
        report["teacher_positives_kept_below_threshold"] = int((known & (scores < threshold)).sum())
        self.finish_report(fitted, report, len(scores), int(((scores >= threshold) | known).sum()))
        stage = self
        return scored.map_batches(lambda b: stage.mark(b, threshold), batch_format="pyarrow")


def _kept(table: pa.Table) -> int:
    return int(pc.sum(pc.is_null(table.column(C.DROP_REASON))).as_py() or 0)


def _distil_task(stage: DistilledPrefilter, sample: pa.Table,
                 covers_all: bool) -> tuple[FittedPrefilter, dict[str, Any]]:
    note_placement(stage.name)  # with the teacher's resources (part_resources): the node type the teacher needs
    return stage.distil(sample, covers_all)


class _ScoreActor:
    def __init__(self, stage: DistilledPrefilter, fitted: FittedPrefilter, sampled: set[str]):
        stage.exit_actor_if_finished()
        note_placement(stage.name)
        self.stage, self.fitted, self.sampled = stage, fitted, sampled
        # Load the embedding model once per actor, not once per batch.
        self.embedder = Embedder(fitted.embedder) if fitted.coef else None
        if self.embedder is not None:
            self.embedder.setup()
        self.cached = stage.cached_scores(fitted)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        return self.stage.score(batch, self.fitted, self.sampled, self.embedder, self.cached)


def _cut(texts: list[Any], n: int) -> list[str]:
    return ["" if t is None else str(t)[:n] for t in texts]
