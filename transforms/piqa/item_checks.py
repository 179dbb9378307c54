"""Checks on written items that inform reviewers and the card without dropping anything.

* Prompt length: the writing guideline asks for goals of more than 25 words where possible.
  `PromptLengthCheck` writes `goal_words` and a `short_prompt` flag; `length_report` gives the share
  of goals over the bar and the word-count summary the card prints.
* Varied openings: a writer who starts most items the same way ("அந்த ...", "How do I ...")
  produces a pattern a model can learn. `OpeningVariety` (global: it needs each writer's items
  together) writes `opening` (the first `opening_words` words), `opening_repeats` (how many of
  the writer's items share it) and a `repeated_opening` flag; `opening_report` summarises per writer.
* `agreement_figures`: the card's agreement slot from a review run (the card of human-written items is
  transforms/piqa/item_card.py).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, PrivateAttr, field_validator

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, Stage, StageError, put_column
from transforms.text import textcheck as tc

GOAL_WORDS, SHORT_PROMPT = "goal_words", "short_prompt"
OPENING, OPENING_REPEATS, REPEATED_OPENING = "opening", "opening_repeats", "repeated_opening"


def _langs(batch: pa.Table, default: str | None) -> list[str | None]:
    return batch.column("lang").to_pylist() if "lang" in batch.column_names else [default] * batch.num_rows


class PromptLengthCheck(Stage):
    """`goal_words` per item and `short_prompt` = not more than `min_words` words. Drops nothing."""

    name: ClassVar[str] = "prompt_length"
    reads: ClassVar[tuple[str, ...]] = ("goal",)
    writes: ClassVar[tuple[str, ...]] = (GOAL_WORDS, SHORT_PROMPT)

    min_words: int = Field(25, ge=1, description="A goal should have more than this many words.")
    default_lang: str | None = Field(None, description="Language when the table has no `lang` column.")

    def process(self, batch: pa.Table) -> pa.Table:
        counts = [tc.n_words(g, lang) for g, lang in zip(batch.column("goal").to_pylist(),
                                                          _langs(batch, self.default_lang), strict=True)]
        out = put_column(batch, GOAL_WORDS, pa.array(counts, pa.int32()))
        return put_column(out, SHORT_PROMPT, pa.array([c <= self.min_words for c in counts], pa.bool_()))


def summary(values: Sequence[int]) -> dict[str, Any]:
    if not values:
        return {"mean": None, "median": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(values), 2), "median": statistics.median(values),
            "min": min(values), "max": max(values)}


def length_report(goals: Sequence[str | None], langs: Sequence[str | None] | str | None = None,
                  min_words: int = 25) -> dict[str, Any]:
    """Words per prompt (mean/median/range) and the share of prompts with more than `min_words` words."""
    lang_list = [langs] * len(goals) if langs is None or isinstance(langs, str) else list(langs)
    counts = [tc.n_words(g, lang) for g, lang in zip(goals, lang_list, strict=True)]
    over = sum(c > min_words for c in counts)
    return {"items": len(counts), "words": summary(counts), "min_words": min_words, "over": over,
            "share_over": round(over / len(counts), 4) if counts else None, "flagged_short": len(counts) - over}


def first_words(text: str | None, n: int, lang: str | None = None) -> str:
    tokens = tc.words(text) if lang not in tc.NO_SPACE_LANGS else list((text or "").replace(" ", ""))
    return " ".join(tokens[:n])


class OpeningVariety(GlobalStage):
    """Per writer: how often each opening (first words of the goal) recurs. Drops nothing.

    An item is flagged when its opening is shared by more than `max_share` of its writer's items
    and by at least `min_repeats` of them (a writer with three items is not judged on shares).
    """

    name: ClassVar[str] = "opening_variety"
    reads: ClassVar[tuple[str, ...]] = ("goal",)
    writes: ClassVar[tuple[str, ...]] = (OPENING, OPENING_REPEATS, REPEATED_OPENING)

    writer_column: str = Field("writer_id", description="Column naming each item's writer.")
    opening_words: int = Field(1, ge=1, description="Words that make an opening.")
    max_share: float = Field(0.2, gt=0, le=1, description="Largest share of a writer's items one opening may start.")
    min_repeats: int = Field(3, ge=2, description="Fewest items with one opening before it can be flagged.")
    default_lang: str | None = Field(None, description="Language when the table has no `lang` column.")

    def check_columns(self, schema: pa.Schema) -> None:
        super().check_columns(schema)
        if self.writer_column not in schema.names:
            raise StageError(f"stage '{self.name}' needs the writer column {self.writer_column!r}; "
                             f"the batch has {schema.names}")

    def process_table(self, table: pa.Table) -> pa.Table:
        writers = [str(w) for w in table.column(self.writer_column).to_pylist()]
        openings = [first_words(g, self.opening_words, lang)
                    for g, lang in zip(table.column("goal").to_pylist(), _langs(table, self.default_lang), strict=True)]
        per_writer = Counter(writers)
        pairs = Counter(zip(writers, openings, strict=True))
        repeats = [pairs[(w, o)] for w, o in zip(writers, openings, strict=True)]
        flags = [r >= self.min_repeats and r / per_writer[w] > self.max_share for w, r in zip(writers, repeats,
                                                                                              strict=True)]
        out = put_column(table, OPENING, pa.array(openings, pa.string()))
        out = put_column(out, OPENING_REPEATS, pa.array(repeats, pa.int32()))
        return put_column(out, REPEATED_OPENING, pa.array(flags, pa.bool_()))


def opening_report(writers: Sequence[str], goals: Sequence[str | None], n_words: int = 1,
                   top: int = 3) -> dict[str, dict[str, Any]]:
    """Per writer: items, distinct openings, and the most frequent openings with their shares."""
    report: dict[str, dict[str, Any]] = {}
    for writer in sorted(set(writers)):
        mine = [first_words(g, n_words) for w, g in zip(writers, goals, strict=True) if w == writer]
        counts = Counter(mine)
        report[writer] = {"items": len(mine), "distinct_openings": len(counts),
                          "top": [{"opening": o, "items": c, "share": round(c / len(mine), 4)}
                                  for o, c in counts.most_common(top)]}
    return report


def agreement_figures(review: dict[str, Any] | None) -> dict[str, Any] | None:
    """The card's agreement slot from a review run's `extras.review`: consensus counts, percent
    agreement, Fleiss' and Krippendorff's with their intervals, as the review computed them."""
    if not review or not review.get("agreement"):
        return None
    rep = review["agreement"]

    def est(e: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if e is None else {k: e.get(k) for k in ("value", "ci", "n_items", "undefined")}

    return {"rule": review.get("rule"), "automatic": review.get("automatic"), "items": review.get("items"),
            "kept": review.get("kept"), "dropped": review.get("dropped"), "annotators": rep.get("annotators"),
            "percent_agreement": est(rep.get("percent_agreement")), "fleiss_kappa": est(rep.get("fleiss_kappa")),
            "krippendorff_alpha": est(rep.get("krippendorff_alpha")),
            "confidence": (rep.get("bootstrap") or {}).get("confidence")}


class ItemLanguageDrops(DropReason):
    WRONG_LANGUAGE = "wrong_language", "the item is not written in its language (language_detail says why)"


class ItemLanguageCheck(Stage[ItemLanguageDrops]):
    """Drop items not written in the benchmark's language (`wrong_language`, `language_detail` says which
    text and why), for any language a code names (ISO 639-1/-3, optional script: `th`, `sw`, `zh-Hant`).

    `auto` decides an item from all of its text (transforms/text/itemlang.py): each text's script against
    the language's, the whole item read by fastText lid.176 once, and each text read alone only with the
    confidence its length allows, so two-word genuine solutions stay and a solution in another language
    is still caught (measured on seven languages: docs/stages.md#language-checks-for-every-language).
    `script` and `fasttext` are the per-text checks of earlier releases."""

    name: ClassVar[str] = "item_language"
    extras: ClassVar[tuple[str, ...]] = ("langid",)
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("language_detail",)
    stateful: ClassVar[bool] = True
    lang: str = Field(..., description="Language code the items must be written in (ISO 639-1 or 639-3, optional "
                      "script: th, tha, zh-Hant); a `lang` column wins per row.")
    columns: list[str] = Field(default_factory=lambda: ["goal", "sol1", "sol2"],
                               description="The item's texts, decided together.")
    method: Literal["auto", "script", "fasttext"] = Field(
        "auto", description="auto: the item's script, its whole text and each text by length (recommended); "
        "script / fasttext: each text alone, the checks of earlier releases.")
    min_script_share: float = Field(0.5, gt=0, le=1, description="Least share of a text's letters in the "
                                    "language's script (0.5: a solution naming `USB` in Hangul still passes).")
    max_own_probability: float = Field(0.05, gt=0, le=1, description="auto: a text is caught as another "
                                       "language only while fastText gives the item's language less than this.")

    _model: Any = PrivateAttr(default=None)
    _model_path: str = PrivateAttr(default="")

    @field_validator("lang")
    @classmethod
    def _known_language(cls, value: str) -> str:
        from transforms.text.languages import check_language

        return check_language(value)

    def check_columns(self, schema: pa.Schema) -> None:
        """The texts it reads are `columns` (the class's `reads` is the default item's)."""
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            raise StageError(f"stage '{self.name}' needs column(s) {missing} (its `columns`), but the batch has "
                             f"{schema.names}. Check `columns`, the column mapping or the stage order.")

    def setup(self) -> None:
        from transforms.text.itemlang import load_lid

        self._model, self._model_path = load_lid()

    def process(self, batch: pa.Table) -> pa.Table:
        langs = _langs(batch, self.lang)
        bad: list[str | None] = [None] * batch.num_rows
        by_lang: dict[str, list[int]] = {}
        for i, lang in enumerate(langs):
            by_lang.setdefault(lang or self.lang, []).append(i)
        texts = {col: batch.column(col).to_pylist() for col in self.columns}
        for lang, rows in by_lang.items():
            if self.method == "auto":
                self._decide_items(lang, rows, texts, bad)
            else:
                self._decide_texts(lang, rows, texts, bad)
        out = put_column(batch, "language_detail", pa.array(bad, pa.string()))
        return self.drop(out, [ItemLanguageDrops.WRONG_LANGUAGE if b else None for b in bad])

    def _decide_items(self, lang: str, rows: list[int], texts: dict[str, list[Any]], bad: list[str | None]) -> None:
        from transforms.text import itemlang

        if self._model is None:
            self.setup()
        from transforms.text.languages import resolve_language, writes_without_spaces

        language = resolve_language(lang)
        known = language.base in itemlang.fasttext_languages(self._model_path) if self._model_path else True
        items = [[texts[c][i] for c in self.columns] for i in rows]
        decided = itemlang.check_items(
            self._model, items, self.columns, language.base, script=language.script,
            min_script_share=self.min_script_share, max_own_probability=self.max_own_probability,
            spaceless=writes_without_spaces(lang), known_to_fasttext=known)
        for i, verdict in zip(rows, decided, strict=True):
            if verdict.reason:
                bad[i] = f"not in {lang}: {verdict.reason}"

    def _decide_texts(self, lang: str, rows: list[int], texts: dict[str, list[Any]], bad: list[str | None]) -> None:
        method = self.method if lang in tc.SCRIPT_RANGES or self.method == "fasttext" else "fasttext"
        for col in self.columns:
            ok = tc.in_language([texts[col][i] for i in rows], [lang] * len(rows), method=method,
                                min_script_share=max(self.min_script_share, 0.8))
            for i, good in zip(rows, ok, strict=True):
                if not good and bad[i] is None:
                    bad[i] = f"{col} is not in {lang} ({method})"
