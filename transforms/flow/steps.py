"""One run of a recipe, by kind: stages (a source or parents), quota rounds, review, release, evaluate.

Each returns "done", "awaiting_review" (the recipe stops until people's judgments are imported) or
"stop" (nothing left to release). Every run that reads rows is a run of the runner; its law is
re-checked from disk here and its report written, also when it fails.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from typing import Any

from transforms.core.manifest import RunManifest
from transforms.flow.context import (
    Context,
    RecipeRunError,
    RunEntry,
    build_stage,
    entry_next,
    late_values,
    say,
    spec_fingerprint,
)
from transforms.flow.recipe import RunSpec, holds


def run_one(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    off = [p for p in spec.upstream() if p in ctx.skipped]
    if off or not holds(spec.when, ctx.recipe.params):
        ctx.skipped.add(spec.name)
        entry.status = "skipped"
        say(f"{ctx.recipe.recipe}: run {spec.name} skipped ({'it reads ' + off[0] if off else 'when: ' + str(spec.when)})")
        return "done"
    if spec.review is not None:
        return review_run(ctx, spec, entry)
    if spec.release is not None:
        return release_run(ctx, spec, entry)
    if spec.evaluate is not None:
        return evaluate_run(ctx, spec, entry)
    return rows_run(ctx, spec, entry)


def _stage_wanted(ctx: Context, spec: dict[str, Any]) -> bool:
    """A stage entry's `when` (as a run's): the stage is built only when it holds."""
    return holds(spec.get("when", True), ctx.recipe.params)


def _finished(ctx: Context, spec: RunSpec, entry: RunEntry, fingerprint: str) -> RunManifest | None:
    """The run's manifest when a resumed recipe may skip it: succeeded, with the same resolved spec."""
    path = ctx.lake.manifest_path(entry.run_id)
    if not (ctx.resume and path.exists() and entry.fingerprint == fingerprint):
        return None
    manifest = RunManifest.load(path)
    return manifest if manifest.status in ("succeeded", "awaiting_review") else None


def _reused(ctx: Context, spec: RunSpec, entry: RunEntry, fingerprint: str) -> bool:
    """A resumed recipe skips a run that finished with the same resolved spec: its children read it as it is."""
    if (done := _finished(ctx, spec, entry, fingerprint)) is None:
        return False
    ctx.ids[spec.name], ctx.manifests[spec.name] = entry.run_id, done
    say(f"{ctx.recipe.recipe}: run {spec.name} ({entry.run_id}) finished before: skipped")
    return True


def _finish(ctx: Context, spec: RunSpec, entry: RunEntry, manifest: RunManifest, fingerprint: str) -> None:
    """The run's law re-checked and its report written; the recipe's record and its children see it."""
    _check_and_report(ctx, manifest)
    entry.status, entry.fingerprint = manifest.status, fingerprint
    ctx.ids[spec.name], ctx.manifests[spec.name] = entry.run_id, manifest


def _check_and_report(ctx: Context, manifest: RunManifest) -> None:
    from transforms.core.manifest import conservation_errors
    from transforms.report.run_report import write_report

    write_report(manifest, ctx.lake.run_dir(manifest.run_id) / "report.html")
    if errors := conservation_errors(manifest):
        raise RecipeRunError(f"run {manifest.run_id}: rows not accounted for in stage {errors[0]}")


def _config(ctx: Context, spec: RunSpec) -> dict[str, Any]:
    return {"recipe": ctx.recipe.recipe, "recipe_file": ctx.recipe.path, "recipe_run": ctx.root,
            "engines": ctx.recipe.engines, "params": ctx.recipe.params, "run": spec.model_dump(mode="json")}


def _after_failure(ctx: Context, run_id: str) -> None:
    """A failed run gets its report too: the funnel shows where it stopped."""
    from transforms.report.run_report import write_report

    path = ctx.lake.manifest_path(run_id)
    if path.exists():
        write_report(RunManifest.load(path), ctx.lake.run_dir(run_id) / "report.html")


# -- stages ------------------------------------------------------------------------------------------------
def rows_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    from transforms.core.rounds import UnionSource
    from transforms.core.runner import run_pipeline

    fingerprint = spec_fingerprint(ctx, spec)
    if _reused(ctx, spec, entry, fingerprint):
        return "done"
    run_dir = ctx.lake.run_dir(entry.run_id)
    read = [m for p in spec.parents for m in (ctx.manifests[p], *ctx.more.get(p, []))]
    parents = [m.run_id for m in read]
    if spec.rounds is not None:
        return rounds_run(ctx, spec, entry, fingerprint)
    if spec.source is not None:
        source = build_stage(ctx, spec.source, run_dir)
    else:  # the parents' kept rows, in order (a review with its adjudication rounds: every round's)
        source = UnionSource(paths=[m.outputs["curated"] for m in read])
    stages = [build_stage(ctx, s, run_dir) for s in spec.stages if _stage_wanted(ctx, s)]
    entry.status = "running"
    try:
        manifest = run_pipeline(job=f"{ctx.recipe.recipe}:{spec.name}", dataset=ctx.recipe.dataset, source=source,
                                stages=stages, lake=ctx.lake, config=_config(ctx, spec), run_id=entry.run_id,
                                resume=ctx.lake.manifest_path(entry.run_id).exists(), parents=parents,
                                after_stage=_stop_if_nothing_read if spec.source is not None else None)
    except BaseException:
        entry.status = "failed"
        _after_failure(ctx, entry.run_id)
        raise
    _measure(ctx, spec, manifest)
    _finish(ctx, spec, entry, manifest, fingerprint)
    return "done"


def _stop_if_nothing_read(record: Any) -> None:
    """A recipe's declared source that read nothing usable stops the recipe, saying why."""
    from transforms.io.crawl import EmptyInputError

    if record.kind != "source":
        return
    if record.rows_created == 0:
        raise EmptyInputError(f"the input holds no records ({record.name} read nothing: a header or footer only?)")
    if record.rows_kept == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(record.rows_dropped.items()))
        raise EmptyInputError(f"no usable rows in the input: all {record.rows_created} records were rejected "
                              f"({reasons}); they are in {record.outputs.get('rejected')}")


def _measure(ctx: Context, spec: RunSpec, manifest: RunManifest) -> None:
    """The run's `reports`: figures measured on its finished outputs, each in its own file."""
    import inspect

    for report in spec.reports:
        module, func = report.make.split(":")
        make = getattr(importlib.import_module(module), func)
        args = late_values(report.args, ctx.late(ctx.lake.run_dir(manifest.run_id)))
        if "runs" in inspect.signature(make).parameters:  # the runs so far, by name
            args["runs"] = dict(ctx.manifests)
        figures = make(manifest, ctx.lake, **args)
        if figures is not None:
            path = ctx.lake.run_dir(manifest.run_id) / f"{report.name}.json"
            path.write_text(json.dumps(figures, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
            if report.html:  # the run's report embeds every <name>.section.html beside it
                module, func = report.html.split(":")
                html = getattr(importlib.import_module(module), func)(figures)
                path.with_name(f"{report.name}.section.html").write_text(html, encoding="utf-8")


def rounds_run(ctx: Context, spec: RunSpec, entry: RunEntry, fingerprint: str) -> str:
    """Quota rounds: round k asks the `requests` function for rows, runs the chain on them, and the
    next round asks only for the groups still short (transforms/core/rounds.py)."""
    from transforms.core.rounds import QuotaConfig, run_quota_rounds
    from transforms.io.sources import RowsSource

    assert spec.rounds is not None
    rounds = spec.rounds
    module, func = rounds.requests.split(":")
    make_rows = getattr(importlib.import_module(module), func)
    run_dir = ctx.lake.run_dir(entry.run_id)

    def make_round(k: int, deficits: dict[str, int], accepted: list[str]) -> tuple[Any, list[Any]]:
        rows = make_rows(k, deficits, accepted, **late_values(rounds.args, ctx.late(run_dir, accepted)))
        return RowsSource(records=rows), [build_stage(ctx, s, run_dir, accepted) for s in spec.stages
                                          if _stage_wanted(ctx, s)]

    quota = QuotaConfig(group_column=rounds.group_column, quotas=rounds.quotas, max_rounds=rounds.max_rounds,
                        patience=rounds.patience)
    entry.status = "running"
    try:
        manifest = run_quota_rounds(job=f"{ctx.recipe.recipe}:{spec.name}", dataset=ctx.recipe.dataset,
                                    lake=ctx.lake, run_id=entry.run_id, quota=quota, make_round=make_round,
                                    config=_config(ctx, spec), resume=ctx.resume,
                                    parents=[ctx.ids[p] for p in spec.parents])
    except BaseException:
        entry.status = "failed"
        _after_failure(ctx, entry.run_id)
        raise
    for r in manifest.extras.get("rounds", []):  # every round is a run with its report and its law
        _check_and_report(ctx, RunManifest.load(ctx.lake.manifest_path(r["run_id"])))
    _measure(ctx, spec, manifest)
    _finish(ctx, spec, entry, manifest, fingerprint)
    return "done"


# -- review ------------------------------------------------------------------------------------------------
def review_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    """Export the batch and stop (awaiting_review), continue from its import, or let LLM annotators
    fill it (mode auto). The review run is the import's run; its parent is the reviewed run."""
    from transforms.report.run_report import write_report
    from transforms.review.batch import batch_dir, export_run, load_batch
    from transforms.review.consensus import ConsensusRule

    review = spec.review
    assert review is not None
    of_id, of_manifest = ctx.ids[review.of], ctx.manifests[review.of]
    kept = of_manifest.stages[-1].rows_kept if of_manifest.stages else 0
    if review.mode == "none" or kept == 0:
        why = "review: none" if review.mode == "none" else f"run {review.of} kept no item"
        say(f"{ctx.recipe.recipe}: run {spec.name}: nothing reviewed ({why}); its children read {of_id}")
        ctx.ids[spec.name], ctx.manifests[spec.name] = of_id, of_manifest
        entry.status, entry.run_id = ("not_reviewed" if review.mode == "none" else "nothing_to_review"), of_id
        return "done"
    batch = f"review-{of_id}"
    entry.batch = batch
    folder = batch_dir(ctx.lake, batch)
    if (folder / "batch.json").exists():
        record, _ = load_batch(ctx.lake, batch)
        if record.imports:  # reviewed: people's import, or the annotators of an earlier attempt
            return _reviewed(ctx, spec, entry, str(record.imports[-1]["run_id"]))
    else:
        export_run(ctx.lake, of_id, to=review.to, annotators=review.annotators, batch=batch,
                   rule=ConsensusRule.model_validate(review.consensus), limit=review.limit)
        _batch_side_files(ctx, spec, batch, folder)
    if review.mode == "export":
        entry.status = "awaiting_review"
        of_manifest = RunManifest.load(ctx.lake.manifest_path(of_id))
        of_manifest.status = "awaiting_review"
        of_manifest.extras["review"] = {"batch": batch, "next": entry_next(ctx, entry)}
        of_manifest.write(ctx.lake.manifest_path(of_id))
        write_report(of_manifest, ctx.lake.run_dir(of_id) / "report.html")
        say(f"{ctx.recipe.recipe}: review batch {batch} written under {folder}; waiting for reviewers")
        return "awaiting_review"
    from transforms.flow.engines import fill_roles
    from transforms.review.auto import AutoReviewConfig, auto_review

    auto = {"engines": "@annotators", **review.auto, "annotators": review.annotators}
    cfg = AutoReviewConfig.model_validate(fill_roles(auto, ctx.engines, f"runs.{spec.name}.review.auto"))
    _, manifest = auto_review(ctx.lake, batch, cfg, engine_factory=_annotator_factory(ctx))
    return _reviewed(ctx, spec, entry, manifest.run_id)


def _annotator_factory(ctx: Context) -> Any:
    """The annotators' engines from the orchestrator's engine factory (`doubles["annotators"]`, else "*"),
    or None: each annotator's configured backend."""
    from transforms.flow.engines import engine_factory

    double = engine_factory(ctx.doubles)("annotators")
    return None if double is None else (lambda _cfg: double)


def _reviewed(ctx: Context, spec: RunSpec, entry: RunEntry, review_id: str) -> str:
    from transforms.report.run_report import write_report

    review = spec.review
    assert review is not None
    of_id = ctx.ids[review.of]
    of_path = ctx.lake.manifest_path(of_id)
    of_manifest = RunManifest.load(of_path)
    if of_manifest.status == "awaiting_review":  # status moves with the graph: its review is in
        of_manifest.status = "succeeded"
        of_manifest.extras.setdefault("review", {})["imported_as"] = review_id
        of_manifest.write(of_path)
        write_report(of_manifest, ctx.lake.run_dir(of_id) / "report.html")
    manifest = RunManifest.load(ctx.lake.manifest_path(review_id))
    _check_and_report(ctx, manifest)
    entry.run_id, entry.status = review_id, manifest.status
    ctx.ids[spec.name], ctx.manifests[spec.name] = review_id, manifest
    # adjudication rounds (`piqaforge review requeue`, then an import): their verdicts join the first round's
    rounds = [RunManifest.load(ctx.lake.manifest_path(r)) for r in adjudications(ctx, entry.batch or "")]
    for extra in rounds:
        _check_and_report(ctx, extra)
    ctx.more[spec.name] = rounds
    return "done"


def adjudications(ctx: Context, batch: str) -> list[str]:
    """The review runs of the batches requeued from `batch` (and from those, in turn), in order."""
    from transforms.review.batch import load_batch

    found: list[str] = []
    todo = [batch]
    while todo:
        parent = todo.pop(0)
        for path in sorted((ctx.lake.root / "review").glob("*/batch.json")):
            record, _ = load_batch(ctx.lake, path.parent.name)
            if record.parent_batch != parent:
                continue
            live = [i for i in record.imports if not i.get("superseded_by")]
            if live:
                found.append(str(live[-1]["run_id"]))
            todo.append(record.batch)
    return found


def _batch_side_files(ctx: Context, spec: RunSpec, batch: str, folder: Path) -> None:
    """Guidelines, the recipe's context files and a README saying what to do with the batch."""
    review = spec.review
    assert review is not None
    if review.guidelines:
        shutil.copyfile(_recipe_file(ctx, review.guidelines), folder / "guidelines.md")
    if review.context:
        module, func = review.context.split(":")
        getattr(importlib.import_module(module), func)(ctx.lake, batch)
    from transforms.review.batch import load_batch, source_columns, write_readme

    record, items = load_batch(ctx.lake, batch)
    write_readme(folder, record, ctx.lake.root, translated=bool(source_columns(items)),
                 about=f"Recipe {ctx.recipe.recipe}, run {ctx.root}"
                 + (" (the guidelines: guidelines.md)." if review.guidelines else "."),
                 then=f"`{ctx.resume_command()}` goes on from the imported review.")


def _recipe_file(ctx: Context, name: str) -> Path:
    from transforms.flow.recipe import REPO

    for base in (Path.cwd(), Path(ctx.recipe.path).parent, REPO):
        if (base / name).exists():
            return base / name
    raise RecipeRunError(f"{ctx.recipe.path}: file {name} not found")


# -- release and evaluation --------------------------------------------------------------------------------
def release_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    from transforms.flow.release import card_sections, gate_and_write, release_files, release_hub

    release = spec.release
    assert release is not None
    fingerprint = spec_fingerprint(ctx, spec)
    if _reused(ctx, spec, entry, fingerprint):
        return "done"
    of_manifest = ctx.manifests[release.of]
    if not of_manifest.stages or of_manifest.stages[-1].rows_kept == 0:
        entry.status = "nothing_to_release"
        say(f"{ctx.recipe.recipe}: no items reached the release (run {release.of}, {of_manifest.run_id} kept none); "
            "the earlier runs' reports say where they were dropped")
        return "stop"
    sections = card_sections(ctx, release)
    entry.status = "running"
    try:
        manifest = gate_and_write(ctx.lake, dataset=ctx.recipe.dataset, input_run=ctx.ids[release.of],
                                  suite=release.suite, suite_overrides=release.suite_overrides,
                                  version=release.version, run_id=entry.run_id, audit=release.audit,
                                  audit_bound=release.audit_bound, sections=sections,
                                  files=release_files(ctx, release), hub=release_hub(ctx, spec),
                                  resume=ctx.lake.manifest_path(entry.run_id).exists(),
                                  config=_config(ctx, spec), recipe=ctx.recipe.recipe)
    except BaseException:
        entry.status = "failed"
        _after_failure(ctx, entry.run_id)
        raise
    _finish(ctx, spec, entry, manifest, fingerprint)
    if manifest.status != "succeeded":
        say(f"{ctx.recipe.recipe}: release gate failed: {manifest.error}")
        return "stop"
    return "done"


def evaluate_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    from transforms.flow.engines import fill_roles

    ev = spec.evaluate
    assert ev is not None
    fingerprint = spec_fingerprint(ctx, spec)
    if _reused(ctx, spec, entry, fingerprint):
        return "done"
    release_path = ctx.manifests[ev.of].outputs["release"]
    engines = fill_roles(ev.models, ctx.engines, f"runs.{spec.name}.evaluate.models")
    if isinstance(engines, list):  # names of the profile's evaluated models
        engines = {n: ctx.engines["evaluated"][n] for n in engines}
    from transforms.flow import evaluate
    cfg = evaluate.Config.model_validate({
        "release": str(release_path), "lake": str(ctx.lake.root),
        "dataset": ctx.recipe.dataset, "name": ctx.recipe.dataset, "models": list(engines), "engines": engines,
        "prompts": ev.prompts, "generate_limit": ev.limit, "loglik_limit": ev.limit, **ev.options})
    entry.status = "running"
    result = evaluate.run(cfg, run_id=entry.run_id, resume=ctx.lake.manifest_path(entry.run_id).exists())
    _finish(ctx, spec, entry, RunManifest.load(ctx.lake.manifest_path(entry.run_id)), fingerprint)
    say(f"{ctx.recipe.recipe}: evaluation {json.dumps(result.get('results'), default=str)[:300]}")
    return "done"
