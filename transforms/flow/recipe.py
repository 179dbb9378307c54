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
evaluated ...). Nothing here imports a stage: `load_recipe` checks the file's shape, names and graph
and says what is wrong in one line naming the file and the key.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from transforms.flow.recipe_check import check_whole, model_at, place_of, stage_places, suggest
from transforms.flow.registry import STAGES, known
from transforms.release.licences import SourceSpec

REPO = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO / "jobs" / "recipes"
_VAR = re.compile(r"\$\{([A-Za-z_][\w.]*(?::[\w-]+)?)\}")
_RUN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# known only when a run starts, filled in as its stages are built: the run's folder, the lake, an earlier run's
# kept rows (`${curated:<run>}`) and, in quota rounds, the rows earlier rounds accepted (`${accepted}`)
LATE = ("run_dir", "lake_root", "accepted")


class RecipeError(ValueError):
    """A recipe file that cannot run: naming the file, the key and what is wrong; with several problems,
    one line each (`problems`), the first also as `key` / `problem`."""

    def __init__(self, path: str | Path, key: str, problem: str,
                 more: list[tuple[str, str]] | None = None):
        self.path, self.key, self.problem = str(path), key, problem
        self.problems = [(key, problem), *(more or [])]
        if len(self.problems) == 1:
            super().__init__(f"{path}: {key}: {problem}")
        else:
            lines = "\n".join(f"  {k}: {p}" for k, p in self.problems)
            super().__init__(f"{path}: {len(self.problems)} problems (all of them; nothing has run):\n{lines}")

    @classmethod
    def many(cls, path: str | Path, problems: list[tuple[str, str]]) -> RecipeError:
        return cls(path, problems[0][0], problems[0][1], problems[1:])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Language(_Strict):
    code: str = Field(..., description="ISO 639-1 (or -3) code of the benchmark's language.")
    name: str | None = Field(None, description="Its English name, for cards and prompts.")
    script: str | None = Field(None, description="Language code whose script letters the items use (default: "
                               "`code`); transforms/text/textcheck.py lists the scripts it can check.")


class ReviewSpec(_Strict):
    of: str = Field(..., description="The run whose kept items are reviewed.")
    mode: Literal["export", "auto", "none"] = Field("export", description="export: write a batch for people "
                                                    "and stop (awaiting_review); auto: LLM annotators fill it; "
                                                    "none: pass the items through unreviewed.")
    to: Literal["csv", "labelstudio"] = Field("csv", description="Batch format for people.")
    annotators: int = Field(2, ge=1, description="Annotators per item.")
    consensus: dict[str, Any] = Field(default_factory=lambda: {"rule": "unanimous"},
                                      description="ConsensusRule (transforms/review/consensus.py).")
    limit: int | None = Field(None, ge=1, description="Export at most this many items.")
    auto: dict[str, Any] = Field(default_factory=dict, description="AutoReviewConfig for mode auto; its "
                                 "engines default to the profile's `annotators`.")
    guidelines: str | None = Field(None, description="A Markdown file copied into the batch for reviewers.")
    context: str | None = Field(None, description="'module:function(lake, batch)' writing side files "
                                "(context.csv ...) into the batch folder.")


class CardSection(_Strict):
    title: str
    make: str = Field(..., description="'module:function(table, runs, **args) -> markdown': the section's text "
                      "from the released table and the recipe's run manifests (by run name).")
    args: dict[str, Any] = Field(default_factory=dict)


class ReleaseFile(_Strict):
    name: str = Field(..., description="File name inside the release folder.")
    make: str = Field(..., description="'module:function(table) -> str': the file's text from the released table.")


class ReleaseSpec(_Strict):
    of: str = Field(..., description="The run whose kept items are released.")
    suite: str = Field("generic", description="Suite in expectations/suites/.")
    suite_overrides: dict[str, Any] = Field(default_factory=dict)
    version: str | None = Field(None, description="Release version (default: today's UTC date).")
    audit: bool = Field(True, description="Run the artifact audit; a flagged audit, or one that cannot run, "
                        "refuses the release. false publishes without it and the card says so.")

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return None if value is None else str(value)  # `--version 2` arrives as a YAML number
    audit_bound: float = Field(0.6, gt=0, lt=1, description="Solution-only / goal-only baseline accuracy "
                               "(lower confidence bound) above which the release is refused.")
    card: list[CardSection] = Field(default_factory=list, description="Recipe sections of the dataset card.")
    sources: list[str | SourceSpec] = Field(default_factory=list, description="What the items were made from: "
                                            "prose for the card, or {name, licence, url, hub_id, attribution, "
                                            "citation} checked against the release's licence. The sources of "
                                            "bundled files are found by themselves (lake/samples/licences.yaml).")
    licence: str | None = Field(None, description="The release's licence (SPDX or Hub id); default: the recipe's "
                                "`licence`. A release without one is refused before anything is written.")
    columns: list[str] | None = Field(None, description="Provenance columns published beside the benchmark's "
                                      "(default: transforms.release.hub.DEFAULT_PROVENANCE); nothing else is.")
    repo_id: str | None = Field(None, description="The Hub dataset id (ORG/NAME) the release will be published "
                                "as; its lm-eval tasks then read it from the Hub.")
    pretty_name: str | None = Field(None, description="The card's pretty_name (default: the dataset name).")
    annotators: Literal["expert-generated", "crowdsourced"] = Field(
        "expert-generated", description="annotations_creators when people reviewed the items.")
    files: list[ReleaseFile] = Field(default_factory=list, description="Recipe files written into the release "
                                     "with the rest, before RELEASED (e.g. the paper's appendix columns).")


class EvaluateSpec(_Strict):
    of: str = Field(..., description="The release run to evaluate.")
    models: str | list[str] | dict[str, Any] = Field("@evaluated", description="'@evaluated' (the profile's), "
                                                     "names of the profile's evaluated models, or name -> engine.")
    prompts: dict[str, str] = Field(default_factory=dict)
    limit: int | None = Field(None, ge=1, description="Fixed-seed subset of items (generation and log-lik).")
    options: dict[str, Any] = Field(default_factory=dict, description="Other fields of the evaluate job.")


class RoundsSpec(_Strict):
    requests: str = Field(..., description="'module:function(k, deficits, accepted, **args) -> rows': round "
                          "k's request rows.")
    args: dict[str, Any] = Field(default_factory=dict)
    group_column: str = "category"
    quotas: dict[str, int] = Field(..., description="Accepted items wanted per group.")
    max_rounds: int = Field(3, ge=1)
    patience: int = Field(1, ge=1, description="Stop after this many rounds in a row that accept nothing.")


class RunReport(_Strict):
    name: str = Field(..., description="File name (runs/<run id>/<name>.json).")
    make: str = Field(..., description="'module:function(manifest, lake, **args) -> dict' (a `runs` parameter gets "
                      "the runs so far, by name).")
    args: dict[str, Any] = Field(default_factory=dict)
    html: str | None = Field(None, description="'module:function(figures) -> html': the figures as a section of "
                             "the run's report (runs/<run id>/<name>.section.html).")


class RunSpec(_Strict):
    name: str = Field(..., description="Unique in the recipe; the run id is <recipe run id>-<name>.")
    parents: list[str] = Field(default_factory=list, description="Runs whose kept rows this run reads.")
    source: dict[str, Any] | None = None
    stages: list[dict[str, Any]] = Field(default_factory=list)
    rounds: RoundsSpec | None = None
    review: ReviewSpec | None = None
    release: ReleaseSpec | None = None
    evaluate: EvaluateSpec | None = None
    when: str | bool | list[str] = Field(True, description="Run only when this param is true (`name`, `!name`, "
                                         "`name=value`; a list: all of them); a run switched off switches off "
                                         "every run that reads it.")
    reports: list[RunReport] = Field(default_factory=list, description="Figures measured on the finished run, "
                                     "each written to runs/<run id>/<name>.json (the report shows them).")

    @model_validator(mode="after")
    def _one_kind(self) -> RunSpec:
        kinds = [k for k in ("source", "rounds", "review", "release", "evaluate") if getattr(self, k) is not None]
        if len(kinds) > 1:
            raise ValueError(f"a run is one of source, rounds, review, release, evaluate; this one has {kinds}")
        if not kinds and not self.parents:
            raise ValueError("a run needs a source, parents, rounds, review, release or evaluate")
        if kinds and kinds[0] in ("review", "release", "evaluate") and self.stages:
            raise ValueError(f"a {kinds[0]} run has no stages of its own")
        return self

    @property
    def kind(self) -> str:
        for k in ("source", "rounds", "review", "release", "evaluate"):
            if getattr(self, k) is not None:
                return k
        return "stages"

    def upstream(self) -> list[str]:
        """The runs this one reads."""
        spec = self.review or self.release or self.evaluate
        return [spec.of] if spec is not None else list(self.parents)


class Recipe(_Strict):
    recipe: str = Field(..., description="The recipe's name.")
    description: str = Field(..., description="One line for `piqaforge recipes`.")
    dataset: str = Field(..., description="Lake folder of every run.")
    language: Language
    licence: str | None = Field(None, description="SPDX id of the release's licence.")
    engines: str = Field("local", description="Engine profile (jobs/engines.yaml or engine_profiles).")
    engine_profiles: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Profiles of this "
                                                       "recipe, merged over jobs/engines.yaml's.")
    data: dict[str, str] = Field(default_factory=dict, description="Named data files (relative: to the working "
                                 "directory, else the recipe file, else the repository).")
    params: dict[str, Any] = Field(default_factory=dict, description="Values `--set NAME=VALUE` changes.")
    runs: list[RunSpec] = Field(..., min_length=1)
    num_cpus: int | None = Field(None, description="CPUs of a local Ray instance (default: all).")
    ray_address: str | None = None
    secrets: list[str] = Field(default_factory=list, description="Environment variables forwarded to workers.")
    path: str = Field("", description="Where the recipe was read from (set by the loader).")

    def run(self, name: str) -> RunSpec:
        for spec in self.runs:
            if spec.name == name:
                return spec
        raise KeyError(name)


# -- reading -----------------------------------------------------------------------------------------------
class _UniqueKeys(yaml.SafeLoader):
    """YAML whose mappings may not repeat a key (PyYAML keeps the last one silently)."""


def _mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; its keys may be overridden
            continue
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice",
                                                    key_node.start_mark)
        seen.add(key)
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)  # type: ignore[arg-type]


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
    if not path.exists():
        raise RecipeError(path, "(file)", "no such recipe file" + (
            f"; recipes here: {', '.join(n for n, _ in list_recipes())}" if path.parent == RECIPES_DIR else ""))
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        raise RecipeError(path, where, f"not valid YAML: {getattr(err, 'problem', None) or err}") from err
    if not isinstance(data, dict):
        raise RecipeError(path, "(file)", "must hold a mapping at the top level")
    import json

    # an anchor's values are shared objects in the loaded data: a copy each, so `--set` changes one place
    return dict(json.loads(json.dumps(data, default=str)))


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
        if "." in key and isinstance(params.get(head), dict):  # inside a param that is a mapping
            _set_path(params, key.split("."), value, path, key)
            continue
        if key in params or key in ("engines", "lake", "num_cpus", "ray_address", "secrets"):
            (params if key in params else data)[key] = value
            continue
        if "." not in key and key not in Recipe.model_fields:
            raise RecipeError(path, key, f"no such param; this recipe's params: {', '.join(sorted(params)) or 'none'}"
                              " (or a dotted key such as runs.<run>.stages.<stage>.<field>)")
        _set_path(data, key.split("."), value, path, key)
    return data


def warn_literal_secrets(data: dict[str, Any], origin: str) -> None:
    """A warning per literal secret in a recipe, a `--config` file or `--set`, naming the field; the values
    are redacted wherever they are recorded (docs/secrets.md)."""
    import logging

    from transforms.core.secrets import literal_secrets

    nested: dict[str, Any] = {}
    for key, value in data.items():  # dotted keys (`--set a.b.c=v`, a --config file) nested, so names show
        node = nested
        parts = str(key).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[parts[-1]] = value
    for field, why in literal_secrets(nested):
        logging.getLogger("piqaforge").warning(
            "%s: %s holds a literal secret (%s). It is recorded as <redacted>, but put the value in an environment "
            "variable and name it in `secrets: [NAME]` (recipe level) or the stage's `resources.secrets` instead "
            "(docs/secrets.md)", origin, field, why)


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    """A `--config` file: `params:` entries by their names, every other key as given."""
    out = dict(data.pop("params", {}) or {})
    out.update(data)
    return out


def _set_path(node: Any, keys: list[str], value: Any, path: Path, full: str) -> None:
    head, rest = keys[0], keys[1:]
    if isinstance(node, list):
        for item in node:
            if isinstance(item, dict) and head in (item.get("name"), item.get("as"), item.get("stage")):
                if not rest:
                    raise RecipeError(path, full, "cannot replace a whole run or stage with --set")
                return _set_path(item, rest, value, path, full)
        raise RecipeError(path, full, f"no run or stage named {head!r}")
    if not isinstance(node, dict):
        raise RecipeError(path, full, f"{head!r} is inside a value that is not a section")
    if not rest:
        node[head] = value
        return None
    return _set_path(node.setdefault(head, {}), rest, value, path, full)


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
        for where, spec in _stage_specs(run):
            stage = spec.get("stage")
            if not isinstance(stage, str):
                problems.append((f"runs.{run.name}.{where}", "needs `stage: <registered name or module:Class>`"))
                continue
            for cond in conditions(spec.get("when", True)):
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


def conditions(when: Any) -> list[str]:
    """`when` as a list of conditions (`name`, `!name`, `name=value`); true/false give none / one false."""
    if isinstance(when, bool):
        return [] if when else ["!__always__"]
    return [when] if isinstance(when, str) else list(when)


def cond_param(cond: str) -> str:
    return cond.lstrip("!").split("=", 1)[0].strip() if cond != "!__always__" else "__always__"


def holds(when: Any, params: dict[str, Any]) -> bool:
    """Whether every condition of `when` holds for these params."""
    for cond in conditions(when):
        if cond == "!__always__":
            return False
        name = cond_param(cond)
        if "=" in cond:  # `name=value`, or `!name=value` (any other value)
            if (str(params.get(name)) == cond.split("=", 1)[1].strip()) == cond.startswith("!"):
                return False
        elif bool(params.get(name)) == cond.startswith("!"):
            return False
    return True


def _stage_specs(run: RunSpec) -> list[tuple[str, dict[str, Any]]]:
    return stage_places(run)


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
    """Every variable a recipe forwards: its `secrets` and every stage's `resources.secrets`."""
    names = set(recipe.secrets)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            res = node.get("resources")
            if isinstance(res, dict) and isinstance(res.get("secrets"), list):
                names.update(str(n) for n in res["secrets"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk([r.model_dump() for r in recipe.runs])
    return sorted(names)
