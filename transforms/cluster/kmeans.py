"""k-means over a range of k with an elbow choice; scikit-learn on CPU, cuML on a GPU, one interface.

`sweep(x, config)` fits k-means for every k in the range and returns the inertia (sum of squared
distances to the nearest centre) per k, the chosen k and the labels of the chosen fit. The elbow is
the point of the inertia curve farthest from the straight line joining its two ends, after both
axes are scaled to [0, 1] (the "kneedle" idea, Satopää et al. 2011): where adding clusters stops
paying off. Backends are picked by the config's `backend` tag and imported only when used.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.deps import require


class KMeansConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["sklearn", "cuml"] = Field("sklearn", description="sklearn on CPU; cuml on a GPU worker.")
    k_min: int = Field(2, ge=1, description="Smallest k tried.")
    k_max: int = Field(30, ge=1, description="Largest k tried (the paper keeps categories at ~30 clusters or "
                       "fewer); capped at the number of distinct points.")
    k_step: int = Field(1, ge=1, description="Step between tried k.")
    seed: int = Field(0, description="Random state of every fit.")
    n_init: int = Field(4, ge=1, description="Restarts per k; the best inertia is kept.")
    max_iter: int = Field(300, ge=1, description="Lloyd iterations per restart.")


def k_range(n_points: int, config: KMeansConfig) -> list[int]:
    """The k values tried for `n_points` distinct points: at most n - 1 clusters (k = n puts every point
    alone, inertia 0, which would always look like the end of the curve)."""
    hi = min(config.k_max, n_points - 1 if n_points > 2 else n_points)
    lo = min(config.k_min, hi)
    return list(range(lo, hi + 1, config.k_step)) if hi >= 1 else []


def elbow_k(ks: list[int], inertias: list[float]) -> int:
    """The k whose (scaled) inertia lies farthest below the chord from the first to the last point.

    A flat or increasing curve, or fewer than three points, has no elbow: the smallest k is taken
    for two points or a flat curve, since more clusters then buy nothing."""
    if not ks:
        raise ValueError("elbow_k needs at least one k")
    if len(ks) < 3:
        return ks[0] if len(ks) == 1 or inertias[0] - inertias[-1] <= 1e-12 else ks[-1]
    x = np.asarray(ks, dtype=np.float64)
    y = np.asarray(inertias, dtype=np.float64)
    span_y = y.max() - y.min()
    if span_y <= 1e-12 * max(1.0, abs(y.max())):
        return ks[0]
    xs = (x - x.min()) / (x.max() - x.min())
    ys = (y - y.min()) / span_y
    chord = ys[0] + (ys[-1] - ys[0]) * xs  # the straight line from the first to the last point
    gap = chord - ys  # how far the curve sags below it
    return ks[int(np.argmax(gap))]


def _fit(x: np.ndarray, k: int, config: KMeansConfig) -> tuple[float, np.ndarray]:
    if config.backend == "cuml":
        cuml = require("cuml", "cuml", "GPU k-means (run this stage on a cuML worker: resources.env: cuml)")
        model: Any = cuml.KMeans(n_clusters=k, random_state=config.seed, n_init=config.n_init,
                                 max_iter=config.max_iter)
        model.fit(x)
        labels = model.labels_
        labels = labels.get() if hasattr(labels, "get") else np.asarray(labels)
        return float(model.inertia_), np.asarray(labels, dtype=np.int64)
    cluster = require("sklearn.cluster", "embed", "k-means on CPU (scikit-learn)")
    model = cluster.KMeans(n_clusters=k, random_state=config.seed, n_init=config.n_init, max_iter=config.max_iter)
    model.fit(x)
    return float(model.inertia_), np.asarray(model.labels_, dtype=np.int64)


def sweep(x: np.ndarray, config: KMeansConfig) -> dict[str, Any]:
    """Inertia per k, the elbow k and the labels of that fit, for the rows of `x` (float32, n × d)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n_distinct = len(np.unique(x, axis=0)) if len(x) else 0
    ks = k_range(n_distinct, config)
    if not ks:
        return {"ks": [], "inertia": [], "k": 0, "labels": np.zeros(len(x), dtype=np.int64)}
    fits = [_fit(x, k, config) for k in ks]
    inertias = [f[0] for f in fits]
    k = elbow_k(ks, inertias)
    return {"ks": ks, "inertia": [round(v, 6) for v in inertias], "k": k, "labels": fits[ks.index(k)][1]}


def elbow_svg(ks: list[int], inertias: list[float], chosen: int, title: str, width: int = 360,
              height: int = 200) -> str:
    """A small inline SVG of the inertia curve with the chosen k marked (for the run report)."""
    if not ks:
        return f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='40'><text x='4' y='20' " \
               f"font-size='12'>{title}: no labels to cluster</text></svg>"
    pad = 34
    lo, hi = min(inertias), max(inertias)
    span = (hi - lo) or 1.0
    kx = (max(ks) - min(ks)) or 1

    def px(k: int, v: float) -> tuple[float, float]:
        return (pad + (k - min(ks)) / kx * (width - 2 * pad), height - pad - (v - lo) / span * (height - 2 * pad))

    points = " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(k, v) for k, v in zip(ks, inertias, strict=True)))
    cx, cy = px(chosen, inertias[ks.index(chosen)])
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
            f"aria-label='elbow curve {title}'><text x='{pad}' y='14' font-size='12'>{title}: inertia by k "
            f"(chosen k={chosen})</text><polyline fill='none' stroke='#2563eb' stroke-width='1.5' points='{points}'/>"
            f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='4' fill='#dc2626'/>"
            f"<text x='{pad}' y='{height - 8}' font-size='10'>k={min(ks)}</text>"
            f"<text x='{width - pad - 30}' y='{height - 8}' font-size='10'>k={max(ks)}</text></svg>")
