"""Quota rounds: round k asks the `requests` function for rows, runs the chain on them, and the next round
asks only for the groups still short (transforms/core/rounds.py). Every round is a run with its report and law."""

from __future__ import annotations

from typing import Any

from transforms.core.manifest import RunManifest
from transforms.flow.context import Context, RunEntry, late_values, spec_fingerprint
from transforms.flow.recipe import RunSpec
from transforms.flow.runs.common import (
    after_failure,
    built_stages,
    check_and_report,
    finish,
    measure,
    reused,
    run_config,
)


class RoundsRun:
    """`rounds:` with `stages:`."""

    def plan(self, ctx: Context, spec: RunSpec) -> list[tuple[str, Any]]:
        """The chain as round 1 builds it (`${accepted}` empty)."""
        return built_stages(ctx, spec, ctx.lake.run_dir(ctx.run_id(spec)))

    def execute(self, ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
        from transforms.core.rounds import QuotaConfig, run_quota_rounds
        from transforms.flow.recipe_check import resolve_ref
        from transforms.io.sources import RowsSource

        rounds = spec.rounds
        assert rounds is not None
        fingerprint = spec_fingerprint(ctx, spec)
        if reused(ctx, spec, entry, fingerprint):
            return "done"
        make_rows = resolve_ref(rounds.requests, f"runs.{spec.name}.rounds.requests")
        run_dir = ctx.lake.run_dir(entry.run_id)

        def make_round(k: int, deficits: dict[str, int], accepted: list[str]) -> tuple[Any, list[Any]]:
            rows = make_rows(k, deficits, accepted, **late_values(rounds.args, ctx.late(run_dir, accepted)))
            # the first round takes the checked builds; a later one builds its chain afresh (built_stages says why)
            return RowsSource(records=rows), [s for _, s in built_stages(ctx, spec, run_dir, accepted, take=True)]

        quota = QuotaConfig(group_column=rounds.group_column, quotas=rounds.quotas, max_rounds=rounds.max_rounds,
                            patience=rounds.patience)
        entry.status = "running"
        try:
            manifest = run_quota_rounds(job=f"{ctx.recipe.recipe}:{spec.name}", dataset=ctx.recipe.dataset,
                                        lake=ctx.lake, run_id=entry.run_id, quota=quota, make_round=make_round,
                                        config=run_config(ctx, spec), resume=ctx.resume,
                                        parents=[ctx.ids[p] for p in spec.parents])
        except BaseException:
            entry.status = "failed"
            after_failure(ctx, entry.run_id)
            raise
        for r in manifest.extras.get("rounds", []):  # every round is a run with its report and its law
            check_and_report(ctx, RunManifest.load(ctx.lake.manifest_path(r["run_id"])))
        measure(ctx, spec, manifest)
        finish(ctx, spec, entry, manifest, fingerprint)
        return "done"
