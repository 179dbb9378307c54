"""One run of a recipe: skipped when its `when` is off (or it reads a run that is), else handed to its kind
(transforms/flow/runs/: stages, rounds, review, release, evaluate). Returns "done", "awaiting_review" or
"stop", as the kind's `execute` does."""

from __future__ import annotations

from typing import Any

from transforms.flow.context import Context, RunEntry, say
from transforms.flow.recipe import RunSpec, holds
from transforms.flow.runs import KINDS, kind_of
from transforms.flow.runs.review import adjudications


def run_one(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    try:
        off = [p for p in spec.upstream() if p in ctx.skipped]
        if off or not holds(spec.when, ctx.recipe.params):
            ctx.skipped.add(spec.name)
            entry.status = "skipped"
            say(f"{ctx.recipe.recipe}: run {spec.name} skipped "
                f"({'it reads ' + off[0] if off else 'when: ' + str(spec.when)})")
            return "done"
        return kind_of(spec).execute(ctx, spec, entry)
    finally:  # the stages checked for this run are its alone: a run skipped or reused lets them go
        ctx.checked.pop(spec.name, None)


# The run kinds' functions under their names before transforms/flow/runs/, re-exported for one release.
def rows_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    return KINDS[spec.kind].execute(ctx, spec, entry)


def rounds_run(ctx: Context, spec: RunSpec, entry: RunEntry, fingerprint: Any = None) -> str:
    return KINDS["rounds"].execute(ctx, spec, entry)


def review_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    return KINDS["review"].execute(ctx, spec, entry)


def release_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    return KINDS["release"].execute(ctx, spec, entry)


def evaluate_run(ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
    return KINDS["evaluate"].execute(ctx, spec, entry)


__all__ = ["adjudications", "evaluate_run", "release_run", "review_run", "rounds_run", "rows_run", "run_one"]
