"""A recipe checked whole before anything runs: every problem at once, keyed by run and stage *names*.

`load_recipe` (transforms/flow/recipe.py) collects what this module finds together with the recipe model's
own validation errors and its graph checks, and raises one `RecipeError` that lists them all:

* every key of the recipe or of a stage that is not a field, with the valid fields and the nearest match
  (`anotators` → did you mean `annotators`?);
* every labels file a judge names (`judge.labels`, `judge.extra_labels`) of a stage the params build: it
  must exist and each row must carry the judge's `label` column (the refusal names file, line, the missing
  column and the columns the row has), so a seeds file labelled for another recipe stops here, not after
  the crawl's front half ran;
* every `module:attr` reference (hooks `make`, `html`, `requests`, `context`, a stage given as
  `module:Class`), resolved at load: the module must exist and define the name. Checked from the module's
  source (`ast`), so loading a recipe imports no hook module; `resolve_ref` is the one place that imports
  them when a run needs them.

A stage entry's place is `runs.<run>.source` or `runs.<run>.stages.<name>` (the entry's `as`, else its stage's
name, `#2` for its second use in the same run), the same at load and at build time.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transforms.flow.recipe_schema import ENTRY_KEYS, StageEntry

REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# fields build_stage fills where a stage declares them (transforms/flow/context.py)
FILLED_FIELDS = ("cache_dir", "feedback_dir", "output_dir", "lake")


def suggest(key: str, valid: Sequence[str]) -> str:
    """`did you mean 'annotators'? valid: a, b, c` for an unknown key."""
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown key {key!r}; {hint}valid keys: {', '.join(sorted(valid))}"


def stage_places(run: Any) -> list[tuple[str, StageEntry]]:
    """(place, entry) of a run's source and stages: `source`, `stages.<name>`, `stages.<name>#2`."""
    out: list[tuple[str, StageEntry]] = [("source", run.source)] if run.source is not None else []
    return out + [(place_of(run.stages, i), entry) for i, entry in enumerate(run.stages)]


def _entry_name(entry: Any) -> str | None:
    if isinstance(entry, StageEntry):
        return entry.entry_name
    name = entry.get("as") or entry.get("stage") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else None


def place_of(stages: Sequence[Any], index: int) -> str:
    """`stages.<name>[#k]` of the index-th entry of a run's stage list (entries, or the raw mappings before
    they are read): the name is the entry's `as`, else its stage's name."""
    name = _entry_name(stages[index])
    if name is None:  # an entry without a stage: by its position (1 = the first entry)
        return f"stages.(entry {index + 1})"
    k = sum(1 for s in stages[:index + 1] if _entry_name(s) == name)
    return f"stages.{name}" + (f"#{k}" if k > 1 else "")


def resolve_ref(ref: str, what: str = "reference") -> Any:
    """transforms.flow.registry.resolve_ref (the one resolver), here beside the load-time check of the same refs."""
    from transforms.flow.registry import resolve_ref as resolve

    return resolve(ref, what)


def ref_problem(ref: str) -> str | None:
    """Why 'module:attr' would not resolve, read from the module's source (nothing imported); None if it does."""
    if not REF.match(ref):
        return f"{ref!r} is not 'module:attr'"
    module_name, attr = ref.split(":")
    from transforms.flow.registry import working_dir_on_path

    working_dir_on_path()
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"{ref!r}: no module {module_name!r}"
    origin = spec.origin
    if not origin or not origin.endswith(".py"):
        return None  # a compiled or namespace module: trust it until it is imported
    names = _top_level_names(origin)
    if attr in names:
        return None
    near = difflib.get_close_matches(attr, sorted(names), n=1, cutoff=0.6)
    return f"{ref!r}: {module_name} has no {attr!r}" + (f"; did you mean {near[0]!r}?" if near else "")


def _top_level_names(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _references(recipe: Any) -> list[tuple[str, str]]:
    """(key, 'module:attr') of every hook the recipe names."""
    out: list[tuple[str, str]] = []
    for run in recipe.runs:
        base = f"runs.{run.name}"
        out += [(f"{base}.reports.{r.name}.{k}", v) for r in run.reports for k, v in (("make", r.make), ("html", r.html))
                if v]
        if run.rounds is not None:
            out.append((f"{base}.rounds.requests", run.rounds.requests))
        if run.review is not None and run.review.context:
            out.append((f"{base}.review.context", run.review.context))
        if run.release is not None:
            for i, section in enumerate(run.release.card):
                out.append((f"{base}.release.card.{i}.make", section.make))
            out += [(f"{base}.release.files.{f.name}.make", f.make) for f in run.release.files]
    return [(k, v) for k, v in out if isinstance(v, str)]


def stage_field_problems(cls: Any, entry: StageEntry) -> list[tuple[str, str]]:
    """(key, problem) of a stage entry's unknown keys and missing required fields."""
    fields = getattr(cls, "model_fields", None)
    if fields is None:
        return []
    given = entry.fields
    problems = [(k, suggest(k, [*fields, *ENTRY_KEYS])) for k in given if k not in fields]
    missing = [n for n, f in fields.items() if f.is_required() and n not in given and n not in FILLED_FIELDS]
    problems += [(n, f"required field missing ({_described(fields[n])})") for n in missing]
    return problems


def _described(field: Any) -> str:
    return (field.description or "no description").split(". ")[0].rstrip(".")


def check_whole(recipe: Any) -> list[tuple[str, str]]:
    """Every stage entry's keys against its class's fields and every hook reference, all problems at once."""
    from transforms.flow.registry import known, stage_class

    problems: list[tuple[str, str]] = []
    for run in recipe.runs:
        for place, entry in stage_places(run):
            stage = entry.stage
            if not known(stage):
                continue  # the graph check names these
            where = f"runs.{run.name}.{place}"
            if ":" in stage and (why := ref_problem(stage)):
                problems.append((where, why))
                continue
            try:
                cls = stage_class(stage)
            except (ImportError, KeyError) as err:
                problems.append((where, str(err).strip("'\"")))
                continue
            problems += [(f"{where}.{k}", f"{p} (stage {stage}; `piqaforge stages {stage}` lists its fields)")
                         for k, p in stage_field_problems(cls, entry)]
            if entry.wanted(recipe.params):
                problems += [(f"{where}.{k}", p) for k, p in judge_label_problems(entry.fields)]
    problems += [(k, why) for k, ref in _references(recipe) if (why := ref_problem(ref))]
    return problems


def judge_label_problems(node: Any, key: str = "") -> list[tuple[str, str]]:
    """(key, problem) of the labels files of every judge config (a mapping under a `judge` key) in a stage's
    fields: missing, or rows without the judge's `label` column (file, line, the columns the row has)."""
    from transforms.judge.labels import labels_file_problems

    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            here = f"{key}.{k}".strip(".")
            if k == "judge" and isinstance(v, dict):
                out += [(f"{here}.{f}", p) for f, p in labels_file_problems(v)]
            else:
                out += judge_label_problems(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += judge_label_problems(v, f"{key}.{v.get('name', i) if isinstance(v, dict) else i}")
    return out


def model_at(model: Any, loc: Sequence[Any]) -> Any:
    """The pydantic model that holds the last key of `loc` (to list its valid keys), or None."""
    import typing

    node = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(node, "model_fields", None)
        if not fields or part not in fields:
            return None
        node = _inner_model(fields[part].annotation, typing)
        if node is None:
            return None
    return node if getattr(node, "model_fields", None) else None


def _inner_model(annotation: Any, typing: Any) -> Any:
    if getattr(annotation, "model_fields", None) is not None:
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg, typing)
        if found is not None:
            return found
    return None
