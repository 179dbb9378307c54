"""The recipe file: a benchmark declared as data (docs/recipes.md).

    recipe: ta-piqa                       # name: `piqaforge run ta-piqa`
    description: one line for `piqaforge recipes`
    dataset: ta-piqa                      # the lake's folder name for every run
    language: {code: ta, script: ta}     # ISO 639 code; the script whose letters items must use
    engines: local                        # engine profile (jobs/engines.yaml); --set engines=vllm-cluster
    data: {writers: lake/samples/ta_items}   # named files, checked to exist, `${data.writers}` below
    params: {review: export}              # what `--set NAME=VALUE` changes, `${review}` below
    runs:                                 # in order; each a run of the runner with its own report
      - name: items
        source: {stage: writers_intake, path: "${data.writers}"}
        stages: [{stage: prompt_length, min_words: 25}, {stage: degenerate}]
      - name: review
        review: {of: items, annotators: 4, mode: "${review}"}
      - name: final
        parents: [review]
        stages: [{stage: confirmed_duplicates}]
      - name: release
        release: {of: final, suite: ta-piqa}

A run is one of: `source` (+ `stages`), `parents` (+ `stages`: the parents' kept rows, in order, are
its input), `rounds` (quota rounds of a creating chain), `review`, `release` or `evaluate`. Values are
plain YAML; `${name}` is a param, `${data.name}` a data file, `${language.code}` the language, and an
engine is `"@role"` (a role of the active engine profile: generator, judge, translator, annotators,
evaluated ...). `load_recipe` checks the file's shape, names and graph (recipe_schema.py, recipe_graph.py),
every stage entry's keys against its class and every hook (recipe_check.py: stage classes are imported,
hook modules only read), and lists every problem at once, each naming the file and the key.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from transforms.flow.config_io import (  # YAML, `--set`, secrets: shared with the tools (jobs/config.py)
    OverrideError,
    YamlFileError,
    read_yaml,
    set_dotted,
    warn_literal_secrets,
)
from transforms.flow.recipe_check import check_whole, model_at, place_of, suggest
from transforms.flow.recipe_graph import (  # noqa: F401  (re-exported: the recipe's public names)
    check_graph,
    cond_param,
    conditions,
    holds,
    order,
    secret_names_of,
    wanted_places,
)
from transforms.flow.recipe_schema import (  # noqa: F401  (re-exported)
    CardSection,
    EvaluateSpec,
    Language,
    Recipe,
    RecipeError,
    ReleaseFile,
    ReleaseSpec,
    ReviewSpec,
    RoundsSpec,
    RunReport,
    RunSpec,
)

REPO = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO / "jobs" / "recipes"
_VAR = re.compile(r"\$\{([A-Za-z_][\w.]*(?::[\w-]+)?)\}")
# known only when a run starts, filled in as its stages are built: the run's folder, the lake, an earlier run's
# kept rows (`${curated:<run>}`) and, in quota rounds, the rows earlier rounds accepted (`${accepted}`)
LATE = ("run_dir", "lake_root", "accepted")


def recipe_path(name_or_path: str) -> Path:
    """`jobs/recipes/<name>.yaml` for a name, the file itself for a path."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return Path(name_or_path)
    return RECIPES_DIR / f"{name_or_path}.yaml"


def is_recipe(name_or_path: str) -> bool:
    return recipe_path(name_or_path).exists()


def list_recipes() -> list[tuple[str, str]]:
    """(name, description) of every recipe under jobs/recipes/."""
    out = []
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out.append((str(data.get("recipe", path.stem)), str(data.get("description", ""))))
    return out


def read_recipe_file(path: Path) -> dict[str, Any]:
    """A recipe (or a recipe's `--config` file) as plain data; a repeated key is refused with its line."""
    if not path.exists():
        raise RecipeError(path, "(file)", "no such recipe file" + (
            f"; recipes here: {', '.join(n for n, _ in list_recipes())}" if path.parent == RECIPES_DIR else ""))
    try:
        return read_yaml(path, empty_ok=False)
    except YamlFileError as err:
        raise RecipeError(path, err.where, err.problem) from err


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], path: Path) -> dict[str, Any]:
    """`--set` values: a param by its name, `engines`, or any dotted key (`runs.<name>.<...>` finds the
    run by name, `stages.<stage>` the stage by its `stage` or `as` name)."""
    data = copy.deepcopy(data)
    params = data.setdefault("params", {})
    for key, value in overrides.items():
        head = key.split(".", 1)[0]
        if key == "input" and isinstance(params.get("input"), dict) and "paths" in params["input"] \
                and isinstance(value, str | list):  # `--input PATH ...` of a recipe whose input is a mapping
            params["input"]["paths"] = [value] if isinstance(value, str) else list(value)
            continue
        if key in params or key in ("engines", "lake", "num_cpus", "fuse", "ray_address", "secrets"):
            (params if key in params else data)[key] = value
            continue
        if "." not in key and key not in Recipe.model_fields:
            raise RecipeError(path, key, f"no such param; this recipe's params: {', '.join(sorted(params)) or 'none'}"
                              " (or a dotted key such as runs.<run>.stages.<stage>.<field>)")
        try:  # inside a param that is a mapping, else anywhere in the recipe
            set_dotted(params if isinstance(params.get(head), dict) else data, key, value)
        except OverrideError as err:
            raise RecipeError(path, err.key, err.problem) from err
    return data


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    """A `--config` file: `params:` entries by their names, every other key as given."""
    out = dict(data.pop("params", {}) or {})
    out.update(data)
    return out


def load_recipe(name_or_path: str, overrides: dict[str, Any] | None = None,
                config_file: str | None = None) -> Recipe:
    """Read, override (`--config FILE`, then `--set`), interpolate and check a recipe; nothing is
    imported or run. `--config` holds params and dotted keys, like `--set`."""
    path = recipe_path(name_or_path)
    data = read_recipe_file(path)
    warn_literal_secrets(data, str(path))
    if config_file:
        extra = read_recipe_file(Path(config_file))
        warn_literal_secrets(extra, f"config file {config_file}")
        data = apply_overrides(data, _flat(extra), Path(config_file))
    warn_literal_secrets({k: v for k, v in (overrides or {}).items() if not isinstance(v, dict)}, "--set")
    data = apply_overrides(data, overrides or {}, path)
    data["path"] = str(path.resolve())
    data["data"] = {k: _data_file(v, path, k) for k, v in (data.get("data") or {}).items()}
    # params may name data files and the language; everything else may name params too
    data["params"] = interpolate(data.get("params") or {}, {k: v for k, v in data.items() if k != "params"},
                                 path, "params")
    data = interpolate(data, data, path)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as err:
        raise RecipeError.many(path, [(_key_name(data, e["loc"]), _message(e)) for e in err.errors()]) from err
    problems: list[tuple[str, str]] = []
    try:
        check_graph(recipe, path)
    except RecipeError as err:
        problems += err.problems
    problems += check_whole(recipe)
    if problems:
        raise RecipeError.many(path, problems)
    return recipe


def _message(error: Any) -> str:
    """pydantic's message, with the valid keys and the nearest one for an unknown key."""
    if error["type"] == "extra_forbidden" and error["loc"]:
        holder = model_at(Recipe, error["loc"])
        if holder is not None:
            return suggest(str(error["loc"][-1]), list(holder.model_fields))
    return str(error["msg"])


def _key_name(data: dict[str, Any], loc: tuple[Any, ...]) -> str:
    """`runs.final.review.of` rather than `runs.2.review.of`."""
    parts: list[str] = []
    node: Any = data
    for part in loc:
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            if parts and parts[-1] == "stages":  # a stage entry by its stage's name
                parts[-1] = place_of(node, part)
                node = node[part]
                continue
            node = node[part]
            parts.append(str(node.get("name", part)) if isinstance(node, dict) else str(part))
        else:
            node = node.get(part) if isinstance(node, dict) else None
            parts.append(str(part))
    return ".".join(parts)


def _portable(found: Path) -> str:
    """A data file inside a Ray job's uploaded working dir, relative to it: every node unpacks the working dir
    under a path of its own, and a task's working directory is its node's copy (docs/cluster.md)."""
    cwd = Path.cwd().resolve()
    if "working_dir_files" in cwd.parts and found.is_relative_to(cwd):
        return str(found.relative_to(cwd))
    return str(found)


def _data_file(value: Any, path: Path, key: str) -> str:
    if not isinstance(value, str):
        raise RecipeError(path, f"data.{key}", "must be a path")
    for base in (Path.cwd(), path.resolve().parent, REPO):
        candidate = Path(value) if Path(value).is_absolute() else base / value
        if candidate.exists():
            return _portable(candidate.resolve())
    raise RecipeError(path, f"data.{key}", f"{value} not found (tried the working directory, the recipe's folder "
                      "and the repository)")


def interpolate(node: Any, root: dict[str, Any], path: Path, key: str = "") -> Any:
    """`${name}` (a param), `${data.x}`, `${language.code}`: a whole-string reference keeps the value's type."""
    if isinstance(node, dict):
        return {k: v if k == "params" and not key else interpolate(v, root, path, f"{key}.{k}".strip("."))
                for k, v in node.items()}
    if isinstance(node, list):
        if key.endswith(".stages") or key == "stages":  # stage entries by their stage's name
            return [interpolate(v, root, path, f"{key[:-len('stages')]}{place_of(node, i)}")
                    for i, v in enumerate(node)]
        return [interpolate(v, root, path, f"{key}.{v.get('name', i) if isinstance(v, dict) else i}")
                for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node
    def late(name: str) -> bool:
        return name in LATE or name.startswith("curated:")

    whole = _VAR.fullmatch(node)
    if whole and not late(whole.group(1)):
        return _lookup(whole.group(1), root, path, key)
    return _VAR.sub(lambda m: m.group(0) if late(m.group(1)) else str(_lookup(m.group(1), root, path, key)), node)


def _lookup(name: str, root: dict[str, Any], path: Path, key: str) -> Any:
    scope: Any = root.get("params", {}) if "." not in name else root
    for part in name.split("."):
        if not isinstance(scope, dict) or part not in scope:
            raise RecipeError(path, key, f"${{{name}}} is not defined (params: "
                              f"{', '.join(sorted(root.get('params', {})))})")
        scope = scope[part]
    return scope
