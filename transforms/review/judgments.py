"""Long-format judgments: one row per (item, annotator) with a label.

`read_judgments` reads any JSONL / CSV / TSV / Parquet file and maps three of its columns (the item
key may be several columns, e.g. a premise and its two choices) to `item`, `annotator`, `label`;
`rating_matrix` turns that into the items × annotators matrix of category codes every agreement
statistic starts from. Nothing is dropped quietly: rows without a label, items rated once and
duplicate (item, annotator) pairs are counted in `RatingMatrix.notes`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ITEM, ANNOTATOR, LABEL = "item", "annotator", "label"
MISSING = -1  # code of "this annotator did not rate this item"


class JudgmentError(ValueError):
    """The judgments cannot be read or mapped (missing column, unreadable file, duplicates)."""


def sniff_delimiter(path: Path) -> str:
    """The most frequent of tab, semicolon and comma in the header (a `.tsv` may well use `;`)."""
    with open(path, encoding="utf-8-sig") as f:
        header = f.readline()
    counts = {sep: header.count(sep) for sep in ("\t", ";", ",")}
    best = max(counts, key=lambda s: counts[s])
    return best if counts[best] else ","


def read_table(path: str | Path) -> pa.Table:
    """Read a whole table by suffix: .jsonl/.json, .csv/.tsv/.txt (delimiter sniffed), .parquet."""
    import polars as pl

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"judgments file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet" or path.is_dir():
        from transforms.core.lake import read_table as read_parquet

        return read_parquet(path)
    if suffix in (".jsonl", ".ndjson"):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return pl.from_dicts(rows, infer_schema_length=None).to_arrow() if rows else pa.table({})
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise JudgmentError(f"{path}: a .json judgments file must hold a list of objects")
        return pl.from_dicts(data, infer_schema_length=None).to_arrow() if data else pa.table({})
    if suffix in (".csv", ".tsv", ".txt"):
        # every column as text (labels such as "01" or "1.0" must not be reinterpreted), read whole:
        # UTF-16 / BOM / CRLF, a file cut inside a quote and trailing blank rows (input_files.py)
        from transforms.io.input_files import read_sheet, unformat

        sheet = read_sheet(path)
        return pa.table({c: pa.array([unformat(r.get(c)) for r in sheet.rows], pa.string()) for c in sheet.columns})
    raise JudgmentError(f"{path}: unknown judgments format {suffix!r} (use .jsonl, .json, .csv, .tsv or .parquet)")


def as_text(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Labels and ids as strings; integral floats (1.0) print as integers so 1 and 1.0 agree."""
    if pa.types.is_floating(column.type):
        values = column.to_numpy(zero_copy_only=False)
        text = [None if v != v else (str(int(v)) if float(v).is_integer() else str(v)) for v in values]
        return pa.array(text, pa.string())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.string())
    return column.cast(pa.string())


def to_long(table: pa.Table, item: str | list[str] = "item_id", annotator: str = "annotator",
            label: str = "label") -> pa.Table:
    """Map a file's columns to the long format (`item`, `annotator`, `label` as strings)."""
    items = [item] if isinstance(item, str) else list(item)
    missing = [c for c in [*items, annotator, label] if c not in table.schema.names]
    if missing:
        raise JudgmentError(f"column(s) {missing} not in the judgments; columns are {table.schema.names}. "
                            f"Name them with --item/--annotator/--label.")
    parts = [as_text(table.column(c)) for c in items]
    key = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "\x1f")
    return pa.table({ITEM: key, ANNOTATOR: as_text(table.column(annotator)), LABEL: as_text(table.column(label))})


def read_judgments(path: str | Path, item: str | list[str] = "item_id", annotator: str = "annotator",
                   label: str = "label") -> pa.Table:
    return to_long(read_table(path), item, annotator, label)


@dataclass
class RatingMatrix:
    """codes[i, a] is the category index annotator a gave item i, or MISSING."""

    items: list[str]
    annotators: list[str]
    categories: list[str]
    codes: np.ndarray
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def raters_per_item(self) -> np.ndarray:
        return (self.codes != MISSING).sum(axis=1)

    def counts(self) -> np.ndarray:
        """items × categories: how many annotators put each item in each category."""
        k = len(self.categories)
        out = np.zeros((len(self.items), k), dtype=np.int64)
        rows, cols = np.nonzero(self.codes != MISSING)
        np.add.at(out, (rows, self.codes[rows, cols]), 1)
        return out


def rating_matrix(long: pa.Table, on_duplicate: Literal["error", "first"] = "error",
                  categories: list[str] | None = None) -> RatingMatrix:
    """Pivot long judgments to a matrix. Null or empty labels are not ratings (counted in notes);
    a second label by the same annotator for the same item is an error unless `on_duplicate="first"`."""
    import polars as pl

    frame = pl.from_arrow(long.select([ITEM, ANNOTATOR, LABEL]))
    assert isinstance(frame, pl.DataFrame)
    notes: dict[str, Any] = {"rows": frame.height}
    no_annotator = frame.filter(pl.col(ANNOTATOR).is_null() | (pl.col(ANNOTATOR).str.strip_chars() == ""))
    if no_annotator.height:
        raise JudgmentError(f"{no_annotator.height} judgment(s) have no annotator, e.g. item "
                            f"{no_annotator[ITEM][0]!r}: agreement needs to know who rated what")
    unlabeled = frame.filter(pl.col(LABEL).is_null() | (pl.col(LABEL).str.strip_chars() == ""))
    notes["rows_without_label"] = unlabeled.height
    frame = frame.filter(pl.col(LABEL).is_not_null() & (pl.col(LABEL).str.strip_chars() != ""))
    frame = frame.with_row_index("_order")
    dup = frame.filter(pl.len().over([ITEM, ANNOTATOR]) > 1)
    if dup.height:
        pairs = dup.select([ITEM, ANNOTATOR]).unique(maintain_order=True)
        example = pairs.row(0)
        if on_duplicate == "error":
            raise JudgmentError(f"{pairs.height} (item, annotator) pair(s) have more than one label, e.g. item "
                                f"{example[0]!r} by {example[1]!r}; keep the first with --duplicates first")
        notes["duplicate_labels_dropped"] = dup.height - pairs.height
        notes["duplicate_pairs"] = pairs.height
        frame = frame.unique([ITEM, ANNOTATOR], keep="first", maintain_order=True)
    # sorted, so the bootstrap's resampled items (and every figure) do not depend on the order of the rows or files
    items = sorted(frame[ITEM].unique().to_list())
    annotators = sorted(frame[ANNOTATOR].unique().to_list())
    seen = sorted(frame[LABEL].unique().to_list(), key=_natural)
    if categories is None:
        categories = seen
    else:
        unknown = sorted(set(seen) - set(categories))
        if unknown:
            raise JudgmentError(f"label(s) {unknown} are not among the categories {categories}")
    item_idx = {v: i for i, v in enumerate(items)}
    ann_idx = {v: i for i, v in enumerate(annotators)}
    cat_idx = {v: i for i, v in enumerate(categories)}
    codes = np.full((len(items), len(annotators)), MISSING, dtype=np.int64)
    rows = np.fromiter((item_idx[v] for v in frame[ITEM]), dtype=np.int64, count=frame.height)
    cols = np.fromiter((ann_idx[v] for v in frame[ANNOTATOR]), dtype=np.int64, count=frame.height)
    codes[rows, cols] = np.fromiter((cat_idx[v] for v in frame[LABEL]), dtype=np.int64, count=frame.height)
    return RatingMatrix(items, annotators, list(categories), codes, notes)


def _natural(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)
