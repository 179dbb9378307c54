"""Small count tables for cards and reports: provenance (per source, grade, model) and category balance.

* `provenance_tables`: the Russian PIQA paper's tables, items per source document, per grade and per
  model (any columns the table has), each as a small Arrow table with counts and shares, and
  `provenance_markdown` for the dataset card.
* `category_balance`: J-PIQA's distribution over categories against a target per category, with the
  deficit each category still has; `rebalance_request` turns the deficits into the next generation
  round's request (which categories to ask for, how many of each).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

PROVENANCE_COLUMNS = ("source_document", "source", "grade", "model")
MISSING = "(none)"


def count_table(table: pa.Table, column: str, *, order: Sequence[str] | None = None) -> pa.Table:
    """Items per value of `column` (nulls as "(none)"), largest first unless `order` fixes it; with shares."""
    if column not in table.column_names:
        raise ValueError(f"column {column!r} is not in the table ({table.column_names})")
    counts = Counter(MISSING if v is None or v == "" else str(v) for v in table.column(column).to_pylist())
    keys = list(order) + sorted(k for k in counts if k not in order) if order is not None else \
        sorted(counts, key=lambda k: (-counts[k], k))
    total = sum(counts.values())
    return pa.table({column: pa.array(keys, pa.string()),
                     "items": pa.array([counts.get(k, 0) for k in keys], pa.int64()),
                     "share": pa.array([round(counts.get(k, 0) / total, 4) if total else 0.0 for k in keys],
                                       pa.float64())})


def provenance_tables(table: pa.Table, columns: Sequence[str] = PROVENANCE_COLUMNS) -> dict[str, pa.Table]:
    """One count table per provenance column the table has (absent columns are skipped)."""
    return {c: count_table(table, c) for c in columns if c in table.column_names}


def markdown_table(table: pa.Table) -> str:
    names = table.column_names
    rows = table.to_pylist()

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.1%}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(names) + " |", "|" + "|".join("---" for _ in names) + "|"]
    lines += ["| " + " | ".join(cell(r[n]) for n in names) + " |" for r in rows]
    return "\n".join(lines)


def provenance_markdown(tables: dict[str, pa.Table], *, title: str = "Provenance") -> str:
    """The card's section: one Markdown table per provenance column."""
    if not tables:
        return ""
    parts = [f"### {title}"]
    for column, t in tables.items():
        parts.append(f"\nItems per {column.replace('_', ' ')} ({t.num_rows} values, "
                     f"{sum(t.column('items').to_pylist())} items):\n\n{markdown_table(t)}")
    return "\n".join(parts) + "\n"


def category_balance(table: pa.Table, column: str = "category", *, categories: Sequence[str] | None = None,
                     target_per_category: int | None = None) -> pa.Table:
    """Items per category against a target (default: the mean over the categories, rounded up), with
    `deficit` = max(0, target − items). Categories that were asked for but got nothing appear with 0."""
    counts = count_table(table, column, order=list(categories) if categories is not None else None)
    items = counts.column("items").to_pylist()
    target = target_per_category if target_per_category is not None else \
        (-(-sum(items) // len(items)) if items else 0)
    return counts.append_column("target", pa.array([target] * len(items), pa.int64())) \
        .append_column("deficit", pa.array([max(0, target - n) for n in items], pa.int64()))


def balance_summary(balance: pa.Table) -> dict[str, Any]:
    """Figures for the report: categories, smallest/largest counts, their ratio, the total deficit."""
    items = balance.column("items").to_pylist()
    return {"categories": len(items), "items": sum(items), "min": min(items, default=0),
            "max": max(items, default=0),
            "max_over_min": round(max(items) / min(items), 2) if items and min(items) else None,
            "total_deficit": sum(balance.column("deficit").to_pylist())}


def rebalance_request(balance: pa.Table, column: str = "category", *, overshoot: float = 1.5,
                      skip: Sequence[str] = (MISSING,)) -> dict[str, int]:
    """{category: items to ask for} for the next round: each deficit times `overshoot`, rounded up,
    because constraint checks and review drop part of what comes back. Empty when balanced."""
    out = {}
    for row in balance.to_pylist():
        if row["deficit"] > 0 and row[column] not in skip:
            out[row[column]] = int(-(-row["deficit"] * overshoot // 1))
    return out
