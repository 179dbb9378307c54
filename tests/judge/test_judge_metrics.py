"""Judge metrics against sklearn on real scores, and the out-of-fold threshold logic."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES
from sklearn.metrics import precision_score, recall_score, roc_auc_score

from transforms.judge.linear import fit_linear, threshold_for_recall
from transforms.judge.metrics import judge_metrics, pr_curve, roc_auc, verdict_metrics
from transforms.recipes.ko_piqa.seeds import LabelError, kin_parity, load_labels


def test_auc_precision_recall_match_sklearn():
    rng = np.random.default_rng(3)
    labels = rng.random(400) < 0.1
    scores = np.round(rng.random(400) + 0.4 * labels, 2)  # rounded: many ties
    assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    for t in (0.3, 0.7, 1.1):
        m = verdict_metrics(labels, scores >= t)
        assert m["precision"] == pytest.approx(precision_score(labels, scores >= t, zero_division=np.nan), nan_ok=True)
        assert m["recall"] == pytest.approx(recall_score(labels, scores >= t))
        assert m["tp"] + m["fp"] + m["fn"] + m["tn"] == 400
    assert judge_metrics(labels, scores >= 0.7)["auc"] is None
    assert np.isnan(roc_auc(np.zeros(5, bool), np.arange(5.0)))


def test_pr_curve_ends_at_full_recall():
    labels = np.array([1, 0, 1, 0, 0, 1], dtype=bool)
    scores = np.array([0.9, 0.8, 0.7, 0.4, 0.3, 0.1])
    t, p, r = pr_curve(labels, scores)
    assert t[0] == 0.9 and p[0] == 1.0 and r[0] == pytest.approx(1 / 3)
    assert r[-1] == 1.0 and p[-1] == pytest.approx(0.5)


def test_threshold_keeps_the_target_share_of_positives():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    labels = np.array([1, 0, 1, 1, 0, 1, 0, 1, 0, 0], dtype=bool)
    assert threshold_for_recall(scores, labels, 0.8) == 0.4
    assert threshold_for_recall(scores, labels, 1.0) == 0.2
    with pytest.raises(LabelError):
        threshold_for_recall(scores, np.zeros(10, bool), 0.9)


def test_out_of_fold_threshold_meets_the_target_on_rows_the_models_did_not_see():
    rng = np.random.default_rng(0)
    n, d = 600, 16
    labels = rng.random(n) < 0.12
    emb = rng.normal(size=(n, d)) + 0.9 * labels[:, None] * np.linspace(1, 0, d)
    coef, intercept, threshold, report, oof = fit_linear(emb, labels, target_recall=0.9, folds=5, seed=0)
    assert len(coef) == d
    assert report["recall"] >= 0.9  # measured on out-of-fold scores, by construction of the threshold
    assert report["recall"] == pytest.approx((oof[labels] >= threshold).mean())
    assert 0.7 < report["auc"] < 1.0
    # A stricter target can only lower the threshold and raise the pass rate.
    _, _, strict, strict_report, _ = fit_linear(emb, labels, target_recall=1.0, folds=5, seed=0)
    assert strict <= threshold and strict_report["pass_rate"] >= report["pass_rate"]
    with pytest.raises(LabelError, match="label more rows"):
        fit_linear(emb[:60], labels[:60] & (np.arange(60) < 3), target_recall=0.9)


def test_bundled_labels_split_by_docid_parity():
    seeds = load_labels(SAMPLES / "ko_seed_labels.jsonl")
    assert len(seeds) >= 800 and sum(r.physical for r in seeds) >= 30
    kin = [r for r in seeds if r.source == "naver_kin"]
    assert len(kin) >= 300 and all(kin_parity(r.url) == "even" for r in kin)
    with pytest.raises(LabelError, match="held-out"):
        load_labels(SAMPLES / "ko_heldout_labels.jsonl")
    held = load_labels(SAMPLES / "ko_heldout_labels.jsonl", allow_held_out=True)
    assert all(kin_parity(r.url) == "odd" for r in held)
    assert {r.id for r in held}.isdisjoint({r.id for r in seeds})
