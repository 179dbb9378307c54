"""Why a stage drops rows: one typed declaration on the stage's class.

A stage's reasons are the members of a `DropReason` enum, each with the kind written on disk and what it means::

    class LengthDrops(DropReason):
        TOO_LONG = "too_long", "the text is longer than `max_chars`"

    class LengthFilter(Stage[LengthDrops]): ...

The stage drops rows only by naming a member (`self.drop(batch, [LengthDrops.TOO_LONG, None])`, a detail such as
`goal` as the second half of a pair: `(Drops.EMPTY_FIELD, "goal")` is written `empty_field:goal`), and `Stage` is
generic over its enum, so mypy refuses another stage's member or a bare string. The catalogue, `piqaforge stages`
and docs/stages_reference.md read the same members; a stage from outside the repo that writes strings of its own
keeps the runtime check (`check_drop_reasons`).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import pyarrow as pa


class DropReason(StrEnum):
    """Base of every stage's reasons: a member's value is the kind written in `drop_reason`, `meaning` says why."""

    meaning: str

    # `meaning` may be left out only by cloudpickle, which rebuilds an enum defined outside a module (a notebook's
    # stage on a Ray worker) from its values; the stage class keeps the meanings in its `drop_reasons`.
    def __new__(cls, kind: str, meaning: str = "") -> DropReason:
        member = str.__new__(cls, kind)
        member._value_ = kind
        member.meaning = meaning
        return member

    @classmethod
    def meanings(cls) -> dict[str, str]:
        return {str(m): m.meaning for m in cls}


class NoDrops(DropReason):
    """The reasons of a stage that keeps every row: none."""


def reason_text(reason: DropReason | tuple[DropReason, str] | None) -> str | None:
    if reason is None:
        return None
    if isinstance(reason, tuple):
        kind, detail = reason
        return f"{kind.value}:{detail}"
    return reason.value


def reason_array(reasons: Sequence[DropReason | tuple[DropReason, str] | None]) -> pa.Array:
    """The `drop_reason` strings of `reasons`, as they are written on disk."""
    return pa.array([reason_text(r) for r in reasons], pa.string())
