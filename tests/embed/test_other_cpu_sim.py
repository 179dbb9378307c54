"""The other-CPU simulation scripts/test.sh runs the float-sensitive tests under (tests/other_cpu/): its gap is
the measured cross-CPU one, relative to its own unmoved vectors (never to this machine's floats), and where a pass
plays another CPU, Ray's workers play it too."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "other_cpu"))
from other_cpu_sim import moved  # noqa: E402

pytestmark = pytest.mark.floats  # every test here depends on native kernels' floats


def test_the_simulated_gap_is_the_measured_cross_cpu_gap_and_deterministic():
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(200, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    out = np.stack([moved(f"text {i}", v) for i, v in enumerate(vecs)])
    cos = (vecs.astype(np.float64) * out).sum(1)
    assert cos.min() > 0.9999 and cos.max() < 0.99999  # Intel Xeon vs AMD EPYC measured ~0.99994
    assert 1e-3 < np.abs(out - vecs).max() < 5e-3
    assert np.array_equal(out[0], moved("text 0", vecs[0]))


def test_in_an_other_cpu_pass_rays_workers_play_the_same_cpu(ray_local):
    direction = os.environ.get("PIQAFORGE_TEST_OTHER_CPU", "")
    if not direction:
        pytest.skip("not an other-CPU pass (scripts/test.sh runs one per direction)")

    @ray_local.remote
    def seen() -> list[str]:
        import other_cpu_sim

        return list(other_cpu_sim.APPLIED)

    assert ray_local.get(seen.remote()) == [direction]
