"""Agreement statistics with bootstrap intervals: percent agreement, Cohen's κ per annotator pair,
Fleiss' κ (overall and per category) and Krippendorff's α (nominal).

Point estimates come from the maintained libraries: scikit-learn `cohen_kappa_score`, statsmodels
`aggregate_raters` + `fleiss_kappa`, and `krippendorff.alpha` with `level_of_measurement="nominal"`
(its default is interval, wrong for labels). Intervals are percentile bootstraps over items,
seeded. A κ or α that is 0/0 (every rating in one category: chance agreement is 1) is reported as
`undefined` with the reason, never as NaN. Fleiss' κ needs the same number of raters per item: it
uses the items rated by the most common number of raters and names the ones it left out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.review.judgments import MISSING, RatingMatrix


class AgreementConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_boot: int = Field(1000, ge=0, description="Bootstrap replicates (items resampled); 0 = no intervals.")
    seed: int = Field(0, description="Seed of the bootstrap.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Coverage of the percentile intervals.")
    min_pair_items: int = Field(10, ge=1, description="Cohen's κ is reported for pairs sharing at least "
                                "this many items.")
    max_pairs: int = Field(100, ge=0, description="Report at most this many pairs, those sharing the most items "
                           "(a crowd of 164 workers has thousands of pairs; the rest are counted).")
    raters_per_item: int | None = Field(None, ge=2, description="Fleiss' κ uses items with exactly this many "
                                        "raters (default: the most common count).")
    max_excluded_listed: int = Field(20, ge=0, description="How many excluded item ids a report names.")


class Estimate(BaseModel):
    value: float | None = Field(None, description="The statistic; None when undefined.")
    ci: tuple[float, float] | None = Field(None, description="Percentile bootstrap interval.")
    n_items: int = 0
    undefined: str | None = Field(None, description="Why the statistic (or its interval) is undefined.")
    bootstrap: dict[str, int] = Field(default_factory=dict, description="replicates drawn, valid ones.")
    note: str | None = Field(None, description="What to know about the interval (left-out samples).")


def _bootstrap(n: int, stat: Callable[[np.ndarray], np.ndarray], cfg: AgreementConfig, salt: int) -> np.ndarray:
    """`cfg.n_boot` replicates of `stat` on item indices drawn with replacement (NaN = undefined).

    `stat` maps a (b, n) array of indices to b values; replicates are drawn in chunks so a
    million-item table does not need a n_boot × n index array at once."""
    rng = np.random.default_rng([cfg.seed, salt])
    chunk = max(1, 2_000_000 // max(n, 1))
    out: list[np.ndarray] = []
    done = 0
    while done < cfg.n_boot:
        b = min(chunk, cfg.n_boot - done)
        out.append(np.asarray(stat(rng.integers(0, n, size=(b, n))), dtype=float))
        done += b
    return np.concatenate(out) if out else np.zeros(0)


def _estimate(value: float, n: int, stat: Callable[[np.ndarray], np.ndarray], cfg: AgreementConfig,
              salt: int, undefined: str | None = None) -> Estimate:
    if undefined is not None or not math.isfinite(value):
        return Estimate(n_items=n, undefined=undefined or "the statistic is 0/0 on these ratings")
    est = Estimate(value=float(value), n_items=n)
    if cfg.n_boot == 0 or n == 0:
        return est
    reps = _bootstrap(n, stat, cfg, salt)
    valid = reps[np.isfinite(reps)]
    est.bootstrap = {"replicates": int(len(reps)), "valid": int(len(valid))}
    if len(valid) < len(reps):
        lost = f"{len(reps) - len(valid)} of {len(reps)} bootstrap samples had a single category"
        if len(valid) < 0.5 * len(reps):
            est.undefined = f"interval undefined: {lost}"
            return est
        est.note = f"interval from the other samples: {lost} (statistic 0/0 there)"
    tail = (1 - cfg.confidence) / 2 * 100
    lo, hi = np.percentile(valid, [tail, 100 - tail])
    est.ci = (float(lo), float(hi))
    return est


def _per_row(fn: Callable[[np.ndarray], float]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda idx: np.array([fn(row) for row in idx])


def _single_category(counts: np.ndarray, categories: list[str]) -> str | None:
    used = np.flatnonzero(counts.sum(axis=0) > 0)
    if len(used) >= 2:
        return None
    which = categories[int(used[0])] if len(used) else "none"
    return f"every rating is in one category ({which}): chance agreement is 1, so the statistic is 0/0"


# -- the statistics -------------------------------------------------------------------------------
def percent_agreement(m: RatingMatrix, cfg: AgreementConfig) -> Estimate:
    """Share of items (rated by two or more) on which every annotator gave the same label."""
    n_r = m.raters_per_item
    use = n_r >= 2
    if not use.any():
        return Estimate(undefined="no item has two or more ratings")
    agree = (m.counts()[use].max(axis=1) == n_r[use]).astype(float)
    return _estimate(float(agree.mean()), len(agree), lambda idx: agree[idx].mean(axis=1), cfg, salt=1)


def fleiss_subset(m: RatingMatrix, raters_per_item: int | None = None) -> tuple[np.ndarray, int, list[str]]:
    """Items with exactly n raters, as (items × n) codes for aggregate_raters; returns the codes, n
    and the ids of the items left out (rated by another number of annotators)."""
    n_r = m.raters_per_item
    if raters_per_item is None:
        values, freq = np.unique(n_r[n_r >= 2], return_counts=True)
        raters_per_item = int(values[freq == freq.max()].max()) if len(values) else 2
    keep = n_r == raters_per_item
    rows = m.codes[keep]
    compact = np.sort(np.where(rows == MISSING, np.iinfo(np.int64).max, rows), axis=1)[:, :raters_per_item]
    excluded = [m.items[i] for i in np.flatnonzero(~keep)]
    return compact, raters_per_item, excluded


def _fleiss_counts(m: RatingMatrix, cfg: AgreementConfig) -> tuple[np.ndarray, int, list[str]]:
    from statsmodels.stats.inter_rater import aggregate_raters

    compact, n, excluded = fleiss_subset(m, cfg.raters_per_item)
    if len(compact) == 0:
        return np.zeros((0, len(m.categories)), dtype=np.int64), n, excluded
    counts, cats = aggregate_raters(compact, n_cat=len(m.categories))
    return np.asarray(counts), n, excluded


def _take_fleiss(counts: np.ndarray, rows: np.ndarray) -> float:
    return _fleiss_value(counts[rows])


def _fleiss_value(counts: np.ndarray) -> float:
    from statsmodels.stats.inter_rater import fleiss_kappa

    if (counts.sum(axis=0) > 0).sum() < 2:
        return math.nan
    return float(fleiss_kappa(counts, method="fleiss"))


def fleiss(m: RatingMatrix, cfg: AgreementConfig) -> dict[str, Any]:
    counts, n, excluded = _fleiss_counts(m, cfg)
    why = f"no item is rated by exactly {n} annotators" if len(counts) == 0 else \
        _single_category(counts, m.categories)
    est = _estimate(_fleiss_value(counts) if why is None else math.nan, len(counts),
                    _per_row(lambda r: _fleiss_value(counts[r])), cfg, salt=2, undefined=why)
    return {**est.model_dump(), "raters_per_item": n, "items_excluded": len(excluded),
            "excluded_items": excluded[: cfg.max_excluded_listed],
            "excluded_because": f"rated by a number of annotators other than {n}" if excluded else None}


def per_category(m: RatingMatrix, cfg: AgreementConfig) -> dict[str, dict[str, Any]]:
    """Fleiss' κ_j per category (Fleiss 1971): the overall κ on the table collapsed to j vs the rest."""
    counts, n, _ = _fleiss_counts(m, cfg)
    total = counts.sum()
    out: dict[str, dict[str, Any]] = {}
    for j, cat in enumerate(m.categories):
        col = counts[:, j]
        binary = np.column_stack([col, n - col])
        share = float(col.sum() / total) if total else 0.0
        why = None
        if share in (0.0, 1.0):
            why = (f"category {cat!r} is never used" if share == 0 else f"every rating is {cat!r}") + \
                ": its κ is 0/0"
        est = _estimate(_fleiss_value(binary) if why is None else math.nan, len(counts),
                        _per_row(functools.partial(_take_fleiss, binary)), cfg, salt=100 + j, undefined=why)
        out[cat] = {"share": share, "fleiss_kappa": est.model_dump()}
    return out


def kappa_replicates(x: np.ndarray, y: np.ndarray, k: int, idx: np.ndarray) -> np.ndarray:
    """Cohen's κ of (x[idx_b], y[idx_b]) for every row b, from batched confusion matrices (the
    point estimate is sklearn's; this is the same formula, vectorised for the bootstrap)."""
    b, n = idx.shape
    flat = (np.arange(b)[:, None] * k * k + x[idx] * k + y[idx]).ravel()
    conf = np.bincount(flat, minlength=b * k * k).reshape(b, k, k).astype(float)
    po = np.trace(conf, axis1=1, axis2=2) / n
    pe = (conf.sum(axis=2) * conf.sum(axis=1)).sum(axis=1) / n**2
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = (po - pe) / (1 - pe)
    kappa[np.isclose(pe, 1.0)] = np.nan
    return kappa


def cohen_pairs(m: RatingMatrix, cfg: AgreementConfig) -> tuple[list[dict[str, Any]], int]:
    """Cohen's κ for the annotator pairs sharing at least `min_pair_items` items (the `max_pairs`
    sharing the most); also how many pairs sharing at least one item are not reported."""
    from sklearn.metrics import cohen_kappa_score

    present = (m.codes != MISSING).astype(np.int64)
    shared = present.T @ present
    a_idx, b_idx = np.triu_indices(len(m.annotators), k=1)
    overlap = shared[a_idx, b_idx]
    qualified = np.flatnonzero(overlap >= cfg.min_pair_items)
    qualified = qualified[np.argsort(-overlap[qualified], kind="stable")][: cfg.max_pairs]
    skipped = int((overlap > 0).sum()) - len(qualified)
    k = len(m.categories)
    pairs: list[dict[str, Any]] = []
    for q in sorted(qualified.tolist()):
        a, b = int(a_idx[q]), int(b_idx[q])
        both = (present[:, a] & present[:, b]).astype(bool)
        x, y = m.codes[both, a], m.codes[both, b]
        why = None if len(set(x.tolist()) | set(y.tolist())) > 1 else _single_category(
            np.bincount(np.r_[x, y], minlength=k)[None, :], m.categories)
        value = math.nan if why else float(cohen_kappa_score(x, y, labels=list(range(k))))
        est = _estimate(value, len(x), functools.partial(kappa_replicates, x, y, k), cfg,
                        salt=10_000 + a * len(m.annotators) + b, undefined=why)
        pairs.append({"pair": [m.annotators[a], m.annotators[b]], **est.model_dump(),
                      "percent_agreement": float((x == y).mean())})
    return pairs, skipped


def _alpha_value(value_counts: np.ndarray) -> float:
    import krippendorff

    if (value_counts.sum(axis=0) > 0).sum() < 2:
        return math.nan
    return float(krippendorff.alpha(value_counts=value_counts, level_of_measurement="nominal"))


def krippendorff_alpha(m: RatingMatrix, cfg: AgreementConfig) -> Estimate:
    """Nominal α over every item with two or more ratings (missing ratings are fine)."""
    counts = m.counts()
    counts = counts[counts.sum(axis=1) >= 2]
    why = "no item has two or more ratings" if len(counts) == 0 else _single_category(counts, m.categories)
    return _estimate(_alpha_value(counts) if why is None else math.nan, len(counts),
                     _per_row(lambda r: _alpha_value(counts[r])), cfg, salt=3, undefined=why)


def agreement_report(m: RatingMatrix, cfg: AgreementConfig | None = None) -> dict[str, Any]:
    """Every statistic, as one JSON-ready dict (what `piqaforge review agreement --json` prints)."""
    cfg = cfg or AgreementConfig()
    pairs, skipped = cohen_pairs(m, cfg)
    defined = [p["value"] for p in pairs if p["value"] is not None]
    return {
        "items": len(m.items), "annotators": len(m.annotators), "categories": m.categories,
        "ratings": int((m.codes != MISSING).sum()), "notes": m.notes,
        "items_with_one_rating": int((m.raters_per_item == 1).sum()),
        "percent_agreement": percent_agreement(m, cfg).model_dump(),
        "fleiss_kappa": fleiss(m, cfg),
        "cohen_kappa": pairs,
        "cohen_pairs_not_reported": skipped,
        "cohen_kappa_mean": float(np.mean(defined)) if defined else None,
        "krippendorff_alpha": krippendorff_alpha(m, cfg).model_dump(),
        "per_category": per_category(m, cfg),
        "bootstrap": {"replicates": cfg.n_boot, "seed": cfg.seed, "confidence": cfg.confidence},
    }
