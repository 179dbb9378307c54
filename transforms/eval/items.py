"""The item columns evaluation reads, and small table operations on them.

An evaluated table has one row per two-choice item: `goal`, `sol1`, `sol2`, `label` (0 or 1).
`id`, `lang`, `source` and `is_cultural` are filled with defaults when a reader did not provide
them, so seed sets (PIQA valid, XCOPA, PARus) and our releases go through the same code.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.core.stage import put_column

ID, LANG, GOAL, SOL1, SOL2, LABEL = "id", "lang", "goal", "sol1", "sol2", "label"
SOURCE, IS_CULTURAL, CATEGORY = "source", "is_cultural", "category"
REQUIRED = (GOAL, SOL1, SOL2, LABEL)
# Columns a per-subset accuracy is reported for when present (category columns are optional).
SUBSET_COLUMNS = (IS_CULTURAL, SOURCE, LANG, CATEGORY, "subcategory", "domain", "core_principle",
                  "action_type", "locale", "grade", "model")


class ItemError(ValueError):
    """The table cannot be evaluated (missing columns, labels outside {0, 1})."""


def prepare_items(table: pa.Table, default_lang: str = "en", default_source: str = "unknown") -> pa.Table:
    """Check the item columns and fill the optional ones; labels become int8 0/1.

    Missing or null ids, languages and sources get defaults; a null `is_cultural` stays null
    (unknown), so the report does not count unknown items as universal.
    """
    missing = [c for c in REQUIRED if c not in table.schema.names]
    if missing:
        raise ItemError(f"an evaluated table needs columns {list(REQUIRED)}; missing {missing} "
                        f"(has {table.schema.names})")
    n = table.num_rows
    labels = table.column(LABEL).cast(pa.int64())
    if labels.null_count:
        raise ItemError(f"{labels.null_count} item(s) have no label; evaluation needs labelled items")
    bad = pc.sum(pc.invert(pc.is_in(labels, pa.array([0, 1])))).as_py() or 0
    if bad:
        raise ItemError(f"{bad} item(s) have a label outside {{0, 1}}")
    table = put_column(table, LABEL, labels.cast(pa.int8()))
    for col in (GOAL, SOL1, SOL2):
        table = put_column(table, col, pc.fill_null(table.column(col).cast(pa.string()), ""))
    ids = pa.array([f"item-{i}" for i in range(n)], pa.string())
    if ID in table.schema.names:
        ids = pc.coalesce(table.column(ID).cast(pa.string()), ids)
    table = put_column(table, ID, ids)
    for col, default in ((LANG, default_lang), (SOURCE, default_source)):
        current = table.column(col).cast(pa.string()) if col in table.schema.names else pa.nulls(n, pa.string())
        table = put_column(table, col, pc.fill_null(current, default))
    if IS_CULTURAL not in table.schema.names:
        table = table.append_column(IS_CULTURAL, pa.nulls(n, pa.bool_()))
    return table


def swap_solutions(table: pa.Table) -> pa.Table:
    """The same items with sol1 and sol2 exchanged and the label flipped (position-bias run)."""
    i1, i2 = table.schema.get_field_index(SOL1), table.schema.get_field_index(SOL2)
    s1, s2 = table.column(SOL1), table.column(SOL2)
    out = table.set_column(i1, SOL1, s2).set_column(i2, SOL2, s1)
    flipped = pc.subtract(pa.scalar(1, pa.int8()), out.column(LABEL).cast(pa.int8()))
    return out.set_column(out.schema.get_field_index(LABEL), LABEL, flipped.cast(pa.int8()))


def sample_items(table: pa.Table, n: int | None, seed: int = 0) -> pa.Table:
    """A fixed-seed subset of `n` items (all items, in order, when n is None or >= rows)."""
    if n is None or n >= table.num_rows:
        return table
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(table.num_rows, size=n, replace=False))
    return table.take(pa.array(idx))


def subset_columns(table: pa.Table) -> list[str]:
    """The subset columns this table has with at least one value (a one-valued column still counts)."""
    return [c for c in SUBSET_COLUMNS if c in table.schema.names and table.column(c).null_count < table.num_rows]
