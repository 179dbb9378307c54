"""Read and write PIQA items in the formats the five recipes and their sources use.

* PIQA's own: `X.jsonl` with goal/sol1/sol2 (+ aligned `X-labels.lst`, one 0/1 per line);
* prompt/solution0/solution1/label as CSV or JSONL (J-PIQA and the Russian set);
* Parquet in the item schema (the lake and the release);
* COPA-style two-choice sets (XCOPA-ta, PARus): see `transforms.piqa.copa`.

Every reader returns an Arrow table conformed to `ITEM_SCHEMA`; `validate_items` says what is wrong.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.piqa.copa import read_parus, read_xcopa
from transforms.piqa.schema import GOAL, ID, LABEL, LANG, SOL1, SOL2, SOURCE, conform_items, validate_items

__all__ = ["read_items", "read_parus", "read_piqa", "read_prompt_solution", "read_xcopa", "validate_items",
           "write_items", "write_piqa", "write_prompt_solution", "detect_lang"]

# prompt/solution column → item column (glosses follow the same pattern).
PROMPT_SOLUTION = {"prompt": GOAL, "solution0": SOL1, "solution1": SOL2,
                   "prompt_gloss": "goal_gloss", "solution0_gloss": "sol1_gloss", "solution1_gloss": "sol2_gloss"}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n} is not valid JSON: {err}") from err
    return rows


def _write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _label(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = value.strip()
    try:
        return int(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"label {value!r} is not 0 or 1") from err


def detect_lang(texts: list[str]) -> str:
    """The majority fastText lid.176 language of `texts` (used when a file carries no `lang`)."""
    from transforms.text.textcheck import identify_languages

    votes = Counter(identify_languages([t for t in texts[:500] if t]))
    return votes.most_common(1)[0][0] if votes else "und"


def _finish(rows: list[dict[str, Any]], lang: str | None, source: str | None) -> pa.Table:
    if lang is None and rows and not all(r.get(LANG) for r in rows):
        lang = detect_lang([str(r.get(GOAL) or "") for r in rows])
    for row in rows:
        if lang is not None and not row.get(LANG):
            row[LANG] = lang
        if source is not None and not row.get(SOURCE):
            row[SOURCE] = source
    table = pa.Table.from_pylist(rows) if rows else pa.table({c: pa.array([], pa.string()) for c in (ID, GOAL)})
    return conform_items(table)


# -- PIQA's own format ----------------------------------------------------------------------------------
def read_piqa(jsonl: str | Path, labels_lst: str | Path | None = None, *, lang: str = "en",
              source: str = "piqa", split: str | None = None) -> pa.Table:
    """PIQA `X.jsonl` (+ `X-labels.lst`); a `label` key in the JSONL (valid_labeled.jsonl) also works.

    Ids are `piqa-<split>-<line>`; `orig_line_no` keeps the 0-based line (what J-PIQA records).
    """
    jsonl = Path(jsonl)
    rows = _read_jsonl(jsonl)
    split = split or jsonl.stem.replace("_labeled", "")
    labels: list[int | None] | None = None
    if labels_lst is not None:
        labels = [_label(x) for x in Path(labels_lst).read_text(encoding="utf-8").split()]
        if len(labels) != len(rows):
            raise ValueError(f"{labels_lst} has {len(labels)} labels for {len(rows)} items in {jsonl}")
    items = []
    for i, row in enumerate(rows):
        label = labels[i] if labels is not None else _label(row.get(LABEL))
        items.append({ID: str(row.get(ID) or f"{source}-{split}-{i:05d}"), LANG: row.get(LANG) or lang,
                      GOAL: row.get(GOAL), SOL1: row.get(SOL1), SOL2: row.get(SOL2), LABEL: label,
                      SOURCE: row.get(SOURCE) or source, "orig_line_no": i})
    return _finish(items, lang, source)


def write_piqa(table: pa.Table, jsonl: str | Path, labels_lst: str | Path | None = None, *,
               include_id: bool = False) -> None:
    """Write goal/sol1/sol2 JSONL and, when given a path, the aligned labels file."""
    cols = ([ID] if include_id else []) + [GOAL, SOL1, SOL2]
    _write_jsonl(table.select(cols).to_pylist(), Path(jsonl))
    if labels_lst is not None:
        labels = table.column(LABEL).to_pylist()
        Path(labels_lst).write_text("".join(f"{'' if x is None else x}\n" for x in labels), encoding="utf-8")


# -- prompt/solution0/solution1/label (J-PIQA, Russian PIQA) ---------------------------------------------
def read_prompt_solution(path: str | Path, *, lang: str | None = None, source: str | None = None) -> pa.Table:
    """CSV or JSONL with prompt/solution0/solution1/label; other columns are kept as they are."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            rows: list[dict[str, Any]] = list(csv.DictReader(f))
    else:
        rows = _read_jsonl(path)
    items = []
    for i, row in enumerate(rows):
        item = {PROMPT_SOLUTION.get(k, k): (None if v == "" else v) for k, v in row.items()}
        missing = [k for k in ("prompt", "solution0", "solution1") if k not in row]
        if missing:
            raise ValueError(f"{path}: row {i} lacks column(s) {missing} of the prompt/solution format")
        item[ID] = str(item.get(ID) or f"{source or path.stem}-{i:05d}")
        item[LABEL] = _label(item.get(LABEL))
        items.append(item)
    return _finish(items, lang, source or path.stem)


def write_prompt_solution(table: pa.Table, path: str | Path) -> None:
    """Write the prompt/solution form (CSV or JSONL by suffix) with id, lang and any glosses."""
    path = Path(path)
    inverse = {v: k for k, v in PROMPT_SOLUTION.items()}
    keep = [c for c in (ID, LANG, GOAL, SOL1, SOL2, LABEL, "goal_gloss", "sol1_gloss", "sol2_gloss")
            if c in table.column_names and table.column(c).null_count < table.num_rows]
    rows = [{inverse.get(k, k): v for k, v in row.items()} for row in table.select(keep).to_pylist()]
    if path.suffix.lower() == ".csv":
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[inverse.get(k, k) for k in keep])
            writer.writeheader()
            writer.writerows(rows)
    else:
        _write_jsonl(rows, path)


# -- Parquet and auto-detection -------------------------------------------------------------------------
def write_items(table: pa.Table, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_items(path: str | Path, **kwargs: Any) -> pa.Table:
    """Read any supported form, telling them apart by suffix and, for JSONL, by the first row's keys.

    A directory is read as Parquet files (a lake zone), an XCOPA folder or a PARus folder.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such input: {path}")
    if path.is_dir():
        from transforms.core.lake import parquet_files, read_table

        if parquet_files(path):
            return conform_items(read_table(path))
        if list(path.glob("data_*_val.*.jsonl")):
            return read_xcopa(path, **kwargs)
        if (path / "assign_PARus.tsv").exists():
            return read_parus(path, **kwargs)
        raise ValueError(f"{path}: no Parquet files, XCOPA or PARus data found in this directory")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return conform_items(pq.read_table(path))
    if suffix == ".csv":
        return read_prompt_solution(path, **kwargs)
    if suffix == ".tsv":
        return read_parus(path, **kwargs)
    if suffix in (".jsonl", ".json"):
        with open(path, encoding="utf-8") as f:
            first = json.loads(next((ln for ln in f if ln.strip()), "{}"))
        if "prompt" in first and "solution0" in first:
            return read_prompt_solution(path, **kwargs)
        if "premise" in first and "choice1" in first:
            return read_xcopa(path, **kwargs)
        if GOAL in first and SOL1 in first:
            if ID in first and LANG in first:  # already in the item schema: keep every column
                return _finish(_read_jsonl(path), None, None)
            labels = path.with_name(path.stem + "-labels.lst")
            return read_piqa(path, labels if labels.exists() else None, **kwargs)
        raise ValueError(f"{path}: unknown JSONL layout (first row keys {sorted(first)})")
    raise ValueError(f"{path}: unsupported file type {suffix!r} (parquet, jsonl, csv, tsv or a directory)")
