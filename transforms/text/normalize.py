"""HTML markup, Unicode NFKC, control characters and whitespace; the original text is kept beside it
(`text_original`).

Crawled HTML (tags, character references such as `&nbsp;`, scripts, navigation and footers) becomes the text a
reader sees first (`strip_html`, transforms/text/html.py: lxml's parser, only on rows that hold a tag of a known
element or a character reference).

NFKC and the whitespace fold are the costly parts (≈ 2.1 and 1.3 µs a Korean crawl row in polars), and most rows
need neither: a text of ASCII, Hangul syllables, CJK unified ideographs and kana only is its own NFKC (none of those
code points changes, and none is the second half of a canonical composition: tests/text/test_normalize.py checks
every one against Python's `unicodedata`), and a text without a tab, newline, other Unicode space, two spaces in a
row or an edge space has nothing to fold. Each step runs on the rows that need it only; every row comes out as the
whole-column expressions would make it (the same test, on the bundled crawl and four Korean corpora).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import polars as pl
import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.stage import Stage
from transforms.text.html import HTML_MARK, html_to_text

# A character outside the NFKC-stable set above: only rows holding one are normalised.
NFKC_MAY_CHANGE = r"[^\x00-\x7F\x{AC00}-\x{D7A3}\x{4E00}-\x{9FFF}\x{3041}-\x{3096}\x{30A1}-\x{30FA}]"
CONTROL = r"[\p{Cc}&&[^\t\n\r]]|\p{Cf}"  # controls (tab and newlines are folded next), zero-width, BOM, bidi marks
# Something `\s+ -> " "` and the trim would change: any space but U+0020, two in a row, one at either end.
NEEDS_FOLD = r"[\s&&[^ ]]|\s\s|^\s|\s$"


def only_where(values: pl.Series, pattern: str, fn: Callable[[pl.Series], pl.Series]) -> pl.Series:
    """`fn` applied to the values matching `pattern`; the others (and nulls) as they are."""
    mask = values.str.contains(pattern).fill_null(False)
    hits = int(mask.sum())
    if hits == 0:
        return values
    if hits == len(values):
        return fn(values)
    idx = mask.arg_true()
    return values.clone().scatter(idx, fn(values.gather(idx)))


class NormalizeText(Stage):
    name: ClassVar[str] = "normalize"
    fuse: ClassVar[bool] = True  # cheap next to a pass over its input: runs in one pass with its neighbours
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    writes: ClassVar[tuple[str, ...]] = (C.TEXT, "text_original")

    strip_html: bool = Field(True, description="Turn HTML into its text: tags, character references, comments, "
                             "scripts, styles and page furniture (nav, header, footer, aside, forms) removed; "
                             "block elements end a line (transforms/text/html.py).")
    nfkc: bool = Field(True, description="Apply Unicode NFKC (full-width → half-width, compatibility forms).")
    strip_control: bool = Field(True, description="Remove control and zero-width characters.")
    collapse_whitespace: bool = Field(True, description="Collapse runs of whitespace to one space and trim.")

    def process(self, batch: pa.Table) -> pa.Table:
        df = pl.from_arrow(batch)
        assert isinstance(df, pl.DataFrame)
        original = "text_original" if "text_original" in df.columns else C.TEXT
        text = df.get_column(C.TEXT).cast(pl.String)
        if self.strip_html:
            text = only_where(text, f"(?i){HTML_MARK}",
                              lambda s: s.map_elements(html_to_text, return_dtype=pl.String, skip_nulls=True))
        if self.nfkc:
            text = only_where(text, NFKC_MAY_CHANGE, lambda s: s.str.normalize("NFKC"))
        if self.strip_control:
            text = only_where(text, CONTROL, lambda s: s.str.replace_all(CONTROL, ""))
        if self.collapse_whitespace:
            text = only_where(text, NEEDS_FOLD, lambda s: s.str.replace_all(r"\s+", " ").str.strip_chars())
        df = df.with_columns(pl.col(original).alias("text_original"), text.alias(C.TEXT))
        return df.to_arrow()
