"""`llm` and `openai` backends: translation by any LLMEngine with the versioned prompt `translate/en`.

`llm` takes a full EngineConfig (transformers, llama.cpp, vLLM...); `openai` builds the `openai`
engine for an OpenAI-compatible endpoint (the API key is read from the environment variable the
config names, by the engine, at call time). One chat per sentence; the reply is cleaned of the
things small models add around a translation (fence tags, a "Translation:" label, quotes, a
second line of notes).

The engine is asked through the LLM base (transforms/llm/asking.py `Asker`): retries with backoff
(`engine_retries`, `retry_backoff_s`), equal sentences asked once, the question recorded. What was
translated persists in the segment cache (transforms/translate/cache.py), keyed by the segment and
this model's identity, so a resumed run asks only the segments not translated yet.
"""

from __future__ import annotations

import json
import re

from transforms.llm.asking import Asker
from transforms.llm.base import LLMEngine, build_engine
from transforms.llm.prompts import load_prompt
from transforms.translate.base import TranslationEngine
from transforms.translate.config import LLMTranslateConfig, OpenAITranslateConfig
from transforms.translate.languages import language_name

_LABEL = re.compile(r"^\s*(?:translation|translated text|output|answer)\s*(?:\([^)]*\))?\s*[:：]\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’「」『』`"


def clean_reply(reply: str, fence: str, target_name: str) -> str:
    text = re.sub(rf"<\s*/?\s*{re.escape(fence)}\s*>", "\n", reply or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("```")]
    if not lines:
        return ""
    first = _LABEL.sub("", lines[0])
    first = re.sub(rf"^\s*{re.escape(target_name)}\s*[:：]\s*", "", first, flags=re.IGNORECASE)
    if not first and len(lines) > 1:  # "Translation:" alone on its line
        first = lines[1]
    first = first.strip()
    if len(first) >= 2 and first[0] in _QUOTES and first[-1] in _QUOTES:
        first = first[1:-1].strip()
    return first


class LLMTranslator(TranslationEngine):
    config: LLMTranslateConfig | OpenAITranslateConfig

    def __init__(self, config: LLMTranslateConfig | OpenAITranslateConfig, *, engine: LLMEngine | None = None):
        """`engine`: an engine built elsewhere (shared with another stage, or an injected HTTP client)."""
        super().__init__(config)
        self.prompt = load_prompt(config.prompt)
        self.engine = engine
        self.asker: Asker | None = None
        self._requests_dir: str | None = None

    @property
    def model_identity(self) -> str:
        eng = self.config.engine_config()
        params = self.config.generation.model_dump(exclude_defaults=False)
        return f"{eng.backend}:{eng.model}|{self.prompt.ref}|{json.dumps(params, sort_keys=True)}"

    def provenance(self) -> dict[str, str | None]:
        eng = self.config.engine_config()
        return {"model": f"{eng.backend}:{eng.model}", "prompt": self.prompt.ref,
                "gen_params": json.dumps(self.config.generation.model_dump(), sort_keys=True)}

    def load(self) -> None:
        if self.engine is None:
            self.engine = build_engine(self.config.engine_config())
        self.engine.setup()
        self.asker = Asker.for_engine(self.engine, label="translate", chunk_size=self.config.batch_size,
                                      engine_retries=self.config.engine_retries,
                                      retry_backoff_s=self.config.retry_backoff_s,
                                      # each answer persisted as it arrives (the segment cache is written per
                                      # call): a kill loses only the questions in flight
                                      cache_dir=f"{self.config.cache_dir.rstrip('/')}/answers"
                                      if self.config.cache_dir else None)
        self.asker.record_requests_to(self._requests_dir)

    def translate_segments(self, segments: list[str], src: str, tgt: str) -> list[str | None]:
        if self.asker is None:
            self.load()
        assert self.asker is not None
        source, target = language_name(src), language_name(tgt)
        conversations = [self.prompt.render(source=source, target=target, text=s).messages for s in segments]
        replies = self.asker.ask_chat_or_none(conversations, self.config.generation, ref=self.prompt.ref)
        # None: the endpoint did not answer that sentence (retries spent); its text fails, the rest goes on
        return [None if r is None else clean_reply(r, self.prompt.fence, target) for r in replies]

    def record_requests_to(self, folder: str | None) -> None:
        self._requests_dir = folder
        if self.asker is not None:
            self.asker.record_requests_to(folder)

    def close(self) -> None:
        super().close()
        if self.engine is not None:
            self.engine.close()
