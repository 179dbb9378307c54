"""Engine profiles: one switch (`--set engines=<profile>`) for every model call of a recipe.

Profiles are defined once in jobs/engines.yaml (a recipe may add its own under `engine_profiles`).
A recipe writes `"@role"` where a stage wants an engine; `fill_roles` puts the active profile's
engine there, so LLM stages, translation engines, auto-review annotators and evaluated models all
follow the switch, and a stage that names its own engine keeps it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from transforms.flow.recipe import REPO, Recipe, RecipeError

PROFILES_FILE = REPO / "jobs" / "engines.yaml"


def profiles(recipe: Recipe) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(PROFILES_FILE.read_text(encoding="utf-8")) if PROFILES_FILE.exists() else {}
    merged = {k: dict(v) for k, v in (data or {}).items()}
    for name, roles in recipe.engine_profiles.items():
        base = merged.get(name, {})
        merged[name] = {**base, **roles}
        if isinstance(base.get("endpoint"), dict) and isinstance(roles.get("endpoint"), dict):
            merged[name]["endpoint"] = {**base["endpoint"], **roles["endpoint"]}  # --set one key of it
    return merged


def resolve_engines(recipe: Recipe) -> dict[str, Any]:
    """The active profile's roles."""
    known = profiles(recipe)
    if recipe.engines not in known:
        raise RecipeError(recipe.path or recipe.recipe, "engines",
                          f"no engine profile {recipe.engines!r}; profiles: {', '.join(sorted(known))}")
    roles = copy.deepcopy(known[recipe.engines])
    apply_endpoint(roles)
    for key, engine in _role_engines(roles):
        check_placement(engine, recipe.path or recipe.recipe, f"engine_profiles.{recipe.engines}.{key}")
    return roles


# One place for a whole profile's endpoint: the environment wins over the profile's `endpoint:` block.
ENDPOINT_ENV = {"base_url": "PIQAFORGE_ENDPOINT_URL", "model": "PIQAFORGE_ENDPOINT_MODEL",
                "api_key_env": "PIQAFORGE_ENDPOINT_KEY_ENV"}


def apply_endpoint(roles: dict[str, Any]) -> None:
    """A profile's `endpoint: {base_url, model, api_key_env, options}` (or $PIQAFORGE_ENDPOINT_URL, _MODEL,
    _KEY_ENV) applied to every `openai` engine of every role: generator, judge, translator, scorer,
    annotators and evaluated models follow one setting (`--set engine_profiles.<p>.endpoint.base_url=...`)."""
    import os

    endpoint = dict(roles.pop("endpoint", None) or {})
    for key, var in ENDPOINT_ENV.items():
        if os.environ.get(var):
            endpoint[key] = os.environ[var]
    if not endpoint:
        return
    extra = dict(endpoint.get("options") or {})
    for _, engine in _role_engines(roles):
        if engine.get("backend") != "openai":
            continue
        options = {**extra, **dict(engine.get("options") or {})}
        for key in ("base_url", "api_key_env"):
            if endpoint.get(key):
                options[key] = endpoint[key]
        engine["options"] = options
        if endpoint.get("model"):
            engine["model"] = endpoint["model"]


def _role_engines(node: Any, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict) and "backend" in node and "model" in node:
        return [(prefix, node)]
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _role_engines(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _role_engines(v, f"{prefix}.{i}")]
    return []


def check_placement(engine: dict[str, Any], path: Any, key: str) -> None:
    """An in-process vLLM engine runs on a GPU node: its role must say so (`resources: {env: vllm, gpus: N}`,
    N at least its tensor-parallel size), or a cluster would schedule it on a CPU worker with no GPU."""
    if engine.get("backend") != "vllm":
        return
    place = engine.get("resources") or {}
    tp = int((engine.get("options") or {}).get("tensor_parallel_size", 1) or 1)
    if place.get("env") != "vllm" or float(place.get("gpus", 0) or 0) < tp:
        raise RecipeError(path, f"{key}.resources", f"the vLLM engine {engine.get('model')!r} needs "
                          f"`resources: {{env: vllm, gpus: {tp}}}` (at least its tensor_parallel_size {tp} GPUs on "
                          f"a vLLM worker); got {place or 'none'}")


def fill_roles(node: Any, engines: dict[str, Any], where: str) -> Any:
    """Every `"@role"` value replaced by the profile's engine (or list / mapping of engines) for it."""
    if isinstance(node, dict):
        return {k: fill_roles(v, engines, where) for k, v in node.items()}
    if isinstance(node, list):
        return [fill_roles(v, engines, where) for v in node]
    if isinstance(node, str) and node.startswith("@") and len(node) > 1 and " " not in node:
        role = node[1:]
        if role not in engines:
            raise RecipeError(where, node, f"the engine profile has no role {role!r} (roles: "
                              f"{', '.join(sorted(engines))})")
        return copy.deepcopy(engines[role])
    return node


def engine_factory(doubles: dict[str, Any] | None) -> Any:
    """The engine factory the orchestrator hands to stages: `make(who, config)` -> an engine, or None to
    let the stage build its own. Given engine doubles (tests: by stage name, role or "*"), it answers with
    the double for `who`; without, it returns None for everyone."""
    table = dict(doubles or {})

    def make(who: str, _config: Any = None) -> Any:
        if who in ("translator",):
            return table.get(who)
        return table.get(who, table.get("*"))

    return make


def use_doubles(stage: Any, doubles: dict[str, Any]) -> Any:
    """A stage with its engines from the factory: a stage with several engines takes the factory itself
    (`use_engine_factory`), a stage with one takes the engine the factory gives for its name."""
    if not doubles:
        return stage
    make = engine_factory(doubles)
    if make(getattr(stage, "name", "")) is None:
        return stage
    if hasattr(stage, "use_engine_factory"):
        name = getattr(stage, "name", "")
        return stage.use_engine_factory(lambda who, cfg: make(name) if who not in ("translator",) else make(who))
    if hasattr(stage, "use_engine"):
        return stage.use_engine(make(stage.name))
    return stage


def recipe_dir(recipe: Recipe) -> Path:
    return Path(recipe.path).parent if recipe.path else REPO / "jobs" / "recipes"
