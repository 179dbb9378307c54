"""Reviewers see every near-duplicate pair the release gate would refuse (issue 32 §4): the batch's
suggestions and the gate share one function, representation and threshold (the recipe's suite's)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from expectations.gate import run_gate
from expectations.suite import load_suite
from transforms.dedup.review_neighbours import ReviewNeighbours
from transforms.flow.recipe import list_recipes, load_recipe
from transforms.io.writers_intake import WriterColumns, WritersIntake

ITEMS = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ta_items"


def test_every_recipe_suggests_with_its_release_suite_near_duplicate_rule():
    checked = 0
    for name, _ in list_recipes():
        recipe = load_recipe(name)
        suites = [r.release.suite for r in recipe.runs if r.release]
        for run in recipe.runs:
            for spec in run.stages or []:
                if spec.stage != "review_neighbours":
                    continue
                stage = ReviewNeighbours.model_validate(spec.fields)
                nd = load_suite(suites[0]).near_duplicates
                assert nd is not None
                assert (stage.gate_threshold, stage.gate_representation, stage.gate_column) == \
                    (nd.threshold, nd.representation, nd.column), name
                checked += 1
    assert checked >= 1


@pytest.fixture(scope="module")
def tamil_items() -> pa.Table:
    # ta-piqa's default slice: 30 records of each writer and writer_d's planted copies (151-159)
    t = WritersIntake(path=str(ITEMS), allow_malformed=True, records={"*": "1-30", "writer_d.xlsx": "1-30,151-159"},
                      columns=WriterColumns(id="item_no", source="source", keep=["xcopa_id"])).rows()
    return t.filter(pc.is_null(t.column("drop_reason"))).drop_columns(["drop_reason", "drop_detail"])


@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_every_pair_the_gate_refuses_is_suggested_in_the_batch(tamil_items):
    suite = load_suite("ta-piqa")
    stage = ReviewNeighbours(semantic_suggest=None, near_suggest=1.0, gate_threshold=suite.near_duplicates.threshold,
                             gate_representation=suite.near_duplicates.representation)
    out = stage.process_table(tamil_items)
    gate = run_gate(tamil_items, suite)
    refused = next(c for c in gate.checks if c.name == "no_near_duplicate_goals")
    assert not refused.success and refused.unexpected_count >= 3  # the sample's planted copies
    suggested = dict(zip(out.column("id").to_pylist(), out.column("dup_suggested_of").to_pylist(), strict=True))
    levels = dict(zip(out.column("id").to_pylist(), out.column("dup_level").to_pylist(), strict=True))
    for failing in refused.failing_ids:
        item = failing.removeprefix("id=")
        assert suggested[item] is not None, (item, levels[item])
    # with the gate level off (near and semantic suggestions switched off too) the same items go unflagged
    bare = ReviewNeighbours(semantic_suggest=None, near_suggest=1.0, gate_threshold=None).process_table(tamil_items)
    unflagged = dict(zip(bare.column("id").to_pylist(), bare.column("dup_suggested_of").to_pylist(), strict=True))
    assert any(unflagged[f.removeprefix("id=")] is None for f in refused.failing_ids)
