"""Ko-PIQA's labelled questions (lake/samples/ko_seed_labels.jsonl, docs/ko_piqa_rubric.md) and the KiN split.

Naver KiN questions are split by the parity of the `docId` in their URL: even ones may be labelled
and trained on, odd ones are a held-out set used only to check a job, never to fit or tune it. The
recipe's linear judges carry the same split (`judge.held_out` in jobs/recipes/ko-piqa.yaml), so their
training refuses odd-docId rows too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from transforms.judge.labels import LabelError, LabelledRow, ParitySplit
from transforms.judge.labels import load_labels as _load_labels

__all__ = ["DOC_ID", "KIN_SPLIT", "LabelError", "LabelledRow", "kin_parity", "load_labels"]

DOC_ID = re.compile(r"docId=(\d+)")
KIN_SPLIT = ParitySplit(url_id=DOC_ID.pattern, held_out="odd")


def kin_parity(url: Any) -> str | None:
    """'even' / 'odd' for a Naver KiN URL, None for anything else."""
    return KIN_SPLIT.parity(url)


def load_labels(path: str | Path, *, allow_held_out: bool = False) -> list[LabelledRow]:
    """Read a labels JSONL; refuses odd-docId KiN rows unless `allow_held_out` (evaluation only)."""
    return _load_labels(path, held_out=None if allow_held_out else KIN_SPLIT)
