"""The PIQA item schema shared by all five recipes (Ko-PIQA, PIndicQA, J-PIQA, Russian PIQA, Tamil PIQA).

Every release table has the common columns; recipe columns are optional and null where a recipe
does not use them, so one reader, one gate and one card serve every recipe. Column names are
snake_case (PIndicQA's `Domain` → `domain`, `Core_Principle` → `core_principle`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# -- common columns ---------------------------------------------------------------------------------
ID, LANG, GOAL, SOL1, SOL2, LABEL, SOURCE, IS_CULTURAL = (
    "id", "lang", "goal", "sol1", "sol2", "label", "source", "is_cultural")

COMMON_FIELDS = [
    pa.field(ID, pa.string(), nullable=False),
    pa.field(LANG, pa.string(), nullable=False),  # ISO 639-1 ("ko", "ja", "ru", "ta", "kn", ...)
    pa.field(GOAL, pa.string(), nullable=False),
    pa.field(SOL1, pa.string(), nullable=False),
    pa.field(SOL2, pa.string(), nullable=False),
    pa.field(LABEL, pa.int64(), nullable=False),  # 0 → sol1 is correct, 1 → sol2
    pa.field(SOURCE, pa.string()),  # where the item came from (crawl site, seed set, "xcopa-ta", ...)
    pa.field(IS_CULTURAL, pa.bool_()),  # culturally specific to the item's language community
]

# -- optional item columns ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ItemColumn:
    """An optional item column a release may publish: its type and what it means (the card's column table)."""

    type: pa.DataType | None  # None: as the run that adds it writes it
    meaning: str


# Every optional column's type and meaning, in one place. Which stage adds a column is said by that stage's
# class (`release_columns`, transforms/core/stage.py); the review columns come from review runs.
ITEM_COLUMNS: dict[str, ItemColumn] = {
    "goal_gloss": ItemColumn(pa.string(), "English gloss of the goal"),
    "sol1_gloss": ItemColumn(pa.string(), "English gloss of sol1"),
    "sol2_gloss": ItemColumn(pa.string(), "English gloss of sol2"),
    "orig_line_no": ItemColumn(pa.int64(), "0-based line of the PIQA item it descends from"),
    "is_translation": ItemColumn(pa.bool_(), "translated from an item in another language (J-PIQA: from PIQA; "
                                 "XCOPA: from COPA)"),
    "source_document": ItemColumn(pa.string(), "the document the item was built from"),
    "grade": ItemColumn(pa.string(), "school grade or level of that document"),
    "domain": ItemColumn(pa.string(), "PIndicQA taxonomy: domain"),
    "core_principle": ItemColumn(pa.string(), "PIndicQA taxonomy: core physical principle"),
    "key_properties_materials": ItemColumn(pa.string(), "PIndicQA taxonomy: key properties or materials"),
    "action_type": ItemColumn(pa.string(), "PIndicQA taxonomy: type of action"),
    "locale": ItemColumn(pa.string(), "the state or region the item is grounded in, e.g. IN-KA"),
    # every generated row records its prompt and model (STYLE.md, convention 9)
    "prompt_id": ItemColumn(pa.string(), "the prompt that generated or rewrote the item"),
    "prompt_version": ItemColumn(pa.string(), "that prompt's version"),
    "model": ItemColumn(pa.string(), "the model that generated or rewrote the item"),
}
# Added by review runs (transforms/review/consensus.py), not by a stage.
REVIEW_COLUMNS: dict[str, ItemColumn] = {
    "review_annotators": ItemColumn(None, "pseudonymous ids of the item's annotators "
                                    "(annotator-1, ...), never names or e-mails"),
    "review_labels": ItemColumn(None, "each annotator's verdict, in the order of review_annotators"),
    "review_agreement": ItemColumn(None, "share of the item's annotators who gave the consensus verdict"),
    "review_automatic": ItemColumn(None, "true when LLM annotators, not people, reviewed the item"),
}

ITEM_SCHEMA = pa.schema(COMMON_FIELDS + [pa.field(n, c.type) for n, c in ITEM_COLUMNS.items() if c.type is not None])
REQUIRED_COLUMNS = (ID, LANG, GOAL, SOL1, SOL2, LABEL)
TEXT_COLUMNS = (GOAL, SOL1, SOL2)
# Grouping columns the dataset card counts when present.
CATEGORY_COLUMNS = ("source", "grade", "model", "locale", "domain", "core_principle",
                    "key_properties_materials", "action_type", "source_document", "lang")
RECIPES = ("ko-piqa", "pindic", "j-piqa", "ru-piqa", "ta-piqa")


def conform_items(table: pa.Table, *, fill_optional: bool = True) -> pa.Table:
    """Cast known columns to the schema's types and (optionally) add absent optional ones as nulls.

    Missing *required* columns are left missing: the gate reports them instead of inventing data.
    Unknown extra columns are kept after the schema's columns. Raises `ValueError` naming the
    column when a value cannot be cast (e.g. a label "yes").
    """
    columns: dict[str, Any] = {}
    for field in ITEM_SCHEMA:
        if field.name in table.column_names:
            col = table.column(field.name)
            if col.type != field.type:
                try:
                    col = _cast(col, field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                    raise ValueError(f"column {field.name!r} cannot be read as {field.type}: {err}") from err
            columns[field.name] = col
        elif fill_optional and field.name not in REQUIRED_COLUMNS:
            columns[field.name] = pa.nulls(table.num_rows, field.type)
    for name in table.column_names:
        if name not in columns:
            columns[name] = table.column(name)
    return pa.table(columns)


def _cast(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_boolean(target) and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        lowered = pc.utf8_lower(pc.utf8_trim_whitespace(col))
        truthy = pc.is_in(lowered, pa.array(["true", "1", "yes", "y", "t"]))
        return pc.if_else(pc.is_valid(col), truthy, pa.scalar(None, pa.bool_()))
    if pa.types.is_integer(target) and pa.types.is_floating(col.type):
        return pc.cast(col, target, safe=True)  # 1.0 → 1, 1.5 → error
    if pa.types.is_string(target) and not pa.types.is_string(col.type):
        return pc.cast(col, target)
    if pa.types.is_integer(target) and pa.types.is_string(col.type):
        return pc.cast(pc.utf8_trim_whitespace(col), target)
    return pc.cast(col, target)


def validate_items(table: pa.Table) -> list[str]:
    """Structural problems of an item table, one readable line each; empty when it is well formed.

    Quality rules (balance, minimal pairs, duplicates, language) are the gate's job
    (expectations/); this is the cheap contract check readers and the evaluation harness share.
    """
    problems: list[str] = []
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        problems.append(f"missing required column(s) {missing}; the table has {table.column_names}")
    if table.num_rows == 0:
        problems.append("the table has no rows")
        return problems
    ids = table.column(ID).to_pylist() if ID in table.column_names else None
    for name in REQUIRED_COLUMNS:
        if name not in table.column_names:
            continue
        col = table.column(name)
        nulls = pc.is_null(col)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            nulls = pc.or_(nulls, pc.equal(pc.utf8_trim_whitespace(pc.fill_null(col, "")), ""))
        bad = _positions(nulls)
        if bad:
            problems.append(f"{len(bad)} row(s) with empty {name!r}: {_name_rows(bad, ids)}")
    if LABEL in table.column_names:
        label = table.column(LABEL)
        if pa.types.is_integer(label.type) or pa.types.is_floating(label.type):
            bad = _positions(pc.invert(pc.fill_null(pc.is_in(label, pa.array([0, 1])), True)))
            if bad:
                problems.append(f"{len(bad)} row(s) with a label outside {{0, 1}}: {_name_rows(bad, ids)}")
        else:
            problems.append(f"column 'label' has type {label.type}, expected an integer 0/1")
    if ids is not None:
        seen: dict[Any, int] = {}
        dups = [i for i, v in enumerate(ids) if v is not None and seen.setdefault(v, i) != i]
        if dups:
            problems.append(f"{len(dups)} row(s) repeat an earlier id: {_name_rows(dups, ids)}")
    return problems


def _positions(mask: pa.ChunkedArray | pa.Array) -> list[int]:
    return [i for i, v in enumerate(pc.fill_null(mask, False).to_pylist()) if v]


def _name_rows(positions: list[int], ids: list[Any] | None, limit: int = 10) -> str:
    names = [f"id={ids[i]!r}" if ids is not None and ids[i] is not None else f"row {i}" for i in positions[:limit]]
    more = f" (+{len(positions) - limit} more)" if len(positions) > limit else ""
    return ", ".join(names) + more
