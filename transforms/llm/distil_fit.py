"""The distilled prefilter's model and its pure functions: the fixed-seed sample, the stratified
held-out split, the recall threshold and the fit (transforms/judge/distilled.py is the stage)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from transforms.embed.base import EmbedderConfig

log = logging.getLogger("piqaforge.prefilter")


class DegenerateSampleError(ValueError):
    """The ensemble gave (almost) one answer on the whole sample: there is nothing to learn from."""


class FittedPrefilter(BaseModel):
    """What scoring needs: the linear model, its threshold, how to embed, and the held-out evidence."""

    coef: list[float]
    intercept: float
    threshold: float = Field(..., description="Keep rows with score >= threshold; -inf keeps every row.")
    embedder: EmbedderConfig
    embed_chars: int
    note: str = ""
    holdout_scores: list[float] = Field(default_factory=list)
    holdout_labels: list[bool] = Field(default_factory=list)
    teacher_positives: list[str] = Field(
        default_factory=list, description="Ids of sampled rows the ensemble passed: kept whatever their score.")

    def cache_key(self) -> str:
        """Names the score cache: a refitted model (other weights, embedder or cut) starts a new one."""
        ident = json.dumps([self.coef, self.intercept, self.embedder.model_dump(), self.embed_chars], sort_keys=True)
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    def scores(self, embeddings: np.ndarray) -> np.ndarray:
        if not self.coef:  # pass-all model (degenerate sample)
            return np.ones(len(embeddings), dtype=np.float64)
        z = embeddings.astype(np.float64) @ np.asarray(self.coef) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))


# -- pure functions (unit-tested directly) ---------------------------------------------------------
def sample_keys(ids: list[str], seed: int) -> np.ndarray:
    """A per-row random key from (seed, id): the sample does not depend on row order or block layout."""
    import xxhash

    return np.array([xxhash.xxh64_intdigest(f"{seed}:{i}".encode()) for i in ids], dtype=np.uint64)


def sample_indices(ids: list[str], size: int, seed: int) -> np.ndarray:
    keys = sample_keys(ids, seed)
    return np.sort(np.argsort(keys, kind="stable")[:size])


def split_holdout(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split: both parts get their share of positives (few positives is the usual case)."""
    rng = np.random.default_rng(seed)
    train, hold = [], []
    for value in (True, False):
        idx = np.flatnonzero(labels == value)
        rng.shuffle(idx)
        n_hold = int(round(len(idx) * fraction))
        if len(idx) >= 2:
            n_hold = min(max(n_hold, 1), len(idx) - 1)
        hold.append(idx[:n_hold])
        train.append(idx[n_hold:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(hold))


def threshold_for_recall(scores: np.ndarray, labels: np.ndarray, target: float) -> float:
    """The highest t with recall(score >= t) >= target among the positives."""
    pos = np.sort(scores[labels])[::-1]
    if len(pos) == 0:
        raise DegenerateSampleError("no positive rows to set a recall threshold on")
    need = max(1, math.ceil(target * len(pos) - 1e-9))
    return float(pos[need - 1])


def recall_and_pass_rate(scores: np.ndarray, labels: np.ndarray, threshold: float) -> tuple[float, float]:
    keep = scores >= threshold
    recall = float(keep[labels].mean()) if labels.any() else float("nan")
    return recall, float(keep.mean()) if len(keep) else float("nan")


def fit_prefilter(embeddings: np.ndarray, labels: np.ndarray, *, target_recall: float, holdout_fraction: float,
                  seed: int, min_per_class: int, embedder: EmbedderConfig, embed_chars: int,
                  on_degenerate: str) -> tuple[FittedPrefilter, dict[str, Any]]:
    labels = labels.astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    report: dict[str, Any] = {"sample_rows": len(labels), "sample_positives": n_pos,
                              "teacher_pass_rate_on_sample": n_pos / max(len(labels), 1)}
    if min(n_pos, n_neg) < min_per_class:
        msg = (f"the ensemble passed {n_pos} and rejected {n_neg} of {len(labels)} sampled rows; the prefilter "
               f"needs at least {min_per_class} of each. Raise prefilter.sample_size (expected positives = "
               f"pass rate x sample size) or set prefilter.on_degenerate=pass_all to send every row to the ensemble.")
        if on_degenerate == "error":
            raise DegenerateSampleError(msg)
        log.warning("prefilter disabled: %s", msg)
        report.update(degenerate=True, note=msg, threshold=None)
        return FittedPrefilter(coef=[], intercept=0.0, threshold=-math.inf, embedder=embedder,
                               embed_chars=embed_chars, note="pass_all: degenerate sample"), report
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    train, hold = split_holdout(labels, holdout_fraction, seed)
    model = LogisticRegression(class_weight="balanced", C=1.0, max_iter=2000, random_state=seed)
    model.fit(embeddings[train], labels[train])
    fitted = FittedPrefilter(coef=model.coef_[0].tolist(), intercept=float(model.intercept_[0]), threshold=0.0,
                             embedder=embedder, embed_chars=embed_chars)
    held_scores = fitted.scores(embeddings[hold])
    fitted.threshold = threshold_for_recall(held_scores, labels[hold], target_recall)
    fitted.holdout_scores, fitted.holdout_labels = held_scores.tolist(), labels[hold].tolist()
    recall, pass_rate = recall_and_pass_rate(held_scores, labels[hold], fitted.threshold)
    report.update(degenerate=False, train_rows=len(train), holdout_rows=len(hold),
                  holdout_positives=int(labels[hold].sum()), threshold=fitted.threshold,
                  target_recall=target_recall, holdout_recall=recall, holdout_pass_rate=pass_rate,
                  holdout_auc=float(roc_auc_score(labels[hold], held_scores)))
    return fitted, report
