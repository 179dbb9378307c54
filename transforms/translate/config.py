"""Translation engine configs; the `backend` tag picks the class (registered in base.TRANSLATORS)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from transforms.llm.base import EngineConfig, GenerationParams
from transforms.translate.segment import Segmenter


def _translation_params() -> GenerationParams:
    return GenerationParams(max_tokens=192, temperature=0.0, seed=0)


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_size: int = Field(16, ge=1, description="Segments per backend call; segments are sorted by length "
                            "first, so a batch holds sentences of similar length (less padding).")
    segmenter: Segmenter = Field(default_factory=Segmenter, description="Sentence splitting before translation.")
    cache_dir: str | None = Field(None, description="Folder of the per-segment cache (Parquet chunks); "
                                  "unset: an in-memory cache for the engine's lifetime only.")
    on_error: Literal["drop", "raise"] = Field(
        "drop", description="A backend call that raises: drop: its texts fail (rows dropped with "
        "`translation_failed`, the error logged and counted); raise: the stage fails.")


class CT2Config(_Common):
    """A CTranslate2 checkpoint converted from MADLAD-400 (T5) or NLLB-200 (M2M100)."""

    backend: Literal["ctranslate2"] = "ctranslate2"
    model: str = Field(..., description="Folder made by `ct2-transformers-converter` (model.bin + vocabulary).")
    family: Literal["madlad", "nllb"] = Field(
        "madlad", description="madlad: `<2xx>` tag prepended to the source text before tokenisation; "
        "nllb: source language token first, target language code as the target prefix.")
    model_id: str | None = Field(None, description="Name recorded in `_model` and the cache key "
                                 "(default: the model folder's name).")
    tokenizer: Literal["auto", "sentencepiece", "hf"] = Field(
        "auto", description="auto: a SentencePiece file in the model folder (spiece.model, "
        "sentencepiece.model, sentencepiece.bpe.model) if there is one, else the HF tokenizer there.")
    tokenizer_path: str | None = Field(None, description="SentencePiece file or HF tokenizer folder "
                                       "(default: the model folder; copy it there with --copy_files).")
    device: str = Field("cpu", description="cpu, cuda or auto.")
    device_index: int | list[int] = Field(0, description="GPU id(s); one model replica per id.")
    compute_type: str = Field("default", description="int8 on CPU, int8_float16 / bfloat16 on GPU; default: "
                              "the type the model was converted with.")
    inter_threads: int = Field(1, ge=1, description="Batches translated in parallel (CPU workers / GPU replicas).")
    intra_threads: int = Field(0, ge=0, description="Threads per batch on CPU (0: CTranslate2's default).")
    beam_size: int = Field(4, ge=1, description="Beam width (1: greedy).")
    max_input_tokens: int = Field(256, ge=2, description="Length guard: longer sources are cut to this many "
                                  "tokens (end token kept) and counted in the stats as truncated.")
    max_decoding_length: int = Field(256, ge=1, description="Most target tokens per segment.")
    repetition_penalty: float = Field(1.0, gt=0, description="CTranslate2 repetition penalty.")
    no_repeat_ngram_size: int = Field(0, ge=0, description="Forbid repeating n-grams of this size (0: off).")

    def identity(self) -> str:
        name = self.model_id or Path(self.model).name
        return f"{name}|{self.family}|beam{self.beam_size}|rep{self.repetition_penalty}|nr{self.no_repeat_ngram_size}"

    def decoding_params(self) -> dict[str, Any]:
        return {"beam_size": self.beam_size, "max_decoding_length": self.max_decoding_length,
                "max_input_tokens": self.max_input_tokens, "repetition_penalty": self.repetition_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size}


class _LLMCommon(_Common):
    engine_retries: int = Field(2, ge=0, description="Retries of a failing engine call (the LLM base's, "
                                "transforms/llm/asking.py) before the chunk counts as failed.")
    retry_backoff_s: float = Field(2.0, ge=0, description="First wait between engine retries; doubles.")


class LLMTranslateConfig(_LLMCommon):
    """Any LLMEngine (transformers, llama.cpp, vLLM, openai) with the translation prompt."""

    backend: Literal["llm"] = "llm"
    engine: EngineConfig = Field(default_factory=EngineConfig, description="The LLM engine (transforms/llm/base.py).")
    prompt: str = Field("translate/en", description="Prompt id under prompts/ (variables: source, target, text).")
    generation: GenerationParams = Field(default_factory=_translation_params, description="Sampling parameters.")

    def engine_config(self) -> EngineConfig:
        return self.engine


class OpenAITranslateConfig(_LLMCommon):
    """An OpenAI-compatible endpoint, through the `openai` LLM engine; the key only from the environment."""

    backend: Literal["openai"] = "openai"
    model: str = Field(..., description="Served model name.")
    base_url: str = Field("http://127.0.0.1:8000/v1", description="Endpoint root, including /v1.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the key (never the key).")
    require_api_key: bool = Field(False, description="Fail at setup when the variable is unset.")
    options: dict[str, Any] = Field(default_factory=dict, description="Other openai engine options "
                                    "(max_concurrency, timeout, max_retries, extra_body...).")
    prompt: str = Field("translate/en", description="Prompt id under prompts/.")
    generation: GenerationParams = Field(default_factory=_translation_params, description="Sampling parameters.")

    def engine_config(self) -> EngineConfig:
        return EngineConfig(backend="openai", model=self.model, options={
            **self.options, "base_url": self.base_url, "api_key_env": self.api_key_env,
            "require_api_key": self.require_api_key})


TranslatorConfig = Annotated[CT2Config | LLMTranslateConfig | OpenAITranslateConfig, Field(discriminator="backend")]
