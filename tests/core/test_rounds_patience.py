"""Quota rounds' patience: stop after K consecutive rounds that accept nothing, and say so.

The rounds' control loop (`run_quota_rounds`) runs here with an in-process runner (`run=`, the
function's own injection point): each round's source rows go through the round's stages, QuotaCap
included, and the kept rows are written as the round's curated table. No Ray, no model: what is
tested is when the loop stops and what the umbrella manifest records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from transforms.core import columns as C
from transforms.core.lake import Lake, read_table
from transforms.core.manifest import RunManifest
from transforms.core.rounds import QuotaConfig, run_quota_rounds
from transforms.io.sources import RowsSource


def _in_process(lake: Lake):
    def run(*, job: str, dataset: str, source: Any, stages: list, lake: Lake, config: dict, run_id: str,
            resume: bool, parents: list[str]) -> RunManifest:
        table = source.rows()
        for stage in stages:
            table = stage(table)
            if C.DROP_REASON in table.schema.names:
                table = table.filter(pc.is_null(table.column(C.DROP_REASON))).drop_columns([C.DROP_REASON])
        folder = lake.zone("curated", dataset, run_id)
        folder.mkdir(parents=True, exist_ok=True)
        if table.num_rows:
            pq.write_table(table, folder / "part-0.parquet")
        manifest = RunManifest(run_id=run_id, job=job, dataset=dataset, status="succeeded", parents=list(parents),
                               outputs={"curated": str(folder)})
        manifest.write(lake.manifest_path(run_id))
        return manifest
    return run


def _rounds(tmp_path: Path, made_per_round: list[int], patience: int, quota: int = 3, max_rounds: int = 6):
    """Round k 'generates' made_per_round[k-1] new Delhi rows (0 after the list ends)."""
    lake = Lake(tmp_path / "lake").create()
    asked: list[dict[str, int]] = []

    def make_round(k: int, deficits: dict[str, int], accepted: list[str]):
        asked.append(dict(deficits))
        n = made_per_round[k - 1] if k <= len(made_per_round) else 0
        return RowsSource(records=[{C.ID: f"r{k}-{i}", "locale": "Delhi"} for i in range(n)]), []

    cfg = QuotaConfig(quotas={"Delhi": quota}, max_rounds=max_rounds, patience=patience)
    manifest = run_quota_rounds(job="gen", dataset="gen", lake=lake, run_id="gen-1", quota=cfg,
                                make_round=make_round, config={}, run=_in_process(lake))
    return manifest, asked, lake


def test_patience_one_stops_at_the_first_empty_round(tmp_path):
    manifest, asked, _ = _rounds(tmp_path, [1, 0, 2], patience=1)
    assert len(manifest.extras["rounds"]) == 2 and len(asked) == 2
    assert manifest.extras["stop_reason"] == "no_progress"
    assert manifest.extras["stop_detail"] == "round 2 accepted no new row (patience 1)"
    assert manifest.extras["quota_met"] == {"Delhi": False}


def test_patience_two_gives_an_empty_round_a_second_chance(tmp_path):
    # round 2 is empty, round 3 brings two rows: with patience 2 the quota of 3 is met
    manifest, asked, lake = _rounds(tmp_path, [1, 0, 2], patience=2)
    assert manifest.extras["stop_reason"] == "quotas_met" and manifest.extras["quota_met"] == {"Delhi": True}
    assert [r["accepted"] for r in manifest.extras["rounds"]] == [{"Delhi": 1}, {}, {"Delhi": 2}]
    assert asked == [{"Delhi": 3}, {"Delhi": 2}, {"Delhi": 2}]
    assert manifest.extras["patience"] == 2
    union = read_table(Path(manifest.outputs["curated"]))
    assert sorted(union.column(C.ID).to_pylist()) == ["r1-0", "r3-0", "r3-1"]
    assert RunManifest.load(lake.manifest_path("gen-1")).extras["stop_reason"] == "quotas_met"


def test_patience_counts_consecutive_empty_rounds_only(tmp_path):
    # empty, one row, empty, empty: the streak restarts after round 2 and ends at round 4
    manifest, asked, _ = _rounds(tmp_path, [0, 1, 0, 0, 5], patience=2)
    assert len(asked) == 4
    assert manifest.extras["stop_reason"] == "no_progress"
    assert manifest.extras["stop_detail"] == "rounds 3-4 accepted no new row (patience 2)"
    assert manifest.parents == ["gen-1-r1", "gen-1-r2", "gen-1-r3", "gen-1-r4"]


def test_max_rounds_wins_over_a_patience_larger_than_the_rounds(tmp_path):
    manifest, asked, _ = _rounds(tmp_path, [1], patience=5, max_rounds=3)
    assert len(asked) == 3 and manifest.extras["stop_reason"] == "max_rounds"
    assert manifest.extras["stop_detail"] == "3 round(s) ran"


def test_patience_must_be_positive():
    with pytest.raises(ValueError):
        QuotaConfig(quotas={"Delhi": 1}, patience=0)


def test_quota_cap_surplus_is_not_progress_beyond_the_deficit(tmp_path):
    # round 1 makes 5 rows for a quota of 3: QuotaCap keeps 3, the rounds stop with the quota met
    manifest, asked, _ = _rounds(tmp_path, [5], patience=1)
    assert len(asked) == 1 and manifest.extras["stop_reason"] == "quotas_met"
    assert manifest.extras["stop_detail"] == "every quota met after 1 round(s)"
    assert read_table(Path(manifest.outputs["curated"])).num_rows == 3
