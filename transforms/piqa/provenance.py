"""Small count tables for cards and reports: provenance (per source, grade, model) and category balance.

* `provenance_tables`: the Russian PIQA paper's tables, items per source document, per grade and per
  model (any columns the table has), each as a small Arrow table with counts and shares, and
  `provenance_markdown` for the dataset card.
* `category_balance`: J-PIQA's distribution over categories against a target per category, with the
  deficit each category still has; `rebalance_request` turns the deficits into the next generation
  round's request (which categories to ask for, how many of each).
* `SetColumns`, `DropWhere`, `ProvenanceColumns`: small stages the recipe jobs use to label an item's
  part, drop by a verdict and record the prompt and model (label balance: transforms/piqa/balance.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core.stage import Stage, StageError, put_column, reason_kind, set_drop_reason

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


# -- small stages the recipe jobs share (J-PIQA, Russian PIQA) -----------------------------------------
class SetColumns(Stage):
    """Writes constant columns (`values`) and copies of columns (`copy`: new → existing), e.g. the
    part an item belongs to (`source: piqa_translation`) or the English text kept as its gloss."""

    name: ClassVar[str] = "set_columns"

    values: dict[str, Any] = Field(default_factory=dict, description="Column → one value for every row.")
    copy_columns: dict[str, str] = Field(default_factory=dict, description="New column → the column it copies.")

    def check_columns(self, schema: pa.Schema) -> None:
        super().check_columns(schema)
        missing = [c for c in self.copy_columns.values() if c not in schema.names]
        if missing:
            raise StageError(f"stage '{self.name}' copies column(s) {missing}; the batch has {schema.names}")

    def process(self, batch: pa.Table) -> pa.Table:
        out = batch
        for new, old in self.copy_columns.items():
            out = put_column(out, new, batch.column(old))
        for col, value in self.values.items():
            out = put_column(out, col, pa.array([value] * batch.num_rows))
        return out


class DropWhere(Stage):
    """Drops rows whose `column` holds one of `values`, with `reason` (e.g. the preference judge's
    verdict `preference` → `personal_preference`)."""

    name: ClassVar[str] = "drop_where"
    drop_reasons: ClassVar[dict[str, str]] = {"<reason>": "the entry's `reason`: its `column` holds one of `values`"}

    column: str = Field(..., description="Column to test.")
    values: list[Any] = Field(..., min_length=1, description="Values that drop the row.")
    reason: str = Field(..., description="The drop reason.")

    def declared_drop_reasons(self) -> dict[str, str]:
        return {reason_kind(self.reason): f"its `{self.column}` holds one of {self.values}"}

    def check_columns(self, schema: pa.Schema) -> None:
        super().check_columns(schema)
        if self.column not in schema.names:
            raise StageError(f"stage '{self.name}' needs column {self.column!r}; the batch has {schema.names}")

    def process(self, batch: pa.Table) -> pa.Table:
        # The one stage whose reason is configuration, not code: a recipe names it, so it cannot be a member of
        # an enum; `declared_drop_reasons` declares exactly that string, and the runner checks what it wrote.
        reasons = [self.reason if v in self.values else None for v in batch.column(self.column).to_pylist()]
        return set_drop_reason(batch, pa.array(reasons, pa.string()))


class ProvenanceColumns(Stage):
    """The release's provenance columns from the LLM stages' `_prompt` (id@version) and `_model`:
    `prompt_id`, `prompt_version`, and `model` where the row has none yet (a job may have written
    an arm's name there already)."""

    name: ClassVar[str] = "provenance_columns"
    release_columns: ClassVar[tuple[str, ...]] = ("prompt_id", "prompt_version", "model")
    writes: ClassVar[tuple[str, ...]] = ("prompt_id", "prompt_version", "model")

    def process(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        prompts = batch.column("_prompt").to_pylist() if "_prompt" in batch.column_names else [None] * n
        models = batch.column("_model").to_pylist() if "_model" in batch.column_names else [None] * n
        have = batch.column("model").to_pylist() if "model" in batch.column_names else [None] * n
        ids = [p.partition("@")[0] if p else None for p in prompts]
        versions = [(p.partition("@")[2] or None) if p else None for p in prompts]
        out = put_column(batch, "prompt_id", pa.array(ids, pa.string()))
        out = put_column(out, "prompt_version", pa.array(versions, pa.string()))
        return put_column(out, "model", pa.array([h or m for h, m in zip(have, models, strict=True)], pa.string()))
