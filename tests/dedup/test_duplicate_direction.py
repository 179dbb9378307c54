"""Which item of an exact copy stays (issue 32 §2): the first in input order, whatever the ids.

A team added a probe item late to a writer's file; its id sorted before the original's as text ("10" < "9"),
and the original became "the duplicate". Real Tamil items (XCOPA-ta validation) with the real e5 neighbours."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from transforms.dedup.review_neighbours import ConfirmedDuplicates, ReviewNeighbours, input_order


@pytest.fixture(scope="module")
def tamil(shared_data) -> list[dict]:
    rows = [json.loads(x) for x in (shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl").read_text("utf-8").splitlines()]
    return [{"goal": r["premise"], "sol1": r["choice1"], "sol2": r["choice2"], "label": int(r["label"])}
            for r in rows[:9]]


def _dropped(table: pa.Table) -> dict[str, str]:
    out = ConfirmedDuplicates(auto_confirm=["exact"]).process(table)
    return {i: d for i, d in zip(out.column("id").to_pylist(), out.column("duplicate_of").to_pylist(), strict=True) if d}


def test_the_later_copy_is_the_duplicate_even_when_its_id_sorts_first(tamil):
    # ids 2..9 in input order, then the probe: a copy of item "9" (solutions swapped) added last as "10"
    rows = [{"id": str(i + 2), **r} for i, r in enumerate(tamil[:8])]
    probe = {**rows[-1], "id": "10", "sol1": rows[-1]["sol2"], "sol2": rows[-1]["sol1"], "label": 1 - rows[-1]["label"]}
    table = pa.Table.from_pylist(rows + [probe])
    assert "10" < "9"  # the order that made the original "the duplicate"
    out = ReviewNeighbours(semantic_suggest=None, gate_threshold=None).process_table(table)
    suggested = dict(zip(out.column("id").to_pylist(), out.column("dup_suggested_of").to_pylist(), strict=True))
    assert suggested["10"] == "9" and suggested["9"] is None
    assert _dropped(out) == {"10": "9"}


def test_the_writers_file_and_line_decide_when_rows_arrive_out_of_order(tamil):
    # blocks may reach a global stage in any order: the file and line the intake recorded are the input order
    rows = [{"id": f"w-{i:02d}", "source_file": "writer_a.csv", "source_row": i + 2, **r} for i, r in enumerate(tamil)]
    copy = {**rows[2], "id": "a-probe", "source_file": "writer_b.csv", "source_row": 2}
    shuffled = [copy, *reversed(rows)]
    table = pa.Table.from_pylist(shuffled)
    assert [shuffled[i]["id"] for i in input_order(table)] == [r["id"] for r in rows] + ["a-probe"]
    out = ReviewNeighbours(semantic_suggest=None, gate_threshold=None).process_table(table)
    assert _dropped(out) == {"a-probe": "w-02"}


def test_the_runner_partition_order_comes_before_the_writers_lines():
    table = pa.table({"id": ["c", "b", "a"], "_part": [10, 2, 2], "_row": [0, 1, 0],
                      "source_file": ["x", "x", "x"], "source_row": [1, 2, 3]})
    assert [table.column("id")[int(i)].as_py() for i in input_order(table)] == ["a", "b", "c"]
