"""A release run: the gate (Great Expectations) over the run it releases, then the release folder, a Hub
dataset repository as it stands (transforms/flow/release.py)."""

from __future__ import annotations

from typing import Any

from transforms.flow.context import Context, RunEntry, say, spec_fingerprint
from transforms.flow.recipe import RunSpec
from transforms.flow.runs.common import after_failure, finish, reused, run_config


class ReleaseRun:
    """`release:`."""

    def plan(self, ctx: Context, spec: RunSpec) -> list[tuple[str, Any]]:
        """The gate's stage, as placement sees it (its node needs the gate's extras)."""
        from transforms.release.stage import GateAndRelease

        return [("release", GateAndRelease(recipe="generic", dataset=ctx.recipe.dataset, version="0",
                                           out_dir="unused", result_path="unused"))]

    def execute(self, ctx: Context, spec: RunSpec, entry: RunEntry) -> str:
        from transforms.flow.release import card_sections, gate_and_write, release_files, release_hub

        release = spec.release
        assert release is not None
        fingerprint = spec_fingerprint(ctx, spec)
        if reused(ctx, spec, entry, fingerprint):
            return "done"
        of_manifest = ctx.manifests[release.of]
        if not of_manifest.stages or of_manifest.stages[-1].rows_kept == 0:
            entry.status = "nothing_to_release"
            say(f"{ctx.recipe.recipe}: no items reached the release (run {release.of}, {of_manifest.run_id} kept "
                "none); the earlier runs' reports say where they were dropped")
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
                                      config=run_config(ctx, spec), recipe=ctx.recipe.recipe)
        except BaseException:
            entry.status = "failed"
            after_failure(ctx, entry.run_id)
            raise
        finish(ctx, spec, entry, manifest, fingerprint)
        if manifest.status != "succeeded":
            say(f"{ctx.recipe.recipe}: release gate failed: {manifest.error}")
            return "stop"
        return "done"
