"""The prepared device check from nothing (issue 41): `scripts/gpu_check.sh --cpu` with an empty carry folder
prepares everything it carries (wheels, tokenizer, kNN reference, e5 weights), says how big that is, and passes.
Before, its prepare imported test modules by paths that had moved, wrote nothing, and the check failed only where
the files were missing; a device is lent for minutes, so its one call must not find that."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_device_check_prepares_from_an_empty_carry_and_passes_on_the_cpu(tmp_path):
    env = {**os.environ, "GPU_CHECK_CARRY": str(tmp_path / "carry"), "OUT": str(tmp_path / "out")}
    for var in ("PYTHONPATH", "PIQAFORGE_TEST_OTHER_CPU", "PIQAFORGE_MODEL_CACHE"):
        env.pop(var, None)
    run = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=1500)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    size = re.search(r"gpu_check: carry \S+ = (\d+) MiB", out)
    assert size and int(size.group(1)) < 64, out[-2000:]
    for name in ("knn_reference.npz", "e5-small-q4.crawl-items.bin.gz", "wheels/.done"):
        assert (tmp_path / "carry" / name).exists(), name
    figures = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert figures, "the check wrote no figures"
