"""A recipe's graph: run names, parents, cycles, `when` conditions, the order runs go in, the secrets it names."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from transforms.flow.config_io import secret_names
from transforms.flow.recipe_check import stage_places
from transforms.flow.recipe_schema import (  # noqa: F401  (conditions, holds: re-exported)
    Recipe,
    RecipeError,
    RunSpec,
    StageEntry,
    cond_param,
    conditions,
    holds,
)
from transforms.flow.registry import STAGES, known

_RUN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def check_graph(recipe: Recipe, path: Path) -> None:
    """Names unique and well formed, every parent declared before use, no cycle, known stages."""
    names: dict[str, int] = {}
    for i, run in enumerate(recipe.runs):
        if not _RUN_NAME.match(run.name):
            raise RecipeError(path, f"runs.{run.name}", "a run name is lower-case letters, digits, - and _")
        if run.name in names:
            raise RecipeError(path, f"runs.{run.name}", "two runs have this name (each writes its own run)")
        names[run.name] = i
    problems: list[tuple[str, str]] = []
    for run in recipe.runs:
        for parent in run.upstream():
            if parent not in names:
                problems.append((f"runs.{run.name}", f"reads run {parent!r}, which the recipe does not declare"))
            if parent == run.name:
                problems.append((f"runs.{run.name}", "a run cannot read itself (cycle)"))
        for cond in conditions(run.when):
            if cond_param(cond) not in recipe.params and cond_param(cond) != "__always__":
                problems.append((f"runs.{run.name}.when", f"{cond_param(cond)!r} is not a param"))
        for where, entry in stage_places(run):
            stage = entry.stage
            for cond in conditions(entry.when):
                if cond_param(cond) not in recipe.params and cond_param(cond) != "__always__":
                    problems.append((f"runs.{run.name}.{where}.when", f"{cond_param(cond)!r} is not a param"))
            if not known(stage):
                near = difflib.get_close_matches(stage, list(STAGES), n=1, cutoff=0.6)
                hint = f"did you mean {near[0]!r}? " if near else ""
                problems.append((f"runs.{run.name}.{where}", f"unknown stage {stage!r}; {hint}(`piqaforge stages` "
                                 "lists the registered names; or give 'module:Class')"))
    if problems:
        raise RecipeError.many(path, problems)
    _check_acyclic(recipe, path)
    kinds = {r.name: r.kind for r in recipe.runs}
    for run in recipe.runs:
        if run.evaluate is not None and kinds[run.evaluate.of] != "release":
            raise RecipeError(path, f"runs.{run.name}.evaluate.of", f"{run.evaluate.of!r} is not a release run")


def wanted_places(run: RunSpec, params: dict[str, Any]) -> list[tuple[str, StageEntry]]:
    """(place, entry) of the source and the stages a run builds for these params: the one filter by a stage
    entry's `when` (the check before anything runs, the run itself and placement all read it). The source is
    always built: a run switched off says so with its own `when`."""
    return [(place, entry) for place, entry in stage_places(run) if place == "source" or entry.wanted(params)]


def _check_acyclic(recipe: Recipe, path: Path) -> None:
    graph = {r.name: r.upstream() for r in recipe.runs}
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == 1:
            cycle = " -> ".join([*trail[trail.index(name):], name])
            raise RecipeError(path, f"runs.{name}", f"the runs read each other in a cycle: {cycle}")
        if state.get(name) == 2:
            return
        state[name] = 1
        for parent in graph[name]:
            visit(parent, [*trail, name])
        state[name] = 2

    for name in graph:
        visit(name, [])


def order(recipe: Recipe) -> list[RunSpec]:
    """The runs in an order where every run comes after the runs it reads (file order where free)."""
    done: set[str] = set()
    out: list[RunSpec] = []
    pending = list(recipe.runs)
    while pending:
        for run in pending:
            if all(p in done for p in run.upstream()):
                out.append(run)
                done.add(run.name)
                pending.remove(run)
                break
    return out


def secret_names_of(recipe: Recipe) -> list[str]:
    """Every variable a recipe forwards: its `secrets` and every stage's `resources.secrets` (the walk the
    tools' configs use too, config_io.secret_names)."""
    return secret_names([r.model_dump() for r in recipe.runs], recipe.secrets)
