"""A release in the Global PIQA shape: `prompt, solution0, solution1, label` + the recipe's extra columns.

Global PIQA (the MRL 2025 shared task) collects two-choice items as `prompt`, `solution0`,
`solution1` and `label` (0 → solution0 is right, 1 → solution1), and lm-evaluation-harness reads
them under those names (`doc_to_text: prompt`, `doc_to_choice: "{{[solution0, solution1]}}"`).
Every release writes the same items in that shape, as TSV and JSONL (UTF-8, one item per line), so
it can be submitted or loaded as is. After the four core columns come `id`, `lang` and the columns
the recipe defines, where the release has values for them: J-PIQA's glosses and provenance (the
paper's appendix columns, `tables.release_columns`), PIndicQA's four taxonomy labels and locale,
the cultural flag of Ko-PIQA, the Russian and Tamil sets, the Russian source document and grade.

The JSONL keeps every string exactly. A TSV cell cannot hold a tab or a line break without breaking
"one item per line", so the TSV writes them as one space each and the card counts how many cells
that changed. `read_global_piqa` reads either file back into the item schema.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.piqa.schema import conform_items

CORE = ("prompt", "solution0", "solution1", "label")
# Global PIQA column → item-schema column (the rest keep their names).
TO_ITEM = {"prompt": "goal", "solution0": "sol1", "solution1": "sol2", "prompt_gloss": "goal_gloss",
           "solution0_gloss": "sol1_gloss", "solution1_gloss": "sol2_gloss"}
FROM_ITEM = {v: k for k, v in TO_ITEM.items()}
# What each column means, for the card. Core first, then bookkeeping, then recipe columns.
COLUMN_DOCS: dict[str, str] = {
    "prompt": "the goal or situation (our `goal`)",
    "solution0": "the first candidate solution (our `sol1`)",
    "solution1": "the second candidate solution (our `sol2`)",
    "label": "index of the correct solution: 0 → solution0, 1 → solution1",
    "id": "our item id (stable across releases; lineage leads from it to the run that made the item)",
    "lang": "ISO 639-1 language of the item",
    "prompt_gloss": "English gloss of the prompt (J-PIQA)",
    "solution0_gloss": "English gloss of solution0 (J-PIQA)",
    "solution1_gloss": "English gloss of solution1 (J-PIQA)",
    "source": "where the item came from; for J-PIQA one of piqa_translation, piqa_lexical_variation, "
              "piqa_original",
    "orig_line_no": "0-based line of the PIQA item it descends from; −1 for items written natively (J-PIQA)",
    "is_translation": "translated from PIQA (J-PIQA)",
    "is_cultural": "culturally specific to the language community (true), universal (false), unknown (empty)",
    "domain": "PIndicQA taxonomy: domain",
    "core_principle": "PIndicQA taxonomy: core physical principle",
    "key_properties_materials": "PIndicQA taxonomy: key properties or materials",
    "action_type": "PIndicQA taxonomy: type of action",
    "locale": "PIndicQA: the state or region the item is grounded in (e.g. IN-KA)",
    "source_document": "Russian PIQA: the document the item was built from",
    "grade": "Russian PIQA: school grade or level of that document",
}
EXTRAS: dict[str, tuple[str, ...]] = {
    "j-piqa": ("prompt_gloss", "solution0_gloss", "solution1_gloss", "source", "orig_line_no", "is_translation"),
    "pindic": ("domain", "core_principle", "key_properties_materials", "action_type", "locale", "is_cultural"),
    "ko-piqa": ("is_cultural", "source"),
    "ru-piqa": ("is_cultural", "source", "source_document", "grade"),
    "ta-piqa": ("is_cultural", "source"),
}
_BREAKS = re.compile(r"\r\n|[\t\n\r]")
INT_COLUMNS, BOOL_COLUMNS = ("label", "orig_line_no"), ("is_cultural", "is_translation")


def _has_values(table: pa.Table, column: str) -> bool:
    return column in table.column_names and table.column(column).null_count < table.num_rows


def global_piqa_table(items: pa.Table, recipe: str = "generic") -> pa.Table:
    """The items as Global PIQA columns: the core four, `id`, `lang`, then the recipe's extras present.

    J-PIQA rows whose `source` names their part go through `release_columns` (the appendix's
    source/orig_line_no/is_translation); otherwise the stored columns are copied as they are.
    """
    missing = [c for c in ("goal", "sol1", "sol2", "label") if c not in items.column_names]
    if missing:
        raise ValueError(f"a Global PIQA file needs columns goal, sol1, sol2, label; missing {missing}")
    renamed = items.rename_columns([FROM_ITEM.get(c, c) for c in items.column_names])
    if recipe == "j-piqa" and _has_values(items, "source"):
        from transforms.piqa.tables import release_columns

        try:
            paper = release_columns(items)
            for name in ("source", "orig_line_no", "is_translation"):
                i = renamed.schema.get_field_index(name)
                col = paper.column(name)
                renamed = renamed.set_column(i, name, col) if i >= 0 else renamed.append_column(name, col)
        except ValueError:
            pass  # parts not named the paper's way: keep the stored columns
    extras = [c for c in EXTRAS.get(recipe, ("is_cultural", "source")) if _has_values(renamed, c)]
    keep = [*CORE, *[c for c in ("id", "lang") if c in renamed.column_names], *extras]
    out = renamed.select(list(dict.fromkeys(keep)))
    return out.set_column(out.schema.get_field_index("label"), "label", out.column("label").cast(pa.int64()))


def _tsv_cell(value: Any) -> tuple[str, bool]:
    """(cell text, changed?): None → empty, bool → true/false, tabs and line breaks → one space."""
    if value is None:
        return "", False
    if isinstance(value, bool):
        return ("true" if value else "false"), False
    text = str(value)
    clean = _BREAKS.sub(" ", text)
    return clean, clean != text


def write_global_piqa(items: pa.Table, out_dir: str | Path, stem: str, recipe: str = "generic") -> dict[str, Any]:
    """Write `<stem>.tsv` and `<stem>.jsonl` into `out_dir`; returns {"files", "columns", "rows", "tsv_cells_changed"}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = global_piqa_table(items, recipe)
    rows = table.to_pylist()
    columns = list(table.column_names)
    jsonl, tsv = out / f"{stem}.jsonl", out / f"{stem}.tsv"
    with open(jsonl, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    changed = 0
    with open(tsv, "w", encoding="utf-8", newline="") as f:
        f.write("\t".join(columns) + "\n")
        for row in rows:
            cells = []
            for c in columns:
                cell, was_changed = _tsv_cell(row[c])
                changed += was_changed
                cells.append(cell)
            f.write("\t".join(cells) + "\n")
    return {"files": [jsonl.name, tsv.name], "columns": columns, "rows": len(rows), "tsv_cells_changed": changed}


def _typed(column: str, value: Any) -> Any:
    if value is None or value == "":
        return None
    if column in INT_COLUMNS:
        return int(value)
    if column in BOOL_COLUMNS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false", "1", "0"):
            raise ValueError(f"{column}={value!r} is not a boolean")
        return text in ("true", "1")
    return value


def read_global_piqa(path: str | Path, *, lang: str | None = None, source: str | None = None) -> pa.Table:
    """A Global PIQA TSV or JSONL (ours or anyone's) → the item schema (goal/sol1/sol2, glosses renamed)."""
    path = Path(path)
    if path.suffix.lower() == ".tsv":
        with open(path, encoding="utf-8", newline="") as f:
            rows: list[dict[str, Any]] = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    else:
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    if rows and not set(CORE) <= set(rows[0]):
        raise ValueError(f"{path}: not a Global PIQA file; needs columns {list(CORE)}, has {sorted(rows[0])}")
    items = []
    for i, row in enumerate(rows):
        item = {TO_ITEM.get(k, k): _typed(k, v) for k, v in row.items()}
        item["id"] = str(item.get("id") or f"{path.stem}-{i:05d}")
        item["lang"] = item.get("lang") or lang or "und"
        if source and not item.get("source"):
            item["source"] = source
        items.append(item)
    return conform_items(pa.Table.from_pylist(items)) if items else conform_items(
        pa.table({"id": pa.array([], pa.string())}))


def card_section(info: dict[str, Any]) -> str:
    """The card's "Global PIQA files" section: the files, then what each column means."""
    files = ", ".join(f"`{f}`" for f in info["files"])
    lines = ["## Global PIQA shape", "",
             f"{files}: the same {info['rows']:,} items as `prompt, solution0, solution1, label` (the Global PIQA "
             "submission columns, read as is by lm-evaluation-harness's `global_piqa` tasks), UTF-8, one item per "
             "line, then the columns below. Global PIQA's licence forbids training on its data; these files are "
             "an evaluation set in its format and carry the same intent.", ""]
    if info.get("tsv_cells_changed"):
        lines += [f"{info['tsv_cells_changed']} TSV cell(s) held a tab or line break, written as a space; the JSONL "
                  "keeps the exact text.", ""]
    lines += ["| column | meaning |", "|---|---|"]
    lines += [f"| `{c}` | {COLUMN_DOCS.get(c, 'recipe column')} |" for c in info["columns"]]
    return "\n".join(lines) + "\n"
