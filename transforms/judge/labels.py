"""Labelled rows for the judges (one JSON object a line: id, text, source, url, 0/1 labels) and held-out splits.

A labels file may mix rows that may be trained on and rows held out to check a judge, never to fit or tune it.
`ParitySplit` says which by the parity of a number in a row's URL (Ko-PIQA holds out Naver KiN questions
with an odd `docId`, transforms/recipes/ko_piqa/seeds.py); `load_labels(path, held_out=split)` refuses the
held-out rows, and `LinearJudge.held_out` makes training refuse them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class LabelError(ValueError):
    """The labels file is missing, malformed or cannot train a classifier."""


class LabelledRow(BaseModel):
    id: str
    text: str
    source: str = ""
    url: str | None = None
    physical: int = Field(..., ge=0, le=1)
    cultural: int = Field(0, ge=0, le=1)
    annotator: str = ""
    note: str = ""


class ParitySplit(BaseModel):
    """Rows whose `url` carries a number (a document id) split by its parity: one side is held out."""

    model_config = ConfigDict(extra="forbid")

    url_id: str = Field(..., description="Regular expression whose first group is the number, e.g. `docId=(\\d+)`.")
    held_out: Literal["even", "odd"] = Field("odd", description="The parity whose rows are held out.")

    def parity(self, url: Any) -> Literal["even", "odd"] | None:
        """'even' / 'odd' for a URL carrying the id, None for any other."""
        match = re.search(self.url_id, str(url or ""))
        if not match:
            return None
        return "even" if int(match.group(1)) % 2 == 0 else "odd"

    def holds_out(self, row: LabelledRow) -> bool:
        return self.parity(row.url) == self.held_out


def load_labels(path: str | Path, *, held_out: ParitySplit | None = None) -> list[LabelledRow]:
    """Read a labels JSONL; a row that `held_out` holds out is refused (pass None when evaluating)."""
    path = Path(path)
    if not path.exists():
        raise LabelError(f"labels file {path} does not exist")
    from transforms.io.input_files import InputFileError, decode

    try:
        text = decode(path)  # UTF-8 with or without a BOM, UTF-16, Windows line ends
    except InputFileError as err:
        raise LabelError(str(err)) from None
    rows = []
    seen: dict[str, int] = {}
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = LabelledRow.model_validate(json.loads(line))
        except (ValueError, TypeError) as err:
            why = " ".join(str(err).split())[:200]
            raise LabelError(f"{path}:{n}: not a labelled row ({why})") from None
        if row.id in seen:
            raise LabelError(f"{path}:{n}: id {row.id!r} is labelled twice (first at line {seen[row.id]})")
        seen[row.id] = n
        if held_out is not None and held_out.holds_out(row):
            raise LabelError(f"{path}:{n}: {row.id} has an {held_out.held_out} id in its URL ({row.url}), the held-out "
                             "set; it must not be used for training")
        rows.append(row)
    if not rows:
        raise LabelError(f"labels file {path} holds no rows")
    return rows
