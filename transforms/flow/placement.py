"""Where each stage of a recipe runs on a cluster, what its node must have installed, and the check that
refuses a recipe a cluster cannot run before any stage starts.

* `recipe_stages(recipe)`: every stage of a recipe as its runs build them, with where it stands.
* `needed_extras(...)`: per node set-up (`cluster/setup_node.sh <env>`), the union over the recipes'
  stages placed there; the head runs the driver, which builds every stage (so it imports every stage
  module) and the review steps. tests/flow/test_cluster_placement.py compares this with setup_node.sh.
* `preflight(...)`: on a cluster, before the first run: every stage placeable (live nodes, plus the node
  types the autoscaler may start, from the head's ~/ray_bootstrap_config.yaml), and on each kind of node
  a stage lands on, a probe task importing the modules of the extras it needs: a missing module fails the
  recipe at once, naming the stage, the node, the module and the extra to install.

What a stage asks Ray for and which nodes fit it is transforms/flow/demand.py; which extras a stage or
module needs, transforms/flow/extras.py (both re-exported here for one release).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from transforms.flow.demand import (  # noqa: F401 (re-exported)
    Demand,
    ambiguous_gpu_stages,
    demand,
    demands,
    missing_on,
    nodes_fitting,
    setup_env_of,
    unplaceable,
)
from transforms.flow.extras import (  # noqa: F401 (re-exported)
    BACKEND_EXTRAS,
    DRIVER_EXTRAS,
    DRIVER_MODULES,
    EXTRA_MODULES,
    IMAGE_EXTRAS,
    REPO,
    STAGE_EXTRAS,
    declared_extras,
    hook_extras,
    module_extras,
    setup_node_extras,
    stage_extras,
)
from transforms.flow.recipe import RecipeError

log = logging.getLogger("piqaforge")


class PlacementError(RecipeError):
    """A recipe this cluster cannot run; the message names the stage and what is missing."""

    def __init__(self, path: Any, problem: str):
        super().__init__(path, "resources", problem)


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
            for env in {e for want in demands(stage) for e in setup_env_of(want, node_types)}:
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
        for want in demands(stage):  # a part run with other resources (a teacher) needs the stage's code there too
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
