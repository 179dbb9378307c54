"""A review run: export the batch and stop (awaiting_review), continue from its import, or let LLM annotators
fill it (mode auto). The review run is the import's run; its parent is the reviewed run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from transforms.core.manifest import RunManifest
from transforms.flow.context import Context, RecipeRunError, RunEntry, engine_placement, entry_next, say
from transforms.flow.recipe import RunSpec
from transforms.flow.runs.common import check_and_report


class ReviewRun:
    """`review:`; stages of its own it has none, but automatic review calls engines, placed like stages."""

    def plan(self, ctx: Context, spec: RunSpec) -> list[tuple[str, Any]]:
        """The annotators' engines of an automatic review, each placed by its `resources` like a stage."""
        from transforms.core.stage import Resources
        from transforms.flow.engines import fill_roles

        review = spec.review
        assert review is not None
        if review.mode != "auto":
            return []
        engines = fill_roles(review.auto.get("engines", "@annotators"), ctx.engines,
                             f"runs.{spec.name}.review.auto.engines")
        out: list[tuple[str, Any]] = []
        for i, engine in enumerate(engines if isinstance(engines, list) else [engines]):
            placed = engine_placement({"engine": engine}).get("resources") or {}
            out.append((f"review.auto.engines.{i}", EngineStep(engine=engine, resources=Resources.model_validate(placed))))
        return out

    def execute(self, ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
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
                return reviewed(ctx, spec, entry, str(record.imports[-1]["run_id"]))
        else:
            export_run(ctx.lake, of_id, to=review.to, annotators=review.annotators, batch=batch,
                       rule=ConsensusRule.model_validate(review.consensus), limit=review.limit)
            batch_side_files(ctx, spec, batch, folder)
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
        _, manifest = auto_review(ctx.lake, batch, cfg, engine_factory=annotator_factory(ctx))
        return reviewed(ctx, spec, entry, manifest.run_id)


class EngineStep:
    """An engine called outside a stage (automatic review), placed like a stage by its resources."""

    name = "auto_review"

    def __init__(self, engine: dict[str, Any], resources: Any):
        self.engine, self.resources = engine, resources

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        return {"engine": self.engine}


def annotator_factory(ctx: Context) -> Any:
    """The annotators' engines from the orchestrator's engine factory (`doubles["annotators"]`, else "*"),
    or None: each annotator's configured backend."""
    from transforms.flow.engines import engine_factory

    double = engine_factory(ctx.doubles)("annotators")
    return None if double is None else (lambda _cfg: double)


def reviewed(ctx: Context, spec: RunSpec, entry: RunEntry, review_id: str) -> str:
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
    check_and_report(ctx, manifest)
    entry.run_id, entry.status = review_id, manifest.status
    ctx.ids[spec.name], ctx.manifests[spec.name] = review_id, manifest
    # adjudication rounds (`piqaforge review requeue`, then an import): their verdicts join the first round's
    rounds = [RunManifest.load(ctx.lake.manifest_path(r)) for r in adjudications(ctx, entry.batch or "")]
    for extra in rounds:
        check_and_report(ctx, extra)
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


def batch_side_files(ctx: Context, spec: RunSpec, batch: str, folder: Path) -> None:
    """Guidelines, the recipe's context files and a README saying what to do with the batch."""
    from transforms.flow.recipe_check import resolve_ref

    review = spec.review
    assert review is not None
    if review.guidelines:
        shutil.copyfile(recipe_file(ctx, review.guidelines), folder / "guidelines.md")
    if review.context:
        resolve_ref(review.context, f"runs.{spec.name}.review.context")(ctx.lake, batch)
    from transforms.review.batch import load_batch, source_columns, write_readme

    record, items = load_batch(ctx.lake, batch)
    write_readme(folder, record, ctx.lake.root, translated=bool(source_columns(items)),
                 about=f"Recipe {ctx.recipe.recipe}, run {ctx.root}"
                 + (" (the guidelines: guidelines.md)." if review.guidelines else "."),
                 then=f"`{ctx.resume_command()}` goes on from the imported review.")


def recipe_file(ctx: Context, name: str) -> Path:
    from transforms.flow.recipe import REPO

    for base in (Path.cwd(), Path(ctx.recipe.path).parent, REPO):
        if (base / name).exists():
            return base / name
    raise RecipeRunError(f"{ctx.recipe.path}: file {name} not found")
