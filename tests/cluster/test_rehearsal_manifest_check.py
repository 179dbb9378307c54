"""The rehearsal's manifest check (harness/rehearsal/manifests.py), the function both tiers run over every run of
every recipe, on the manifest of a real local run: a stage that drops rows for a reason its class does not declare
makes FAIL lines (so the rehearsal fails), the same run with the reason declared makes none, and a stage that got
no row fails the CI tier's row check."""

from __future__ import annotations

import sys
from typing import ClassVar

import pyarrow as pa
import pytest

from transforms.core.stage import STRICT_DROP_REASONS, FilterStage


class _Planted(FilterStage):
    """Drops texts under three characters; `reason` is what it writes, `too_short` what its class declares."""

    name: ClassVar[str] = "planted_reason_for_rehearsal"
    reads: ClassVar[tuple[str, ...]] = ("text",)
    drop_reasons: ClassVar[dict[str, str]] = {"too_short": "fewer than three characters"}
    reason: str = "too_short"

    def reasons(self, batch: pa.Table) -> pa.Array:
        return pa.array([self.reason if len(t) < 3 else None for t in batch.column("text").to_pylist()], pa.string())


def _run(lake, run_id: str, stage: _Planted, rows: list[str]) -> dict:
    """A real run through the runner into `lake`; the recipe record the rehearsal would read beside it."""
    from transforms.core.lake import Lake
    from transforms.core.runner import run_pipeline
    from transforms.io.sources import RowsSource

    records = [{"id": str(i), "text": t} for i, t in enumerate(rows)]
    manifest = run_pipeline(job="planted", dataset="planted", source=RowsSource(records=records), stages=[stage],
                            lake=Lake(lake), config={}, run_id=run_id, fuse=False)
    assert manifest.status == "succeeded"
    return {"runs": {"items": {"run_id": run_id, "status": manifest.status}}}


@pytest.mark.parametrize("reason", ["tiny", "too_short"])
def test_the_rehearsals_manifest_check_fails_a_stage_with_a_planted_undeclared_reason(reason, ray_local, tmp_path,
                                                                                     monkeypatch):
    from harness.rehearsal.manifests import declared_reasons, manifest_lines, recipe_manifest_lines
    from transforms.core.manifest import RunManifest

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import a test module
    monkeypatch.delenv("PIQAFORGE_UNDECLARED_DROPS", raising=False)
    monkeypatch.setenv(STRICT_DROP_REASONS, "0")  # a user's run: the runner records a warning and goes on
    lake = tmp_path / "lake"
    stage = _Planted(reason=reason)
    record = _run(lake, "planted", stage, ["ok text", "ab", "a longer text", "x"])
    # what the rehearsal checks: the runner's warnings, and the reasons against the built stages' declarations
    lines = recipe_manifest_lines(lake, record, declared_reasons([stage]), need_rows=True)
    if reason == "too_short":
        assert lines == []
        return
    warned = [x for x in lines if x.startswith("FAIL warning items.01-planted_reason_for_rehearsal")]
    assert len(warned) == 1 and "'tiny'" in warned[0] and "_Planted" in warned[0], lines
    counted = [x for x in lines if x.startswith("FAIL undeclared drop reason items.01-planted_reason_for_rehearsal")]
    assert counted == ["FAIL undeclared drop reason items.01-planted_reason_for_rehearsal: 'tiny' on 2 row(s); "
                       "the stage declares ['too_short']"], lines
    # either check alone fails the recipe: the runner's record without the declarations, and the declarations
    # without the record (a manifest written before warnings were recorded)
    assert recipe_manifest_lines(lake, record) == warned
    manifest = RunManifest.load(lake / "runs" / "planted" / "manifest.json")
    for st in manifest.stages:
        st.warnings = []
    assert manifest_lines(manifest, "items", declared_reasons([stage])) == counted


def test_the_ci_tiers_row_check_fails_a_stage_that_received_no_row(ray_local, tmp_path, monkeypatch):
    from harness.rehearsal.manifests import recipe_manifest_lines

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    lake = tmp_path / "lake"
    record = _run(lake, "empty", _Planted(), [])
    assert recipe_manifest_lines(lake, record) == []
    assert [x.split(":")[0] for x in recipe_manifest_lines(lake, record, need_rows=True)] == [
        "FAIL no rows items.00-read_rows", "FAIL no rows items.01-planted_reason_for_rehearsal"]
    assert recipe_manifest_lines(lake, {"runs": {}}) == ["FAIL manifests: the recipe record names no run with a "
                                                         "manifest"]
