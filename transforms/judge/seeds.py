"""Labelled questions (lake/samples/ko_seed_labels.jsonl, docs/ko_piqa_rubric.md) and the KiN split.

Naver KiN questions are split by the parity of the `docId` in their URL: even ones may be labelled
and trained on, odd ones are a held-out set used only to check a job, never to fit or tune it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

DOC_ID = re.compile(r"docId=(\d+)")


class LabelError(ValueError):
    """The labels file is missing, malformed or cannot train a classifier."""


def kin_parity(url: Any) -> str | None:
    """'even' / 'odd' for a Naver KiN URL, None for anything else."""
    match = DOC_ID.search(str(url or ""))
    if not match:
        return None
    return "even" if int(match.group(1)) % 2 == 0 else "odd"


class LabelledRow(BaseModel):
    id: str
    text: str
    source: str = ""
    url: str | None = None
    physical: int = Field(..., ge=0, le=1)
    cultural: int = Field(0, ge=0, le=1)
    annotator: str = ""
    note: str = ""


def load_labels(path: str | Path, *, allow_held_out: bool = False) -> list[LabelledRow]:
    """Read a labels JSONL; refuses odd-docId KiN rows unless `allow_held_out` (evaluation only)."""
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
        if not allow_held_out and kin_parity(row.url) == "odd":
            raise LabelError(f"{path}:{n}: {row.id} is an odd-docId KiN question, the held-out set; it must "
                             f"not be used for training")
        rows.append(row)
    if not rows:
        raise LabelError(f"labels file {path} holds no rows")
    return rows
