"""The one translation interface: `setup()`, `translate(texts, src, tgt)`, `close()`.

Every backend only implements `translate_segments` (a batch of sentences, one language pair, to
their translations). The base owns what they share, in the order NeMo Curator's translation stage
uses: segment each text into sentences → look every sentence up in the cache → send the misses,
deduplicated and sorted by length, to the backend in batches → cache the new translations →
reassemble each text from its sentences. The backend class is registered as a "module:Class"
string under its config's `backend` tag, so nothing heavy is imported until an engine is built.
"""

from __future__ import annotations

import importlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter

from transforms.core.drop_reasons import DropReason
from transforms.llm.base import EndpointError
from transforms.translate.cache import SegmentCache, segment_key
from transforms.translate.config import TranslatorConfig
from transforms.translate.languages import LanguageError, check_language

log = logging.getLogger("piqaforge.translate")

TRANSLATORS: dict[str, str] = {
    "ctranslate2": "transforms.translate.ct2:CTranslate2Translator",
    "llm": "transforms.translate.llm:LLMTranslator",
    "openai": "transforms.translate.llm:LLMTranslator",
}

class TranslateDrops(DropReason):
    """Why a row has no translation: the translate stage's reasons (the engine gives the last three per text)."""

    TARGET_LANG_MISSING = "target_lang_missing", "the row names no target language"
    TARGET_LANG_UNSUPPORTED = "target_lang_unsupported", "the engine cannot translate into the target language"
    SOURCE_EMPTY = "source_empty", "nothing to translate"
    TRANSLATION_EMPTY = "translation_empty", "the engine returned an empty translation"
    TRANSLATION_FAILED = "translation_failed", "the engine failed on the row (after the retries)"


SOURCE_EMPTY = TranslateDrops.SOURCE_EMPTY
TRANSLATION_FAILED = TranslateDrops.TRANSLATION_FAILED
TRANSLATION_EMPTY = TranslateDrops.TRANSLATION_EMPTY


class TranslateStats(BaseModel):
    """Counters since the engine was built (a stage's actor reports them in its log)."""

    texts: int = 0
    segments: int = Field(0, description="Segments seen, duplicates included.")
    cache_hits: int = 0
    translated: int = Field(0, description="Distinct segments sent to the backend.")
    backend_calls: int = 0
    truncated: int = Field(0, description="Segments cut by the backend's input length guard.")
    failed_segments: int = 0
    empty_segments: int = 0
    seconds: float = 0.0


class TranslationEngine(ABC):
    def __init__(self, config: Any):
        self.config = config
        self.cache = SegmentCache(config.cache_dir)
        self.stats = TranslateStats()
        self._ready = False

    # -- to implement ----------------------------------------------------------------------------
    @property
    @abstractmethod
    def model_identity(self) -> str:
        """The model plus everything that changes its output (prompt version, decoding settings)."""

    @abstractmethod
    def load(self) -> None:
        """Load weights / open connections (heavy imports go here)."""

    @abstractmethod
    def translate_segments(self, segments: list[str], src: str, tgt: str) -> Sequence[str | None]:
        """One backend call: translations of `segments` (sentences), aligned with them; None for a
        segment the backend could not translate (an endpoint's question whose retries ran out)."""

    def record_requests_to(self, folder: str | None) -> None:
        """HTTP backends write their request ledgers there (transforms/core/accounting.py)."""

    def length(self, segment: str) -> int:
        """The size batches are sorted by (backends that tokenise count tokens)."""
        return len(segment)

    def provenance(self) -> dict[str, str | None]:
        """Values of the provenance columns `_model`, `_prompt`, `_gen_params` for translated rows."""
        return {"model": f"{self.config.backend}:{self.model_identity}", "prompt": None, "gen_params": None}

    # -- the interface ---------------------------------------------------------------------------
    def setup(self) -> None:
        if self._ready:
            return
        known = self.cache.load()
        if known:
            log.info("translation cache %s: %d segments", self.cache.folder, known)
        self.load()
        self._ready = True

    def close(self) -> None:
        self.cache.flush()

    def translate(self, texts: Sequence[str | None], src: str, tgt: str) -> list[str]:
        """Translations aligned with `texts`; "" where a text is empty or its translation failed."""
        return [t or "" for t, _ in self.translate_with_status(texts, src, tgt)]

    def translate_with_status(self, texts: Sequence[str | None], src: str,
                              tgt: str) -> list[tuple[str | None, TranslateDrops | None]]:
        """(translation, None) or (None, reason) per text; reasons: source_empty, translation_failed,
        translation_empty (a text fails as a whole when any of its sentences does)."""
        check_language(src)
        check_language(tgt)
        self.setup()
        started = time.perf_counter()
        seg = self.config.segmenter
        split = [seg.split(t) if t else ([], []) for t in texts]
        backend, identity = self.config.backend, self.model_identity
        keys = [[segment_key(backend, identity, src, tgt, s) for s in segs] for segs, _ in split]
        results: dict[str, str | None] = {}
        todo: dict[str, str] = {}
        for (segs, _), row_keys in zip(split, keys, strict=True):
            for s, k in zip(segs, row_keys, strict=True):
                self.stats.segments += 1
                hit = self.cache.get(k)
                if hit is not None:
                    self.stats.cache_hits += 1
                    results[k] = hit
                elif k not in results:
                    todo[k] = s
                    results[k] = None
        failed = self._run_backend(todo, results, src, tgt)
        self.cache.flush()
        out: list[tuple[str | None, TranslateDrops | None]] = []
        for (segs, seps), row_keys in zip(split, keys, strict=True):
            if not segs:
                out.append((None, SOURCE_EMPTY))
            elif any(k in failed for k in row_keys):
                out.append((None, TRANSLATION_FAILED))
            elif any(not results[k] for k in row_keys):
                out.append((None, TRANSLATION_EMPTY))
            else:
                out.append((seg.join([results[k] or "" for k in row_keys], seps, tgt), None))
        self.stats.texts += len(texts)
        self.stats.seconds += time.perf_counter() - started
        return out

    def _run_backend(self, todo: dict[str, str], results: dict[str, str | None], src: str, tgt: str) -> set[str]:
        failed: set[str] = set()
        order = sorted(todo, key=lambda k: self.length(todo[k]))
        step = self.config.batch_size
        for start in range(0, len(order), step):
            batch = order[start:start + step]
            self.stats.backend_calls += 1
            try:
                outputs = self.translate_segments([todo[k] for k in batch], src, tgt)
            except (LanguageError, EndpointError):  # the model lacks the language, or the endpoint refuses or
                raise                               # is down: no row can be translated, stop with one line
            except Exception as err:
                if self.config.on_error == "raise":
                    raise
                log.warning("translation backend %s failed on %d segments (%s→%s): %s: %s", self.config.backend,
                            len(batch), src, tgt, type(err).__name__, err)
                failed.update(batch)
                self.stats.failed_segments += len(batch)
                continue
            if len(outputs) != len(batch):
                raise RuntimeError(f"backend {self.config.backend} returned {len(outputs)} translations for "
                                   f"{len(batch)} segments")
            self.stats.translated += len(batch)
            for k, text in zip(batch, outputs, strict=True):
                if text is None:  # the endpoint did not answer this one (its retries spent): only it fails
                    failed.add(k)
                    self.stats.failed_segments += 1
                    continue
                text = text.strip()
                results[k] = text
                if text:
                    self.cache.put(k, text)  # empty replies are not cached: a re-run asks again
                else:
                    self.stats.empty_segments += 1
        return failed


def parse_translator_config(data: Any) -> Any:
    """A config object from a dict (the `backend` tag picks the model class)."""
    return TypeAdapter(TranslatorConfig).validate_python(data)


def build_translator(config: Any) -> TranslationEngine:
    if isinstance(config, dict):
        config = parse_translator_config(config)
    module_name, cls_name = TRANSLATORS[config.backend].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    engine: TranslationEngine = cls(config)
    return engine
