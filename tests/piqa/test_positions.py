"""Position-dependent columns (transforms/piqa/positions.py): declared, and moved together by every swap.

The declaration tests look for columns that refer to a solution by position three ways: by name (any
`sol1`/`option2`-like name in the code and the recipes), by value (the columns the real review writes
whose values name a solution), and by meaning (the release's documented columns); each must be declared
positional or exempted with a reason. A new column of that kind that is not declared fails here."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from reviewed_items import reviewed_piqa

from transforms.piqa.balance import SWAPPED, BalanceLabels
from transforms.piqa.positions import NOT_POSITIONAL, positional_columns, swap_solutions
from transforms.release.hub import COLUMN_DOCS

ROOT = Path(__file__).resolve().parents[2]
POSITIONAL_NAME = re.compile(r"^(?:[a-z0-9_]*_)?(?:sol|option)[12](?:_[a-z0-9_]*)?$")
NAMES_A_SOLUTION = re.compile(r"\bsol[12]\b|\bverdicts?\b|\bsolution\b|\boption [12]\b", re.IGNORECASE)


def _names_in_code() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in ("transforms", "jobs", "expectations"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and POSITIONAL_NAME.match(node.value):
                    found.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    for path in (ROOT / "jobs" / "recipes").glob("*.yaml"):
        for word in re.findall(r"[A-Za-z0-9_]+", path.read_text("utf-8")):
            if POSITIONAL_NAME.match(word):
                found.setdefault(word, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_column_named_after_a_solution_is_declared():
    found = _names_in_code()
    assert {"sol1", "sol2", "sol1_gloss", "translated_sol1", "review_sol1_edits"} <= set(found)  # the scan works
    undeclared = {n: sorted(w) for n, w in found.items() if n not in positional_columns() and n not in NOT_POSITIONAL}
    assert not undeclared, f"position-dependent columns not declared in transforms/piqa/positions.py: {undeclared}"


def _names_a_solution(value: object) -> bool:
    if isinstance(value, list):
        return any(_names_a_solution(v) for v in value)
    if isinstance(value, dict):  # an edit record: of a solution, or of the label (a position number)
        return value.get("field") in ("sol1", "sol2", "label") or any(_names_a_solution(v) for v in value.values())
    if isinstance(value, str) and value.startswith("["):
        try:
            return _names_a_solution(json.loads(value))
        except ValueError:
            return False
    return value in ("sol1", "sol2")


def test_every_review_column_whose_values_name_a_solution_is_declared(shared_data):
    table = reviewed_piqa(shared_data, 120)
    assert table.num_rows == 120
    valued = {name for name in table.column_names
              if any(_names_a_solution(v) for v in table.column(name).to_pylist())}
    assert {"review_labels", "review_consensus", "review_edits"} <= valued  # the majority rule relabels some
    assert valued <= positional_columns(), valued - positional_columns()


def test_every_published_column_documented_as_naming_a_solution_is_declared():
    meaning = {c for c, text in COLUMN_DOCS.items() if NAMES_A_SOLUTION.search(text)}
    assert {"sol1", "label", "review_labels"} <= meaning
    undeclared = meaning - positional_columns() - set(NOT_POSITIONAL)
    assert not undeclared, undeclared


def _consensus(labels: list[str]) -> str:
    return Counter(labels).most_common(1)[0][0]


def test_a_swap_moves_every_position_dependent_column(shared_data):
    table = reviewed_piqa(shared_data, 40)
    table = table.append_column("sol1_gloss", pa.array([f"gloss of {s}" for s in table.column("sol1").to_pylist()]))
    table = table.append_column("sol2_gloss", pa.array([f"gloss of {s}" for s in table.column("sol2").to_pylist()]))
    table = table.append_column("correct", pa.array([str(v + 1) for v in table.column("label").to_pylist()]))
    mask = [i % 3 == 0 for i in range(table.num_rows)]
    out = swap_solutions(table, mask)
    before, after = table.to_pylist(), out.to_pylist()
    for swapped, a, b in zip(mask, before, after, strict=True):
        if not swapped:
            assert a == b
            continue
        assert (b["sol1"], b["sol2"], b["label"]) == (a["sol2"], a["sol1"], 1 - a["label"])
        assert b["sol1_gloss"] == f"gloss of {b['sol1']}" and b["correct"] == str(b["label"] + 1)
        assert [("sol1", "sol2").index(v) for v in b["review_labels"]] == \
            [1 - ("sol1", "sol2").index(v) for v in a["review_labels"]]
        assert ("sol1", "sol2").index(_consensus(b["review_labels"])) == b["label"]
        assert ("sol1", "sol2").index(b["review_consensus"]) == b["label"]
        assert b["review_agreement"] == a["review_agreement"]
        if a["review_edits"]:  # a relabel by the majority: the recorded label change is in the new numbering
            rec = {r["field"]: r for r in json.loads(b["review_edits"])}
            assert rec["label"]["after"] == b["label"]
    assert swap_solutions(out, mask).to_pylist() == before


def test_a_swap_refuses_half_a_pair():
    table = pa.table({"id": ["a"], "sol1": ["x"], "sol2": ["y"], "label": [0], "sol1_gloss": ["gx"]})
    with pytest.raises(ValueError, match="sol1_gloss"):
        swap_solutions(table, [True])


def test_balance_labels_leaves_no_reviewed_row_contradicting_its_label(shared_data):
    table = reviewed_piqa(shared_data, 120)
    label = pa.compute.equal(table.column("label"), 0)
    table = pa.concat_tables([table.filter(label).slice(0, 60), table.filter(pa.compute.invert(label)).slice(0, 20)])
    out = BalanceLabels().process_table(table)
    assert sum(out.column(SWAPPED).to_pylist()) == 20  # 60/20 → 40/40
    for row in out.to_pylist():
        assert ("sol1", "sol2").index(_consensus(row["review_labels"])) == row["label"]
        assert ("sol1", "sol2").index(row["review_consensus"]) == row["label"]
