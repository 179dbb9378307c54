"""The `transformers` engine's options (`HFOptions`, checked from `EngineConfig.options`) and the batch
sizes it uses when they are unset, per device (measured: docs/gpu.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class HFOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str | None = Field(None, description="'cpu', 'cuda', 'cuda:1'...; unset: cuda when available.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: float32 on CPU (bf16 matmuls are slow there), bfloat16 on GPU.")
    batch_size: int | None = Field(None, ge=1, description="Max sequences per forward pass; unset: "
                                   "16 on CPU, 256 on a GPU.")
    max_batch_tokens: int | None = Field(None, ge=1, description="Max padded suffix tokens per forward "
                                         "pass; unset: 8,192 on CPU, 131,072 on a GPU.")
    gen_batch_size: int | None = Field(None, ge=1, description="Conversations per generate() call; "
                                       "unset: 8 on CPU, 64 on a GPU.")
    prefix_cache: bool = Field(True, description="Reuse the KV cache of the prompts' common prefix.")
    min_prefix_tokens: int = Field(8, ge=1, description="Shorter common prefixes are not worth caching.")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads (CPU).")
    chat_template: Literal["auto", "plain"] = Field(
        "auto", description="auto: the tokenizer's chat template when it has one, else plain text "
        "(message contents separated by blank lines, for base models).")
    gguf_file: str | None = Field(None, description="Load this GGUF file inside `model` (a folder).")


# (batch_size, max_batch_tokens, gen_batch_size) when the options leave them unset.
CPU_SIZES = (16, 8192, 8)
GPU_SIZES = (256, 131072, 64)


def device_sizes(device: str) -> tuple[int, int, int]:
    """Default batch sizes for a torch device string ('cpu', 'cuda', 'cuda:1', 'mps'...)."""
    return CPU_SIZES if device == "cpu" else GPU_SIZES
