"""A run of stages: over a declared source, or over its parents' kept rows (a review with its adjudication
rounds: every round's), through the runner; its `reports` measured on what it kept."""

from __future__ import annotations

from typing import Any

from transforms.flow.context import Context, RunEntry, spec_fingerprint
from transforms.flow.recipe import RunSpec
from transforms.flow.runs.common import after_failure, built_stages, finish, measure, reused, run_config


class StagesRun:
    """`source:` or `parents:` with `stages:`."""

    def plan(self, ctx: Context, spec: RunSpec) -> list[tuple[str, Any]]:
        return built_stages(ctx, spec, ctx.lake.run_dir(ctx.run_id(spec)))

    def execute(self, ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
        from transforms.core.rounds import UnionSource
        from transforms.core.runner import run_pipeline

        fingerprint = spec_fingerprint(ctx, spec)
        if reused(ctx, spec, entry, fingerprint):
            return "done"
        run_dir = ctx.lake.run_dir(entry.run_id)
        read = [m for p in spec.parents for m in (ctx.manifests[p], *ctx.more.get(p, []))]
        built = built_stages(ctx, spec, run_dir, take=True)
        source = dict(built).get("source")
        if source is None:  # the parents' kept rows, in order (a review with its adjudication rounds: every round's)
            source = UnionSource(paths=[m.outputs["curated"] for m in read])
        stages = [stage for place, stage in built if place != "source"]
        entry.status = "running"
        try:
            manifest = run_pipeline(job=f"{ctx.recipe.recipe}:{spec.name}", dataset=ctx.recipe.dataset,
                                    source=source, stages=stages, lake=ctx.lake, config=run_config(ctx, spec),
                                    run_id=entry.run_id, resume=ctx.lake.manifest_path(entry.run_id).exists(),
                                    parents=[m.run_id for m in read], fuse=ctx.recipe.fuse,
                                    after_stage=stop_if_nothing_read if spec.source is not None else None)
        except BaseException:
            entry.status = "failed"
            after_failure(ctx, entry.run_id)
            raise
        measure(ctx, spec, manifest)
        finish(ctx, spec, entry, manifest, fingerprint)
        return "done"


def stop_if_nothing_read(record: Any) -> None:
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
