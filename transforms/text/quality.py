"""Cheap length filters on the normalised text: empty, too short, too long (in characters)."""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from transforms.core import columns as C
from transforms.core.stage import FilterStage


class LengthFilter(FilterStage):
    """Drop rows whose text is empty (`empty`), shorter than `min_chars` (`too_short`) or longer
    than `max_chars` (`too_long`). Counts Unicode code points, so a Hangul syllable is one char."""

    name: ClassVar[str] = "length_filter"
    fuse: ClassVar[bool] = True  # cheap next to a pass over its input: runs in one pass with its neighbours
    drop_reasons: ClassVar[dict[str, str]] = {
        "empty": "the text is empty",
        "too_short": "the text is shorter than `min_chars`",
        "too_long": "the text is longer than `max_chars`",
    }
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)

    min_chars: int = Field(10, ge=1, description="Shortest text kept, in characters.")
    max_chars: int = Field(2000, ge=1, description="Longest text kept, in characters.")

    @model_validator(mode="after")
    def _bounds(self) -> LengthFilter:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) > max_chars ({self.max_chars})")
        return self

    def reasons(self, batch: pa.Table) -> pa.Array:
        text = batch.column(C.TEXT).cast(pa.string())
        length = pc.fill_null(pc.utf8_length(text), 0)
        none = pa.scalar(None, pa.string())
        reason = pc.if_else(pc.greater(length, self.max_chars), pa.scalar("too_long"), none)
        reason = pc.if_else(pc.less(length, self.min_chars), pa.scalar("too_short"), reason)
        return pc.if_else(pc.equal(length, 0), pa.scalar("empty"), reason)
