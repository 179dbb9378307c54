"""The `llm` translation backend with real local models on real en→ja sentences (Tanaka corpus).

Default tier: Gemma 3 270M through llama.cpp. It is a base model and mostly echoes the English, so
this proves the path (prompt rendering, one chat per sentence, reply cleaning, the cache: a second
call asks the engine nothing), not quality. Slow tier: Qwen2.5-Coder-1.5B-Instruct, which does
write Japanese; the stage runs on it end to end. chrF figures: docs/translation.md.
"""

from __future__ import annotations

import importlib.util
import re

import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.llm.base import EngineConfig, build_engine
from transforms.llm.prepare import SPLIT_GGUF_MODELS
from transforms.translate.config import LLMTranslateConfig
from transforms.translate.llm import LLMTranslator
from transforms.translate.quality import data_root, load_pair
from transforms.translate.stage import TranslateStage

pytest.importorskip("xllamacpp")
QWEN = "qwen2.5-coder-1.5b-instruct"
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


class ChatCounter:
    """Wraps a real engine and counts the conversations it is asked to answer."""

    def __init__(self, engine):
        self.engine = engine
        self.conversations: list[list[dict]] = []

    def setup(self):
        self.engine.setup()

    def chat(self, conversations, params):
        self.conversations += list(conversations)
        return self.engine.chat(conversations, params)

    def close(self):
        self.engine.close()


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    if not (data_root() / "parallel_en_ja_small").exists():
        pytest.skip("parallel_en_ja_small not found")
    src, _ = load_pair("en-ja", limit=3, seed=7)
    return src


def _translator(model: str, max_tokens: int, **options) -> tuple[LLMTranslator, ChatCounter]:
    cfg = LLMTranslateConfig(engine=EngineConfig(backend="llamacpp", model=model,
                                                 options={"threads": 2, "ctx_size": 512, **options}),
                             generation={"max_tokens": max_tokens})
    counter = ChatCounter(build_engine(cfg.engine))
    return LLMTranslator(cfg, engine=counter), counter  # type: ignore[arg-type]


def test_llm_backend_path_and_cache_with_gemma(sentences):
    engine, counter = _translator("gemma3-270m", 24)
    try:
        results = engine.translate_with_status(sentences[:2], "en", "ja")
        assert len(counter.conversations) == 2
        for conv, sentence in zip(counter.conversations, sentences[:2], strict=False):
            assert "from English into Japanese" in conv[0]["content"]
            assert conv[-1]["content"] == f"<text>\n{sentence}\n</text>"
        for text, why in results:
            assert (text and why is None and "<text>" not in text and "\n" not in text) or \
                (text is None and why == "translation_empty")
        again = engine.translate_with_status(sentences[:2], "en", "ja")
        assert len(counter.conversations) == 2 + sum(why is not None for _, why in results)  # only empties re-asked
        assert [t for t, _ in again] == [t for t, _ in results]
        assert engine.provenance()["prompt"] == "translate/en@1"
    finally:
        engine.close()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec(SPLIT_GGUF_MODELS[QWEN].module_prefix + "1") is None,
                    reason="the Qwen 1.5B model packages are not installed")
def test_stage_translates_into_japanese_with_qwen(sentences):
    engine, counter = _translator(QWEN, 48, parallel=3)
    stage = TranslateStage(engine=engine.config, columns=["goal"], target_lang="ja").use_engine(engine)
    try:
        out = stage(pa.table({C.ID: ["a", "b", "c"], "goal": sentences}))
        assert out.column(C.DROP_REASON).null_count == 3, out.column("translation_issue").to_pylist()
        translations = out.column("goal_ja").to_pylist()
        assert all(JAPANESE.search(t) and not re.search(r"[A-Za-z]{4,}", t) for t in translations), translations
        assert out.column(C.MODEL).to_pylist() == [f"llamacpp:{QWEN}"] * 3
        assert len(counter.conversations) == 3
        stage(pa.table({C.ID: ["d"], "goal": [sentences[1]]}))
        assert len(counter.conversations) == 3  # cached
    finally:
        engine.close()
