"""The static first tier's features: e5 distilled into one vector per token (transforms/embed/static.py).

The tier itself is the n-gram tier's (transforms/judge/ngram_tier.py, `features: static_e5`): the same logistic
regression on the judge's own seeds and views, the same out-of-fold cut (the highest at which the cascade keeps
all but `max_recall_loss` of the positives the e5 judge alone keeps out of fold), the same minimum over the
judge's views (its cut set over 5 fold splits by default, `repeats`); only the features differ: a text's
static vector, the SIF-weighted mean of its tokens' rows of
the distilled table (Model2Vec's method on the bundled weights, no download). Where the n-gram tier sees
characters, this one sees what e5 makes of each token on its own, in the same tokenisation the judge embeds.

A text with no distilled token (possible only with `vocabulary: corpus`) cannot be judged by the tier: it
scores 1, so it goes on to the embedder (the cascade stays the judge there).

The tier's weights are bound to the table they were fitted on: the table's key (weights sha256 + settings) is
recorded at fitting (`cv.static_table`), and scoring with another table (other weights behind the same model
name) is refused rather than scored with foreign coefficients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.embed.static import StaticDistillation, StaticEmbedder

_embedders: dict[str, StaticEmbedder] = {}


class StaleTableError(ValueError):
    """The tier was fitted on another distilled table than the one these weights give."""


def embedder(config: StaticDistillation) -> StaticEmbedder:
    """One StaticEmbedder per settings and process (the table is read or distilled once)."""
    ident = config.model_dump_json()
    if ident not in _embedders:
        _embedders[ident] = StaticEmbedder(config)
    return _embedders[ident]


def table_key(config: StaticDistillation) -> str:
    return embedder(config).key


def features(config: StaticDistillation, texts: Sequence[Any]) -> np.ndarray:
    """Static vectors (float32 [n, dims], L2-normalised; zero rows for texts with no distilled token)."""
    return embedder(config).encode(texts)[0]


def scores(config: StaticDistillation, coef: np.ndarray, intercept: float, texts: Sequence[Any],
           fitted_on: str | None) -> np.ndarray:
    """P(positive) of prepared texts under the tier's logistic regression; 1 where the tier cannot judge."""
    model = embedder(config)
    if fitted_on is not None and fitted_on != model.key:
        raise StaleTableError(f"the static tier was fitted on distilled table {fitted_on}, but {config.model!r} "
                              f"now gives table {model.key}: refit the judge")
    x, known = model.encode(texts)
    z = x.astype(np.float64) @ coef + intercept
    return np.where(known, 1.0 / (1.0 + np.exp(-z)), 1.0)
