"""An evaluation run: the evaluated models over a release (transforms/flow/evaluate.py)."""

from __future__ import annotations

import json
from typing import Any

from transforms.core.manifest import RunManifest
from transforms.flow.context import Context, RunEntry, engine_placement, say, spec_fingerprint
from transforms.flow.recipe import RunSpec
from transforms.flow.runs.common import finish, reused


def evaluated_engines(ctx: Context, spec: RunSpec) -> dict[str, Any]:
    """The evaluated models' engines by name, from the run's `models` (a role, names of the profile's
    evaluated models, or engines)."""
    from transforms.flow.engines import fill_roles

    assert spec.evaluate is not None
    engines = fill_roles(spec.evaluate.models, ctx.engines, f"runs.{spec.name}.evaluate.models")
    if isinstance(engines, list):  # names of the profile's evaluated models
        engines = {n: ctx.engines["evaluated"][n] for n in engines}
    return engines


class EvaluateRun:
    """`evaluate:`."""

    def plan(self, ctx: Context, spec: RunSpec) -> list[tuple[str, Any]]:
        """The prediction stage over the evaluated models, placed by their engines' `resources`."""
        from transforms.core.stage import Resources
        from transforms.eval.stages import PredictItems

        engines = evaluated_engines(ctx, spec)
        placed = engine_placement({"engines": engines}).get("resources") or {}
        return [("evaluate", PredictItems(engines=engines, resources=Resources.model_validate(placed)))]

    def execute(self, ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
        ev = spec.evaluate
        assert ev is not None
        fingerprint = spec_fingerprint(ctx, spec)
        if reused(ctx, spec, entry, fingerprint):
            return "done"
        release_path = ctx.manifests[ev.of].outputs["release"]
        engines = evaluated_engines(ctx, spec)
        from transforms.flow import evaluate

        cfg = evaluate.Config.model_validate({
            "release": str(release_path), "lake": str(ctx.lake.root),
            "dataset": ctx.recipe.dataset, "name": ctx.recipe.dataset, "models": list(engines), "engines": engines,
            "prompts": ev.prompts, "generate_limit": ev.limit, "loglik_limit": ev.limit, **ev.options})
        entry.status = "running"
        result = evaluate.run(cfg, run_id=entry.run_id, resume=ctx.lake.manifest_path(entry.run_id).exists())
        finish(ctx, spec, entry, RunManifest.load(ctx.lake.manifest_path(entry.run_id)), fingerprint)
        say(f"{ctx.recipe.recipe}: evaluation {json.dumps(result.get('results'), default=str)[:300]}")
        return "done"
