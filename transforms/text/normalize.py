"""Unicode NFKC, control characters and whitespace; the original text is kept beside it."""

from __future__ import annotations

from typing import ClassVar

import polars as pl
import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.stage import Stage


class NormalizeText(Stage):
    name: ClassVar[str] = "normalize"
    fuse: ClassVar[bool] = True  # cheap next to a pass over its input: runs in one pass with its neighbours
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    writes: ClassVar[tuple[str, ...]] = (C.TEXT, "text_original")

    nfkc: bool = Field(True, description="Apply Unicode NFKC (full-width → half-width, compatibility forms).")
    strip_control: bool = Field(True, description="Remove control and zero-width characters.")
    collapse_whitespace: bool = Field(True, description="Collapse runs of whitespace to one space and trim.")

    def process(self, batch: pa.Table) -> pa.Table:
        df = pl.from_arrow(batch)
        assert isinstance(df, pl.DataFrame)
        text = pl.col(C.TEXT)
        if self.nfkc:
            text = text.str.normalize("NFKC")
        if self.strip_control:
            # Cc (controls, but keep \t\n which the next step folds), Cf (zero-width, BOM, bidi marks)
            text = text.str.replace_all(r"[\p{Cc}&&[^\t\n\r]]|\p{Cf}", "")
        if self.collapse_whitespace:
            text = text.str.replace_all(r"\s+", " ").str.strip_chars()
        original = "text_original" if "text_original" in df.columns else C.TEXT
        df = df.with_columns(pl.col(original).alias("text_original"), text.alias(C.TEXT))
        return df.to_arrow()
