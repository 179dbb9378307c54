"""What every run kind shares: the stages a run builds (the check's builds reused), the skip of a run a
resumed recipe finished before, the law re-checked and the report written, the run's `reports`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.flow.context import Context, RecipeRunError, RunEntry, late_values, say
from transforms.flow.recipe import Recipe, RunSpec, wanted_places


def built_stages(ctx: Context, spec: RunSpec, run_dir: Path, accepted: list[str] | None = None, *,
                 take: bool = False) -> list[tuple[str, Any]]:
    """(place, stage) of the source and stages a run builds (`wanted_places`: the one `when` filter). A stage
    `check_stages` built for this run dir is used as it is (its fields hold no late value that changes); the
    others are built now, with the late values as they are now. `take` hands the checked builds over to the
    run that uses them: a second use (quota round 2 on) builds afresh, since each round is a run of its own
    through the runner and a stage object carries the run it ran in (set up in the driver, its finished marker)."""
    got = ctx.checked.pop(spec.name, None) if take else ctx.checked.get(spec.name)
    checked = got[1] if got is not None and got[0] == run_dir else {}
    return [(place, checked[place] if place in checked else ctx.build(entry, run_dir, accepted))
            for place, entry in wanted_places(spec, ctx.recipe.params)]


def finished(ctx: Context, spec: RunSpec, entry: RunEntry, fingerprint: str) -> RunManifest | None:
    """The run's manifest when a resumed recipe may skip it: succeeded, with the same resolved spec."""
    path = ctx.lake.manifest_path(entry.run_id)
    if not (ctx.resume and path.exists() and entry.fingerprint == fingerprint):
        return None
    manifest = RunManifest.load(path)
    return manifest if manifest.status in ("succeeded", "awaiting_review") else None


def reused(ctx: Context, spec: RunSpec, entry: RunEntry, fingerprint: str) -> bool:
    """A resumed recipe skips a run that finished with the same resolved spec: its children read it as it is."""
    if (done := finished(ctx, spec, entry, fingerprint)) is None:
        return False
    ctx.ids[spec.name], ctx.manifests[spec.name] = entry.run_id, done
    say(f"{ctx.recipe.recipe}: run {spec.name} ({entry.run_id}) finished before: skipped")
    return True


def finish(ctx: Context, spec: RunSpec, entry: RunEntry, manifest: RunManifest, fingerprint: str) -> None:
    """The run's law re-checked and its report written; the recipe's record and its children see it."""
    check_and_report(ctx, manifest)
    entry.status, entry.fingerprint = manifest.status, fingerprint
    ctx.ids[spec.name], ctx.manifests[spec.name] = entry.run_id, manifest


def check_and_report(ctx: Context, manifest: RunManifest) -> None:
    from transforms.core.manifest import conservation_errors
    from transforms.report.run_report import write_report

    write_report(manifest, ctx.lake.run_dir(manifest.run_id) / "report.html")
    if errors := conservation_errors(manifest):
        raise RecipeRunError(f"run {manifest.run_id}: rows not accounted for in stage {errors[0]}")


def run_config(ctx: Context, spec: RunSpec) -> dict[str, Any]:
    return {"recipe": ctx.recipe.recipe, "recipe_file": ctx.recipe.path, "recipe_run": ctx.root,
            "engines": ctx.recipe.engines, "params": ctx.recipe.params, "run": spec.model_dump(mode="json")}


def after_failure(ctx: Context, run_id: str) -> None:
    """A failed run gets its report too: the funnel shows where it stopped."""
    from transforms.report.run_report import write_report

    path = ctx.lake.manifest_path(run_id)
    if path.exists():
        write_report(RunManifest.load(path), ctx.lake.run_dir(run_id) / "report.html")


def measure(ctx: Context, spec: RunSpec, manifest: RunManifest) -> None:
    """The run's `reports`: figures measured on its finished outputs, each in its own file."""
    import inspect

    from transforms.flow.recipe_check import resolve_ref

    for report in spec.reports:
        make = resolve_ref(report.make, f"runs.{spec.name}.reports.{report.name}.make")
        args = late_values(report.args, ctx.late(ctx.lake.run_dir(manifest.run_id)))
        if "runs" in inspect.signature(make).parameters:  # the runs so far, by name
            args["runs"] = dict(ctx.manifests)
        figures = make(manifest, ctx.lake, **args)
        if figures is not None:
            path = ctx.lake.run_dir(manifest.run_id) / f"{report.name}.json"
            path.write_text(json.dumps(figures, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
            if report.html:  # the run's report embeds every <name>.section.html beside it
                html = resolve_ref(report.html, f"runs.{spec.name}.reports.{report.name}.html")(figures)
                path.with_name(f"{report.name}.section.html").write_text(html, encoding="utf-8")


def run_stages(recipe: Recipe, run_name: str, *, lake: str | Path = "lake", run_id: str = "run",
               doubles: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
    """The source (None for a run that reads its parents) and stages of one run of `recipe`, built as
    the orchestrator builds them (tests and benchmarks run them alone or in part)."""
    ctx = Context(recipe, Lake(lake), run_id, False, doubles, None)
    spec = recipe.run(run_name)
    built = built_stages(ctx, spec, ctx.lake.run_dir(ctx.run_id(spec)))
    return dict(built).get("source"), [stage for place, stage in built if place != "source"]
