"""Cheap length filters on the normalised text: empty, too short, too long (in characters)."""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage


class LengthDrops(DropReason):
    EMPTY = "empty", "the text is empty"
    TOO_SHORT = "too_short", "the text is shorter than `min_chars`"
    TOO_LONG = "too_long", "the text is longer than `max_chars`"


class LengthFilter(Stage[LengthDrops]):
    """Drop rows whose text is empty (`empty`), shorter than `min_chars` (`too_short`) or longer
    than `max_chars` (`too_long`). Counts Unicode code points, so a Hangul syllable is one char."""

    name: ClassVar[str] = "length_filter"
    fuse: ClassVar[bool] = True  # cheap next to a pass over its input: runs in one pass with its neighbours
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)

    min_chars: int = Field(10, ge=1, description="Shortest text kept, in characters.")
    max_chars: int = Field(2000, ge=1, description="Longest text kept, in characters.")

    @model_validator(mode="after")
    def _bounds(self) -> LengthFilter:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) > max_chars ({self.max_chars})")
        return self

    def process(self, batch: pa.Table) -> pa.Table:
        length = pc.fill_null(pc.utf8_length(batch.column(C.TEXT).cast(pa.string())), 0)
        # columnar: an earlier reason on a row wins, so the most specific is given first
        batch = self.drop_where(batch, pc.equal(length, 0), LengthDrops.EMPTY)
        batch = self.drop_where(batch, pc.less(length, self.min_chars), LengthDrops.TOO_SHORT)
        return self.drop_where(batch, pc.greater(length, self.max_chars), LengthDrops.TOO_LONG)
