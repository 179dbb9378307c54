"""Provenance tables (per source document, grade, model) and the category balance with its deficits."""

from __future__ import annotations

import pyarrow as pa
import pytest

from transforms.piqa.provenance import (
    balance_summary,
    category_balance,
    count_table,
    provenance_markdown,
    provenance_tables,
    rebalance_request,
)


def _generated() -> pa.Table:
    return pa.table({
        "id": [f"i{k}" for k in range(7)],
        "source_document": ["Паровая машина"] * 3 + ["Кислород"] * 2 + [None, None],
        "grade": ["encyclopedic"] * 5 + [None, None],
        "model": ["qwen3-32b", "qwen3-32b", "gemma-3-27b", "qwen3-32b", "gemma-3-27b", "no-source:qwen3-32b",
                  "no-source:qwen3-32b"],
    })


def test_count_table_and_provenance_tables():
    t = _generated()
    by_doc = count_table(t, "source_document")
    assert by_doc.to_pylist() == [
        {"source_document": "Паровая машина", "items": 3, "share": 0.4286},
        {"source_document": "(none)", "items": 2, "share": 0.2857},
        {"source_document": "Кислород", "items": 2, "share": 0.2857},
    ]
    tables = provenance_tables(t)
    assert list(tables) == ["source_document", "grade", "model"]  # no `source` column: skipped
    assert tables["model"].column("items").to_pylist() == [3, 2, 2]
    with pytest.raises(ValueError, match="not in the table"):
        count_table(t, "category")


def test_provenance_markdown_for_the_card():
    md = provenance_markdown(provenance_tables(_generated()))
    assert md.startswith("### Provenance")
    assert "| source_document | items | share |" in md
    assert "| Паровая машина | 3 | 42.9% |" in md
    assert "Items per model (3 values, 7 items)" in md
    assert provenance_markdown({}) == ""


def test_category_balance_deficits_and_the_next_rounds_request():
    items = pa.table({"category": ["台所"] * 6 + ["掃除"] * 3 + ["季節"] * 1})
    asked = ["台所", "掃除", "季節", "道具"]
    balance = category_balance(items, categories=asked, target_per_category=5)
    assert balance.to_pylist() == [
        {"category": "台所", "items": 6, "share": 0.6, "target": 5, "deficit": 0},
        {"category": "掃除", "items": 3, "share": 0.3, "target": 5, "deficit": 2},
        {"category": "季節", "items": 1, "share": 0.1, "target": 5, "deficit": 4},
        {"category": "道具", "items": 0, "share": 0.0, "target": 5, "deficit": 5},
    ]
    assert rebalance_request(balance) == {"掃除": 3, "季節": 6, "道具": 8}  # deficit × 1.5, rounded up
    assert rebalance_request(balance, overshoot=1.0) == {"掃除": 2, "季節": 4, "道具": 5}
    assert balance_summary(balance) == {"categories": 4, "items": 10, "min": 0, "max": 6, "max_over_min": None,
                                        "total_deficit": 11}
    default_target = category_balance(items)  # the mean, rounded up: 10 / 3 → 4
    assert default_target.column("target").to_pylist() == [4, 4, 4]
    assert default_target.column("deficit").to_pylist() == [0, 1, 3]
    balanced = category_balance(pa.table({"category": ["a", "b"]}))
    assert rebalance_request(balanced) == {}
