"""Lineage through every parent: an aggregate with several members, a union of two rounds.

The lake is written here as the runner writes it (stage outputs as Parquet, `_born`, `parent_id`, an
aggregate's lineage table, manifests with `parents`), so the test needs no Ray. Layout:

    round r1: rows (a1, a2) → gen (expand: c1 ← a1, c2 ← a2)
    round r2: rows (a3)     → gen (expand: c3 ← a3)
    union u:  union (c1, c2, c3; parents r1, r2) → group (aggregate: g1 ← c1 + c3)
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.core import columns as C
from transforms.core.lake import Lake
from transforms.core.lineage import print_trace, trace
from transforms.core.manifest import RunManifest, StageRecord
from transforms.core.writing import BORN


def _write(folder: Path, rows: list[dict]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    if rows:
        pq.write_table(pa.Table.from_pylist(rows), folder / "part-0.parquet")
    return str(folder)


def _stage(lake: Lake, run: str, index: int, name: str, kind: str, kept: list[dict], **extra: list[dict]) -> StageRecord:
    base = lake.root / "staged" / "t" / run / f"{index:02d}_{name}"
    outputs = {"kept": _write(base, kept), "rejected": _write(lake.root / "rejected" / "t" / run / name, [])}
    for key, rows in extra.items():
        outputs[key] = _write(lake.root / key / "t" / run / name, rows)
    return StageRecord(index=index, name=name, rows_in=0, rows_kept=len(kept), kind=kind, seconds=0.0, outputs=outputs)


def _round(lake: Lake, run: str, requests: list[str], children: dict[str, str]) -> None:
    src = _stage(lake, run, 0, "rows", "source", [{C.ID: r, "goal": f"request {r}"} for r in requests])
    gen = _stage(lake, run, 1, "gen", "expand", [{C.ID: c, "goal": f"item {c}", C.PARENT_ID: p, BORN: "gen",
                                                  C.PROMPT: "pindic/generate@4"} for c, p in children.items()])
    RunManifest(run_id=run, job="gen-round", dataset="t", status="succeeded", stages=[src, gen]).write(
        lake.manifest_path(run))


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    lake = Lake(tmp_path / "lake").create()
    _round(lake, "r1", ["a1", "a2"], {"c1": "a1", "c2": "a2"})
    _round(lake, "r2", ["a3"], {"c3": "a3"})
    union = _stage(lake, "u", 0, "union", "source", [{C.ID: c, "goal": f"item {c}"} for c in ("c1", "c2", "c3")])
    group = _stage(lake, "u", 1, "group", "aggregate", [{C.ID: "g1", "goal": "group of c1 and c3", BORN: "group"}],
                   lineage=[{C.PARENT_ID: "c1", "child_ids": ["g1"]}, {C.PARENT_ID: "c3", "child_ids": ["g1"]}])
    RunManifest(run_id="u", job="union", dataset="t", status="succeeded", parents=["r1", "r2"],
                stages=[union, group]).write(lake.manifest_path("u"))
    return lake


def test_an_aggregate_is_traced_through_every_member_and_every_parent_run(lake):
    hops = trace(lake, "u", "g1")
    assert [(h.run_id, h.stage, h.row_id, h.depth) for h in hops] == [
        ("u", "group", "g1", 0),
        ("u", "union", "c1", 1), ("r1", "gen", "c1", 2), ("r1", "rows", "a1", 3),
        ("u", "union", "c3", 1), ("r2", "gen", "c3", 2), ("r2", "rows", "a3", 3)]
    assert hops[0].parents == ["c1", "c3"]
    assert hops[1].status == hops[4].status == "consumed by group"
    assert hops[2].provenance[C.PROMPT] == "pindic/generate@4" and hops[2].parents == ["a1"]
    text = print_trace(hops)
    assert "r2 · gen (expand)" in text and "      └─ r2 · rows (source)" in text
    assert [h["depth"] for h in json.loads(print_trace(hops, as_json=True))] == [0, 1, 2, 3, 1, 2, 3]


def test_a_union_row_is_found_in_the_round_that_made_it_not_only_the_first_parent(lake):
    hops = trace(lake, "u", "c3")   # c3 is in r2, the union's second parent
    assert [(h.run_id, h.stage, h.row_id) for h in hops] == [("u", "union", "c3"), ("r2", "gen", "c3"),
                                                            ("r2", "rows", "a3")]
    assert hops[1].status == "kept (in the run's output)"


def test_a_row_reached_twice_is_listed_once_and_max_hops_bounds_the_walk(lake):
    # a second aggregate naming c1 twice (a diamond) still lists c1's chain once
    group = lake.manifest_path("u")
    m = RunManifest.load(group)
    m.stages[1] = _stage(lake, "u", 1, "group", "aggregate", [{C.ID: "g1", BORN: "group"}],
                         lineage=[{C.PARENT_ID: "c1", "child_ids": ["g1"]}, {C.PARENT_ID: "c1", "child_ids": ["g1"]}])
    m.write(group)
    hops = trace(lake, "u", "g1")
    assert [h.row_id for h in hops] == ["g1", "c1", "c1", "a1"]
    assert len(trace(lake, "u", "g1", max_hops=2)) == 2


def test_unknown_rows_and_runs_are_clear_errors(lake):
    with pytest.raises(KeyError, match="no stage output"):
        trace(lake, "u", "nope")
    with pytest.raises(FileNotFoundError, match="no run 'gone'"):
        trace(lake, "gone", "g1")
