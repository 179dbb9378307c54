"""What the runs of one recipe run share: the run ids, the engines, the manifests so far; how a
stage is built from its recipe entry."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.flow.engines import resolve_engines, use_doubles
from transforms.flow.recipe import Recipe, RunSpec
from transforms.flow.recipe_schema import StageEntry
from transforms.flow.registry import stage_class


class RecipeRunError(RuntimeError):
    """A run of the recipe failed; the message names the run and what went wrong. `exit_code` is the
    command's: 1, or 2 when an input was refused (transforms.io.common.RefusedInputError)."""

    exit_code: int = 1


class RunEntry(BaseModel):
    run_id: str
    status: str = "pending"
    fingerprint: str = ""
    batch: str | None = None


class Context:
    """What every run of one recipe run shares."""

    def __init__(self, recipe: Recipe, lake: Lake, root: str, resume: bool, doubles: dict[str, Any] | None,
                 command: list[str] | None):
        self.recipe, self.lake, self.root, self.resume = recipe, lake, root, resume
        self.engines = resolve_engines(recipe)
        self.doubles = doubles or {}
        self.command = command or ["piqaforge", "run", recipe.path or recipe.recipe]
        self.ids: dict[str, str] = {}          # run name -> the run id its children read
        self.skipped: set[str] = set()          # runs switched off by `when` (and every run reading one)
        self.more: dict[str, list[RunManifest]] = {}  # a review's adjudication rounds, read with it
        self.manifests: dict[str, RunManifest] = {}
        # run name -> (its run dir, {place: stage}): the builds check_stages made that the run uses as they are
        # (transforms/flow/runs/common.py built_stages); a run hands its own back when it ends
        self.checked: dict[str, tuple[Path, dict[str, Any]]] = {}

    def build(self, entry: StageEntry, run_dir: Path, accepted: list[str] | None = None) -> Any:
        """A stage built from its recipe entry (`build_stage`): every build of a recipe run goes through here,
        the check's and the runs' (a test counts them by wrapping this method)."""
        return build_stage(self, entry, run_dir, accepted)

    def run_id(self, spec: RunSpec) -> str:
        return f"{self.root}-{spec.name}"

    def late(self, run_dir: Path, accepted: list[str] | None = None) -> dict[str, Any]:
        """The values of the late variables for a run in `run_dir`."""
        values: dict[str, Any] = {"run_dir": str(run_dir), "lake_root": str(self.lake.root), "accepted": accepted or []}
        for name, manifest in self.manifests.items():
            if manifest.outputs.get("curated"):
                values[f"curated:{name}"] = manifest.outputs["curated"]
        for name in self.recipe.params:  # a run not run yet: its path, for checking the stage before anything runs
            values.setdefault(f"curated:{name}", "")
        for spec in self.recipe.runs:
            values.setdefault(f"curated:{spec.name}", str(self.lake.zone("curated", self.recipe.dataset,
                                                                         self.run_id(spec))))
        return values

    def resume_command(self) -> str:
        return shlex.join([*self.command, "--lake", str(self.lake.root), "--resume", self.root])


def spec_fingerprint(ctx: Context, spec: RunSpec) -> str:
    """A run's resolved spec with the engines it will use: a changed spec is never skipped."""
    blob = json.dumps({"spec": spec.model_dump(mode="json"), "engines": ctx.engines,
                       "upstream": [(ctx.ids.get(p), getattr(ctx.manifests.get(p), "finished_at", None))
                                    for p in spec.upstream()],  # an upstream run redone makes this one stale
                       "rounds": [m.run_id for p in spec.upstream() for m in ctx.more.get(p, [])]},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def late_values(node: Any, values: dict[str, Any]) -> Any:
    """`${run_dir}`, `${lake_root}`, `${curated:<run>}` and `${accepted}` (a list, spliced into the list it
    stands in) in a stage's fields, known once the run starts."""
    if isinstance(node, dict):
        return {k: late_values(v, values) for k, v in node.items()}
    if isinstance(node, list):
        out: list[Any] = []
        for v in node:
            if v == "${accepted}":
                out += list(values.get("accepted", []))
            else:
                out.append(late_values(v, values))
        return out
    if isinstance(node, str) and "${" in node:
        for name, value in values.items():
            if isinstance(value, str):
                node = node.replace("${" + name + "}", value)
    return node


# Late values the check before anything runs can only guess: `${accepted}` grows round by round, and
# `${curated:<run>}` is the path a run's children read, known once that run is done (a review's children read
# its import's run). `${run_dir}` and `${lake_root}` are known from the start.
CHANGING_LATE = ("${accepted}", "${curated:")


def changes_late(ctx: Context, entry: StageEntry) -> bool:
    """Whether a stage entry (its engine roles filled) holds a late value that may differ at run time."""
    from transforms.flow.engines import fill_roles

    filled = fill_roles(entry.fields, ctx.engines, f"stage {entry.stage}")
    text = json.dumps(filled, default=str)
    return any(value in text for value in CHANGING_LATE)


def build_stage(ctx: Context, entry: StageEntry, run_dir: Path, accepted: list[str] | None = None) -> Any:
    """A stage from its recipe entry: the registered class validated with the entry's fields, engine
    roles filled from the profile, the run's folders where the stage asks for them."""
    from transforms.flow.engines import fill_roles

    fields = fill_roles(entry.fields, ctx.engines, f"stage {entry.stage}")
    fields = late_values(fields, ctx.late(run_dir, accepted))
    cls = stage_class(entry.stage)
    if "resources" in getattr(cls, "model_fields", {}):
        fields = engine_placement(fields)
    defaults = {"cache_dir": str(ctx.lake.root / "cache" / "llm"), "feedback_dir": str(run_dir / "feedback"),
                "output_dir": str(run_dir), "lake": str(ctx.lake.root)}
    for name, value in defaults.items():
        if name in getattr(cls, "model_fields", {}) and fields.get(name) is None:
            fields[name] = value
    stage = cls.model_validate(fields)
    if ctx.recipe.secrets and hasattr(stage, "resources"):  # recipe-level secrets reach every stage's workers
        stage.resources.secrets = sorted(set(stage.resources.secrets) | set(ctx.recipe.secrets))
    return use_doubles(stage, ctx.doubles)


def _engines_in(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        if "backend" in node and "model" in node:
            return [node]
        return [e for v in node.values() for e in _engines_in(v)]
    if isinstance(node, list):
        return [e for v in node for e in _engines_in(v)]
    return []


def _nested_stage(node: Any) -> bool:
    """A stage inside a stage's fields (the distilled prefilter's teacher ensemble): placed the same way."""
    return isinstance(node, dict) and "backend" not in node and bool(_engines_in(node)) and \
        any(k in node for k in ("classifiers", "resources"))


def engine_placement(fields: dict[str, Any]) -> dict[str, Any]:
    """A stage's resources with its engines' placement under them (jobs/engines.yaml `resources:` of a role):
    the environment the engine needs and the most GPUs/CPUs any of its engines asks for. What the stage
    sets itself wins, so a recipe's or cluster config's `resources` stay in charge."""
    fields = {k: engine_placement(v) if k != "resources" and _nested_stage(v) else v for k, v in fields.items()}
    places = [e["resources"] for e in _engines_in({k: v for k, v in fields.items() if k != "resources"})
              if isinstance(e.get("resources"), dict)]
    if not places:
        return fields
    merged: dict[str, Any] = {}
    for place in places:
        for key, value in place.items():
            if key in ("gpus", "cpus", "memory_gb"):
                merged[key] = max(float(value), float(merged.get(key, 0)))
            else:
                merged.setdefault(key, value)
    own = dict(fields.get("resources") or {})
    return {**fields, "resources": {**merged, **own}}


def entry_next(ctx: Context, entry: RunEntry) -> str:
    folder = ctx.lake.root / "review" / str(entry.batch)
    return (f"fill the batch in {folder} (its README.md lists the verdict values), then "
            f"`piqaforge review import {entry.batch} --from FILLED --lake {ctx.lake.root}` and `{ctx.resume_command()}`")


def say(message: str) -> None:
    print(message, file=sys.stderr)


def check_stages(ctx: Context) -> None:
    """Every stage of every run built once before anything runs: a bad field is a RecipeError naming the
    run, the stage and the key (exit 2), not a failure an hour into the recipe. A build whose fields hold no
    late value that changes (`changes_late`) is kept in `ctx.checked` for its run to use: built once."""
    from pydantic import ValidationError

    from transforms.flow.recipe import RecipeError, wanted_places
    from transforms.flow.recipe_check import suggest

    problems: list[tuple[str, str]] = []
    for run in ctx.recipe.runs:
        run_dir = ctx.lake.run_dir(ctx.run_id(run))
        kept: dict[str, Any] = {}
        ctx.checked[run.name] = (run_dir, kept)
        for where, entry in wanted_places(run, ctx.recipe.params):
            try:
                stage = ctx.build(entry, run_dir)
                if not changes_late(ctx, entry):
                    kept[where] = stage
            except ValidationError as err:
                for e in err.errors():
                    key = ".".join(str(p) for p in e["loc"])
                    if e["type"] == "extra_forbidden" and e["loc"]:
                        msg = suggest(str(e["loc"][-1]), list(getattr(stage_class(entry.stage), "model_fields", {})))
                    else:
                        msg = str(e["msg"])
                    got = f"; got {_shown(e.get('input'))}" if key and e["type"] != "extra_forbidden" else ""
                    problems.append((f"runs.{run.name}.{where}.{key}".rstrip("."), f"{msg} (stage {entry.stage}{got})"))
    if problems:
        raise RecipeError.many(ctx.recipe.path, problems)


def _shown(value: Any, limit: int = 120) -> str:
    """A value for an error message, shortened at a word boundary (never mid-word)."""
    text = str(value)
    if len(text) <= limit:
        return text
    cut = max(text.rfind(c, 0, limit) for c in " ,")
    return text[:cut if cut > 0 else limit].rstrip(" ,") + " …"
