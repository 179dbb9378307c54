"""Labelled rows for the judges (one JSON object a line: id, text, source, url and 0/1 label columns) and
held-out splits.

A label is any 0/1 column a recipe names (`judge.label: everyday`, `physical`, `cultural`, ...): a row must
carry the one its judge learns, and may carry others. A labels file may mix rows that may be trained on and
rows held out to check a judge, never to fit or tune it; the held-out split is declared in the recipe
(`judge.held_out`), as one of:

* `{fraction: 0.2, seed: 0}` — a fixed share of the rows, chosen by a hash of (seed, id): the same rows on
  every machine and every run, whatever order the file is in;
* `{column: split, values: [test]}` — the rows whose column holds one of the values;
* `{column: url, pattern: 'held-out/'}` — the rows whose column matches a regular expression;
* `{url_id: 'docId=(\\d+)', held_out: odd}` — the parity of a number in the URL (Ko-PIQA holds out Naver KiN
  questions with an odd `docId`, transforms/recipes/ko_piqa/seeds.py).

`load_labels(path, held_out=split)` leaves the held-out rows out (a fraction, column or pattern split: they
are set aside and the judge's report is measured on them) or refuses a file holding one (the parity split,
whose held-out rows live in a file of their own: `rows: refuse`), so training never sees them. `labels_file_problems` says, without reading more than the file, why a labels file does not
fit a recipe's judge (the recipe check calls it before anything runs).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

# The columns every labelled row has besides its labels; any other column may be a label.
ROW_COLUMNS = ("id", "text", "source", "url", "annotator", "note")


class LabelError(ValueError):
    """The labels file is missing, malformed or cannot train a classifier."""


class LabelledRow(BaseModel):
    """One labelled text. Its labels are the extra 0/1 columns (`row.value("everyday")`, or `row.physical`)."""

    model_config = ConfigDict(extra="allow")

    id: str
    text: str
    source: str = ""
    url: str | None = None
    annotator: str = ""
    note: str = ""

    def value(self, label: str) -> int:
        """The row's 0/1 value of `label` (load_labels has checked it is there)."""
        return int((self.model_extra or {}).get(label, 0))

    def column(self, name: str) -> Any:
        """Any column of the row, label or not (None when absent): what a split reads."""
        if name in ROW_COLUMNS:
            return getattr(self, name)
        return (self.model_extra or {}).get(name)


class LabelFile(BaseModel):
    """A labels file and the source its rows come from where a row names none."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., description="Labelled JSONL (one object a line: id, text, the label columns).")
    source: str | None = Field(None, description="The `source` of rows that have none (what `negative_sources` "
                               "selects by); null: rows keep what they say.")


# What a split does with a held-out row of a training file: every split's `rows` field (its default is the split's).
HeldOutRows = Annotated[Literal["refuse", "set_aside"], Field(
    description="set_aside: held-out rows are left out of training and the judge is checked on them; refuse: a "
    "training file holding one is an error (the held-out rows live in a file of their own).")]


class ParitySplit(BaseModel):
    """Rows whose `url` carries a number (a document id) split by its parity: one side is held out."""

    model_config = ConfigDict(extra="forbid")

    url_id: str = Field(..., description="Regular expression whose first group is the number, e.g. `docId=(\\d+)`.")
    held_out: Literal["even", "odd"] = Field("odd", description="The parity whose rows are held out.")
    rows: HeldOutRows = "refuse"  # the held-out rows live in a file of their own

    def parity(self, url: Any) -> Literal["even", "odd"] | None:
        """'even' / 'odd' for a URL carrying the id, None for any other."""
        match = re.search(self.url_id, str(url or ""))
        if not match:
            return None
        return "even" if int(match.group(1)) % 2 == 0 else "odd"

    def holds_out(self, row: LabelledRow) -> bool:
        return self.parity(row.url) == self.held_out

    def why(self, row: LabelledRow) -> str:
        return f"has an {self.held_out} id in its URL ({row.url})"


class FractionSplit(BaseModel):
    """A fixed share of the rows, picked by a hash of (seed, id): independent of file order and machine."""

    model_config = ConfigDict(extra="forbid")

    fraction: float = Field(..., gt=0, lt=1, description="Share of the rows held out, e.g. 0.2.")
    seed: int = Field(0, description="Another seed holds out another set of rows of the same size.")
    rows: HeldOutRows = "set_aside"

    def holds_out(self, row: LabelledRow) -> bool:
        digest = hashlib.sha256(f"{self.seed}\x00{row.id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.fraction

    def why(self, row: LabelledRow) -> str:
        return f"falls in the held-out {self.fraction:.0%} (seed {self.seed})"


class ColumnSplit(BaseModel):
    """Rows whose `column` holds one of `values` are held out (e.g. `split: test`)."""

    model_config = ConfigDict(extra="forbid")

    column: str = Field(..., description="The row's column read, e.g. `split`.")
    values: list[Any] = Field(default_factory=lambda: ["held_out"], min_length=1,
                              description="Values meaning held out, compared as text (`true` matches true).")
    rows: HeldOutRows = "set_aside"

    def holds_out(self, row: LabelledRow) -> bool:
        value = row.column(self.column)
        return value is not None and str(value).lower() in {str(v).lower() for v in self.values}

    def why(self, row: LabelledRow) -> str:
        return f"has {self.column}={row.column(self.column)!r}"


class PatternSplit(BaseModel):
    """Rows whose `column` matches `pattern` (a regular expression, searched) are held out."""

    model_config = ConfigDict(extra="forbid")

    column: str = Field("url", description="The row's column read.")
    pattern: str = Field(..., description="Regular expression searched in the column's text.")
    rows: HeldOutRows = "set_aside"

    def holds_out(self, row: LabelledRow) -> bool:
        return re.search(self.pattern, str(row.column(self.column) or "")) is not None

    def why(self, row: LabelledRow) -> str:
        return f"has a {self.column} matching {self.pattern!r}"


def _split_kind(value: Any) -> str:
    keys = set(value) if isinstance(value, dict) else set(type(value).model_fields)
    return ("parity" if "url_id" in keys else "fraction" if "fraction" in keys else
            "pattern" if "pattern" in keys else "column")


HeldOut = Annotated[Annotated[ParitySplit, Tag("parity")] | Annotated[FractionSplit, Tag("fraction")]
                    | Annotated[PatternSplit, Tag("pattern")] | Annotated[ColumnSplit, Tag("column")],
                    Discriminator(_split_kind)]


def _label_names(label: str | Sequence[str] | None) -> list[str]:
    return [] if label is None else [label] if isinstance(label, str) else list(label)


def _row_problem(obj: Any, labels: list[str]) -> str | None:
    """Why one parsed line is not a labelled row with these labels; None when it is."""
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    has = ", ".join(obj) or "none"
    missing = [c for c in ("id", "text", *labels) if c not in obj]
    if missing:
        what = " and ".join(repr(m) for m in missing)
        role = "the label the recipe's judge learns, judge.label" if set(missing) & set(labels) else "required"
        return f"no {what} column ({role}); its columns: {has}"
    bad = [c for c in labels if obj[c] not in (0, 1)]  # True/False compare equal to 1/0
    if bad:
        return f"label {bad[0]!r} is {obj[bad[0]]!r}, must be 0 or 1"
    return None


def read_rows(path: str | Path, label: str | Sequence[str] | None = "physical", *,
              source: str | None = None) -> list[tuple[int, LabelledRow]]:
    """(line number, row) of every row of a labels JSONL, each checked to carry `label` as 0/1."""
    path = Path(path)
    if not path.exists():
        raise LabelError(f"labels file {path} does not exist")
    from transforms.io.input_files import InputFileError, decode

    try:
        text = decode(path)  # UTF-8 with or without a BOM, UTF-16, Windows line ends
    except InputFileError as err:
        raise LabelError(str(err)) from None
    names = _label_names(label)
    out: list[tuple[int, LabelledRow]] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise LabelError(f"{path}:{n}: not a labelled row (not JSON: {err})") from None
        problem = _row_problem(obj, names)
        if problem is None:
            obj = {**obj, **{c: int(obj[c]) for c in names}}
            if source and not obj.get("source"):
                obj["source"] = source
            try:
                row = LabelledRow.model_validate(obj)
            except ValueError as err:
                problem = " ".join(str(err).split())[:200]
        if problem is not None:
            raise LabelError(f"{path}:{n}: not a labelled row: {problem}")
        if row.id in seen:
            raise LabelError(f"{path}:{n}: id {row.id!r} is labelled twice (first at line {seen[row.id]})")
        seen[row.id] = n
        out.append((n, row))
    if not out:
        raise LabelError(f"labels file {path} holds no rows")
    return out


def load_labels(path: str | Path, *, held_out: Any = None, label: str | Sequence[str] | None = "physical",
                source: str | None = None) -> list[LabelledRow]:
    """The rows of a labels JSONL (each carrying `label` as 0/1) that may be trained on: a row the split
    `held_out` holds out is refused (`rows: refuse`) or left out (`rows: set_aside`); None reads every row
    (evaluation). `source` fills the rows that name none."""
    rows = []
    for n, row in read_rows(path, label, source=source):
        if held_out is not None and held_out.holds_out(row):
            if held_out.rows == "set_aside":
                continue
            raise LabelError(f"{path}:{n}: {row.id} {held_out.why(row)}, the held-out set; it must not be used "
                             "for training")
        rows.append(row)
    return rows


def held_out_labels(path: str | Path, held_out: Any, *, label: str | Sequence[str] | None = "physical",
                    source: str | None = None) -> list[LabelledRow]:
    """The rows of a labels file that the split `held_out` holds out (none without a split)."""
    if held_out is None:
        return []
    return [row for _, row in read_rows(path, label, source=source) if held_out.holds_out(row)]


def labels_file_problems(judge: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, problem) for each labels file of a judge's raw config (`labels`, `extra_labels`) that is missing
    or whose rows lack the judge's `label`, and for fewer trainable rows than `min_labels`: read before anything
    runs (transforms/flow/recipe_check.py)."""
    label = judge.get("label", "physical")
    files = [("labels", judge.get("labels"))]
    files += [(f"extra_labels.{i}", f) for i, f in enumerate(judge.get("extra_labels") or [])]
    problems = []
    read: list[LabelledRow] = []
    for key, spec in files:
        path = spec.get("path") if isinstance(spec, dict) else spec
        if not isinstance(path, str):
            continue  # the model's own validation names a malformed entry
        try:
            read += [row for _, row in read_rows(path, label)]
        except LabelError as err:
            problems.append((key, str(err)))
    need = judge.get("min_labels")
    if isinstance(need, int) and not problems:
        from pydantic import TypeAdapter, ValidationError

        try:
            split = TypeAdapter(HeldOut).validate_python(judge["held_out"]) if judge.get("held_out") else None
        except ValidationError:
            return problems  # the model's own validation names it
        imported_train = judge.get("imported_rows", "train") == "train"  # imported rows never join the held-out set

        def imported(row: LabelledRow) -> bool:
            value = row.column("round")
            return value not in (None, "") and int(value) > 0

        have = sum(1 for row in read if split is None or (imported_train and imported(row)) or not split.holds_out(row))
        if have < need:
            problems.append(("min_labels", f"the labels files hold {have} rows to train on, fewer than the "
                             f"recipe's minimum of {need}: label {need - have} more rows (held-out rows do not "
                             "count)"))
    return problems
