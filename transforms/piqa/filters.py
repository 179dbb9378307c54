"""Row filters for PIQA items that recipes put in their pipelines (J-PIQA: minimal pairs)."""

from __future__ import annotations

from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage
from transforms.text import textcheck as tc


class MinimalPairDrops(DropReason):
    NOT_MINIMAL_PAIR = "not_minimal_pair", "the solutions differ in more than `max_word_edits` words"


class MinimalPairFilter(Stage[MinimalPairDrops]):
    """Keep items whose two solutions differ by at most `max_word_edits` words (J-PIQA: 2).

    Languages written without spaces (ja, zh, th) are compared by characters instead, against
    `max_char_edits`. Writes `sol_edit_distance` (capped at the limit + 1) for every row.
    """

    name: ClassVar[str] = "minimal_pair"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = ("sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("sol_edit_distance",)

    max_word_edits: int = Field(2, ge=0, description="Word-level edits allowed between sol1 and sol2.")
    max_char_edits: int = Field(6, ge=0, description="Character edits allowed for no-space languages.")
    unit: Literal["auto", "word", "char"] = Field("auto", description="auto: by the row's `lang`.")
    default_lang: str | None = Field(None, description="Language when the table has no `lang` column.")

    def process(self, batch: pa.Table) -> pa.Table:
        sol1, sol2 = batch.column("sol1").to_pylist(), batch.column("sol2").to_pylist()
        langs = batch.column("lang").to_pylist() if "lang" in batch.column_names else [self.default_lang] * len(sol1)
        cap = max(self.max_word_edits, self.max_char_edits) + 1
        dist: list[int] = []
        reasons: list[tuple[MinimalPairDrops, str] | None] = []
        for a, b, lang in zip(sol1, sol2, langs, strict=True):
            d, unit = tc.pair_distance(a, b, lang, unit=self.unit, cap=cap)
            limit = self.max_word_edits if unit == "word" else self.max_char_edits
            dist.append(d)
            reasons.append(None if d <= limit else (MinimalPairDrops.NOT_MINIMAL_PAIR, unit))
        out = batch.append_column("sol_edit_distance", pa.array(dist, pa.int32()))
        return self.drop(out, reasons)
