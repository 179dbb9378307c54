"""Artifact audit: planted shortcuts are flagged, real PIQA is not flagged by the length rule."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from transforms.eval.audit import audit_markdown, audit_release, bow_logreg, goal_overlap, longer_solution
from transforms.piqa.formats import read_piqa


@pytest.fixture(scope="module")
def piqa_valid(shared_data):
    return read_piqa(shared_data / "piqa_en" / "valid_labeled.jsonl")


def _independent_longer_accuracy(path, limit=None):
    """Pick the longer solution, ties half a point: computed from the raw file, not through Arrow."""
    credit, n = 0.0, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            a, b, y = len(row["sol1"]), len(row["sol2"]), int(row["label"])
            credit += 0.5 if a == b else float((a > b) == (y == 0))
            n += 1
            if limit and n == limit:
                break
    return credit / n


def test_longer_solution_on_real_piqa_matches_an_independent_count(shared_data, piqa_valid):
    expected = _independent_longer_accuracy(shared_data / "piqa_en" / "valid_labeled.jsonl")
    got = longer_solution(piqa_valid)
    assert got["acc"] == pytest.approx(expected, abs=1e-12)
    assert got["n"] == 1838
    assert 0.4 < got["acc"] < 0.6  # PIQA was adversarially filtered; length is not a shortcut


def test_real_piqa_is_not_flagged_by_the_length_rule(piqa_valid):
    audit = audit_release(piqa_valid.slice(0, 300), bound=0.6)
    assert "longer_solution" not in audit["flags"]
    assert audit["baselines"]["longer_solution"]["acc"] < 0.6
    assert audit["baselines"]["bow_logreg"]["folds"] == 5
    assert 0.35 < audit["baselines"]["bow_logreg"]["acc"] < 0.65


def test_planted_length_artifact_is_flagged(piqa_valid):
    # Real PIQA text, labels re-planted so that the longer solution is always the right one.
    rows = [r for r in piqa_valid.slice(0, 150).to_pylist() if len(r["sol1"]) != len(r["sol2"])]
    for r in rows:
        r["label"] = 0 if len(r["sol1"]) > len(r["sol2"]) else 1
    planted = pa.Table.from_pylist(rows)
    audit = audit_release(planted, bound=0.6)
    assert audit["baselines"]["longer_solution"]["acc"] == 1.0
    assert audit["flagged"] and "longer_solution" in audit["flags"]
    assert "FLAGGED" in audit_markdown(audit)


def test_planted_word_artifact_is_found_by_the_bag_of_words_model(piqa_valid):
    # The right solution starts with "gently", the wrong one with "poorly": same length, so only
    # the solutions-only classifier can see it.
    rows = piqa_valid.slice(0, 200).to_pylist()
    for r in rows:
        right, wrong = ("sol1", "sol2") if r["label"] == 0 else ("sol2", "sol1")
        r[right] = "gently " + r[right]
        r[wrong] = "poorly " + r[wrong]
    table = pa.Table.from_pylist(rows)
    assert longer_solution(table)["acc"] == pytest.approx(longer_solution(piqa_valid.slice(0, 200))["acc"])
    bow = bow_logreg(table)
    assert bow["acc"] > 0.9
    assert "bow_logreg" in audit_release(table)["flags"]


def test_goal_overlap_by_hand():
    table = pa.table({"goal": ["boil an egg", "cut paper", "dry socks"],
                      "sol1": ["put the egg in boiling water", "use scissors", "hang socks to dry"],
                      "sol2": ["put it in the freezer", "use paper scissors", "hang them in the sun"],
                      "label": [0, 1, 0]})
    # item 1: overlap 1 vs 0 -> sol1 (right); item 2: 0 vs 1 -> sol2 (right); item 3: 2 vs 0 -> sol1 (right)
    assert goal_overlap(table)["acc"] == 1.0


def test_one_label_release_is_flagged_without_crashing(piqa_valid):
    rows = piqa_valid.slice(0, 60).to_pylist()
    for r in rows:
        if r["label"] == 1:
            r["sol1"], r["sol2"], r["label"] = r["sol2"], r["sol1"], 0
    audit = audit_release(pa.Table.from_pylist(rows))
    assert audit["baselines"]["majority_position"]["acc"] == 1.0
    assert "majority_position" in audit["flags"]
    assert audit["baselines"]["bow_logreg"]["acc"] is not None  # swapped copies give it both classes


def test_tiny_and_empty_releases():
    one = pa.table({"goal": ["g"], "sol1": ["a"], "sol2": ["b"], "label": [1]})
    audit = audit_release(one)
    assert not audit["flagged"] and "note" in audit
    assert audit["baselines"]["bow_logreg"]["acc"] is None and "skipped" in audit["baselines"]["bow_logreg"]
    empty = pa.table({"goal": pa.array([], pa.string()), "sol1": pa.array([], pa.string()),
                      "sol2": pa.array([], pa.string()), "label": pa.array([], pa.int64())})
    assert audit_release(empty)["n"] == 0 and not audit_release(empty)["flagged"]
    with pytest.raises(ValueError, match="bound"):
        audit_release(one, bound=60)


class _RecordingEngine:
    """Not a model: scores every continuation 0.0 (a tie) and records what it was asked."""

    def __init__(self):
        self.requests: list[tuple[str, str]] = []

    def loglikelihood(self, requests):
        self.requests += list(requests)
        return [(0.0, 1) for _ in requests]


def test_solution_only_baseline_hides_the_goal(piqa_valid):
    table = piqa_valid.slice(0, 30)
    engine = _RecordingEngine()
    audit = audit_release(table, engine=engine, model="recorder")
    b = audit["baselines"]["solution_only_model"]
    labels = table.column("label").to_pylist()
    # every score ties, ties go to sol1: accuracy is the share of label 0
    assert b["acc"] == pytest.approx(labels.count(0) / len(labels))
    assert len(engine.requests) == 2 * table.num_rows
    goals = table.column("goal").to_pylist()
    assert all(goal not in context for goal, (context, _) in zip(goals * 2, engine.requests, strict=True))
    assert {context for context, _ in engine.requests} == {"Question: \nAnswer:"}
