"""TranslateStage: row-wise translation of configured columns into `<col>_<tgt>` columns.

The target language is fixed (`target_lang: hi`) or read per row (`target_lang_column: language`,
e.g. each locale's language in PIndicQA). All columns of all rows with the same target go to the
engine in one call, so identical sentences across columns and rows are translated once. A row
keeps its place either way: when any of its columns fails (`translation_failed`), comes back
empty (`translation_empty`), is empty in the source (`source_empty`) or has no usable target
language (`target_lang_missing`, `target_lang_unsupported`), it is dropped with that reason and
`translation_issue` says which column. Translated rows record the engine in the provenance columns
`_model`, `_prompt` (LLM backends) and `_gen_params`, and the target language in `lang_column`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field, PrivateAttr, model_validator

from transforms.core import columns as C
from transforms.core.stage import Stage, StageError, put_column
from transforms.translate.base import TranslateDrops, TranslationEngine, build_translator
from transforms.translate.config import TranslatorConfig
from transforms.translate.languages import LanguageError, check_language

ISSUE = "translation_issue"


class TranslateStage(Stage[TranslateDrops]):
    name: ClassVar[str] = "translate"
    stateful: ClassVar[bool] = True

    engine: TranslatorConfig = Field(..., description="The translation backend (ctranslate2, llm, openai).")
    columns: list[str] = Field(..., min_length=1, description="Text columns to translate.")
    source_lang: str = Field("en", description="ISO 639-1/639-3 code (optional script) of the source texts.")
    target_lang: str | None = Field(None, description="ISO 639-1/639-3 code (optional script: zh-Hant) of the one "
                                    "target language; any language langcodes knows.")
    target_lang_column: str | None = Field(None, description="Column holding each row's target language "
                                           "(instead of `target_lang`).")
    outputs: dict[str, str] = Field(default_factory=dict, description="Source column -> output column; default "
                                    "`<col>_<target_lang>`, or `<col>_mt` with a per-row target.")
    lang_column: str = Field("translated_lang", description="Column recording each row's target language.")

    _engine: TranslationEngine | None = PrivateAttr(default=None)
    _requests_dir: str | None = PrivateAttr(default=None)

    def record_requests_to(self, folder: str | None) -> None:
        """Where an HTTP backend writes its request ledgers (the runner sets runs/<id>/requests/<stage>/)."""
        self._requests_dir = folder

    @model_validator(mode="after")
    def _check(self) -> TranslateStage:
        if (self.target_lang is None) == (self.target_lang_column is None):
            raise ValueError("set exactly one of target_lang (one language) and target_lang_column (per row)")
        check_language(self.source_lang)
        if self.target_lang is not None:
            check_language(self.target_lang)
        unknown = sorted(set(self.outputs) - set(self.columns))
        if unknown:
            raise ValueError(f"outputs names column(s) {unknown} that are not in columns {self.columns}")
        return self

    def output_column(self, column: str) -> str:
        return self.outputs.get(column) or f"{column}_{self.target_lang or 'mt'}"

    def output_columns(self) -> list[str]:
        return [self.output_column(c) for c in self.columns]

    def use_engine(self, engine: TranslationEngine) -> TranslateStage:
        """Use an engine built elsewhere (shared between stages, or a test's)."""
        self._engine = engine
        return self

    def use_engine_factory(self, make: Any) -> TranslateStage:
        """The orchestrator's engine factory: `make("translator", config)` may give a whole translation
        engine; else, for an LLM backend, `make(self.name, config)` gives the LLM that the real LLM
        translation asks (so prompts, parsing and the answer cache are the real ones)."""
        translator = make("translator", self.engine)
        if translator is None and getattr(self.engine, "backend", None) in ("llm", "openai"):
            llm = make(self.name, self.engine)
            if llm is not None:
                from transforms.translate.llm import LLMTranslator

                translator = LLMTranslator(self.engine, engine=llm)  # type: ignore[arg-type]  # an LLM backend
        return self.use_engine(translator) if translator is not None else self

    @property
    def translator(self) -> TranslationEngine:
        if self._engine is None:
            self._engine = build_translator(self.engine)
        return self._engine

    def setup(self) -> None:
        self.translator.record_requests_to(self._requests_dir)
        self.translator.setup()

    def check_columns(self, schema: pa.Schema) -> None:
        needed = [*self.columns, *([self.target_lang_column] if self.target_lang_column else [])]
        missing = [c for c in needed if c not in schema.names]
        if missing:
            raise StageError(f"stage '{self.name}' needs column(s) {missing}, but the batch has {schema.names}")

    def _new_columns(self) -> list[str]:
        return [*self.output_columns(), self.lang_column, ISSUE, C.MODEL, C.PROMPT, C.GEN_PARAMS]

    def process_empty(self, batch: pa.Table) -> pa.Table:
        for name in self._new_columns():
            batch = put_column(batch, name, pa.array([], pa.string()))
        return batch

    def process(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        targets, reasons, issues = self._targets(batch)
        translated: dict[str, list[str | None]] = {c: [None] * n for c in self.columns}
        texts = {c: batch.column(c).to_pylist() for c in self.columns}
        for i in range(n):  # a row with an empty source column is dropped before any of it is translated
            empty = next((c for c in self.columns if not (texts[c][i] or "").strip()), None)
            if empty is not None and reasons[i] is None:
                reasons[i], issues[i] = TranslateDrops.SOURCE_EMPTY, f"{empty}: {TranslateDrops.SOURCE_EMPTY}"
        for tgt in sorted({t for t, r in zip(targets, reasons, strict=True) if t and r is None}):
            rows = [i for i in range(n) if targets[i] == tgt and reasons[i] is None]
            flat = [texts[c][i] for c in self.columns for i in rows]
            results = self.translator.translate_with_status(flat, self.source_lang, tgt)
            for k, c in enumerate(self.columns):
                for j, i in enumerate(rows):
                    text, why = results[k * len(rows) + j]
                    translated[c][i] = text
                    if why is not None and reasons[i] is None:
                        reasons[i], issues[i] = why, f"{c}: {why}"
        out = batch
        for c in self.columns:
            out = put_column(out, self.output_column(c), pa.array(translated[c], pa.string()))
        out = put_column(out, self.lang_column, pa.array(targets, pa.string()))
        out = put_column(out, ISSUE, pa.array(issues, pa.string()))
        prov = self.translator.provenance()
        for col, key in ((C.MODEL, "model"), (C.PROMPT, "prompt"), (C.GEN_PARAMS, "gen_params")):
            out = put_column(out, col, pa.array([prov[key]] * n, pa.string()))
        return self.drop(out, reasons)

    def _targets(self, batch: pa.Table) -> tuple[list[str | None], list[TranslateDrops | None], list[str | None]]:
        n = batch.num_rows
        if self.target_lang_column is None:
            return [self.target_lang] * n, [None] * n, [None] * n
        targets: list[str | None] = []
        reasons: list[TranslateDrops | None] = []
        issues: list[str | None] = []
        for value in batch.column(self.target_lang_column).to_pylist():
            code = str(value).strip() if value is not None else ""
            targets.append(code or None)
            if not code:
                reasons.append(TranslateDrops.TARGET_LANG_MISSING)
                issues.append(f"{self.target_lang_column}: empty")
            elif not _known(code):
                reasons.append(TranslateDrops.TARGET_LANG_UNSUPPORTED)
                issues.append(f"{self.target_lang_column}: {code!r} is not a known language code")
            else:
                reasons.append(None)
                issues.append(None)
        return targets, reasons, issues

    def quality(self, limit: int = 100, **kwargs: Any) -> dict[str, Any]:
        """chrF/BLEU of this stage's engine on the parallel corpora for its language pair(s) (for the
        run's manifest: `manifest.extras["translation_quality"] = stage.quality(...)`)."""
        from transforms.translate.quality import engine_quality

        targets = [self.target_lang] if self.target_lang else kwargs.pop("targets", [])
        return engine_quality(self.translator, [f"{self.source_lang}-{t}" for t in targets], limit=limit, **kwargs)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


def _known(code: str) -> bool:
    try:
        check_language(code)
    except LanguageError:
        return False
    return True
