"""Precision, recall, ROC AUC and pass rate of a judge's scores or verdicts, in plain numpy.

Kept free of sklearn so the report and the job can compute them anywhere; tests check them against
sklearn.metrics on real scores.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    # average ranks over ties (1-based)
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def verdict_metrics(labels: np.ndarray, verdicts: np.ndarray) -> dict[str, Any]:
    """Confusion counts, precision, recall, F1 and pass rate of yes/no verdicts."""
    labels = np.asarray(labels, dtype=bool)
    verdicts = np.asarray(verdicts, dtype=bool)
    tp = int((labels & verdicts).sum())
    fp = int((~labels & verdicts).sum())
    fn = int((labels & ~verdicts).sum())
    tn = int((~labels & ~verdicts).sum())
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    return {"rows": len(labels), "positives": int(labels.sum()), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": precision, "recall": recall, "f1": f1,
            "precision_interval": wilson(tp, tp + fp), "recall_interval": wilson(tp, tp + fn),
            "pass_rate": float(verdicts.mean()) if len(verdicts) else float("nan")}


def wilson(k: int, n: int, z: float = 1.96) -> list[float] | None:
    """The Wilson score interval (95% with z = 1.96) of a proportion k/n; None when n = 0. With few labels it
    is wide (9 of 10: 0.60-0.98) and it stays inside [0, 1] at 0/n and n/n, where the normal one does not."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def judge_metrics(labels: np.ndarray, verdicts: np.ndarray, scores: np.ndarray | None = None) -> dict[str, Any]:
    """verdict_metrics plus the AUC of the scores (None when the judge gives no score)."""
    out = verdict_metrics(labels, verdicts)
    out["auc"] = None
    if scores is not None:
        s = np.asarray(scores, dtype=np.float64)
        ok = np.isfinite(s)
        out["auc"] = roc_auc(np.asarray(labels, dtype=bool)[ok], s[ok]) if ok.any() else None
    return out


def pr_curve(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds, precision, recall) at every distinct score, highest threshold first."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    thresholds = np.unique(scores)[::-1]
    keep = scores[None, :] >= thresholds[:, None]
    tp = (keep & labels).sum(1)
    passed = keep.sum(1)
    precision = np.where(passed > 0, tp / np.maximum(passed, 1), np.nan)
    recall = tp / max(int(labels.sum()), 1)
    return thresholds, precision, recall
