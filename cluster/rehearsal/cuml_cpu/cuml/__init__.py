"""Rehearsal stand-in for RAPIDS cuML: `cuml.KMeans` backed by scikit-learn, on the CPU.

Only what piqaforge's stages call (transforms/cluster/kmeans.py): KMeans(n_clusters, random_state,
n_init, max_iter), fit, predict, fit_predict, labels_, cluster_centers_, inertia_. Importing it says
so on stderr, so a rehearsal log shows where the substitute ran.
"""

from __future__ import annotations

import sys

from sklearn.cluster import KMeans as _SkKMeans

__version__ = "0.0.1+cpu-substitute"
SUBSTITUTE = "scikit-learn KMeans in place of cuML (no GPU: cluster rehearsal)"

print(f"cuml: {SUBSTITUTE}", file=sys.stderr)


class KMeans(_SkKMeans):
    """cuML's KMeans signature (it accepts `output_type`, `verbose`, `handle`), computed by scikit-learn."""

    def __init__(self, n_clusters: int = 8, *, random_state: int | None = None, n_init: int | str = "auto",
                 max_iter: int = 300, tol: float = 1e-4, init: str = "k-means++", output_type: str | None = None,
                 verbose: bool = False, handle: object | None = None):
        super().__init__(n_clusters=n_clusters, random_state=random_state, n_init=n_init, max_iter=max_iter,
                         tol=tol, init=init)
        self.output_type = output_type
        self.handle = handle
