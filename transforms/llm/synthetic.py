"""Models of published architectures with random weights, for GPU benchmarks and checks.

Throughput depends on the shapes, not on the weights, so `benchmarks/bench_llm_gpu.py` and the
`gpu` tests build a Qwen3-shaped model in memory (no download: its config is written out below from
the published config.json) and pair it with the real Qwen2.5 tokenizer and chat template, which
Qwen3 shares. The tokenizer comes from the packaged Qwen2.5-Coder-1.5B GGUF (transforms/llm/prepare.py)
and is saved once as `<model cache>/qwen2.5-tokenizer/` (~11 MiB), small enough to carry to a bare
GPU machine (scripts/gpu_check.sh).

Only torch and transformers are imported, inside the functions, so this runs where pydantic and
pyarrow are missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transforms.core.deps import require
from transforms.llm.prepare import cache_dir, gguf_path

TOKENIZER = "qwen2.5-tokenizer"

# From the published Qwen3 config.json files (Qwen/Qwen3-4B, -14B, -32B); "tiny" keeps the vocabulary
# (so the real tokenizer fits) and shrinks everything else, for CPU runs of the same code.
QWEN3: dict[str, dict[str, Any]] = {
    "4b": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
           "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": True},
    "14b": {"hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 40,
            "num_attention_heads": 40, "num_key_value_heads": 8, "tie_word_embeddings": False},
    "32b": {"hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
            "num_attention_heads": 64, "num_key_value_heads": 8, "tie_word_embeddings": False},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True},
}
QWEN3_COMMON = {"vocab_size": 151936, "head_dim": 128, "max_position_embeddings": 40960,
                "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu"}


def qwen3_config(size: str) -> Any:
    transformers = require("transformers", "llm", "building a Qwen3-shaped model")
    kw = {**QWEN3_COMMON, **QWEN3[size]}
    if size == "tiny":
        kw["head_dim"] = 16
    return transformers.Qwen3Config(**kw)


def matmul_params(size: str) -> int:
    """Weights a token multiplies through (all but the input embedding), for FLOP estimates."""
    c = {**QWEN3_COMMON, **QWEN3[size]}
    if size == "tiny":
        c["head_dim"] = 16
    h, d = c["hidden_size"], c["head_dim"]
    attn = h * d * (c["num_attention_heads"] * 2 + c["num_key_value_heads"] * 2)
    mlp = 3 * h * c["intermediate_size"]
    return int(c["num_hidden_layers"] * (attn + mlp) + h * c["vocab_size"])


def random_model(size: str, device: str = "cpu", dtype: str = "auto", seed: int = 0) -> Any:
    """A Qwen3-`size` causal LM with random weights (seeded) on `device`."""
    torch = require("torch", "llm")
    transformers = require("transformers", "llm", "building a Qwen3-shaped model")
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    torch.manual_seed(seed)
    # Initialised in float32 on the device, then cast: no dtype argument, whose name changed between
    # transformers releases (torch_dtype → dtype), so this runs on whatever version a GPU box has.
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(qwen3_config(size))
    return model.to(getattr(torch, dtype)).eval()


def tokenizer_dir() -> Path:
    return cache_dir() / TOKENIZER


def qwen_tokenizer() -> Any:
    """The Qwen2.5 tokenizer and chat template, saved from the packaged GGUF on first use."""
    transformers = require("transformers", "llm", "the Qwen2.5 tokenizer")
    folder = tokenizer_dir()
    if not (folder / "tokenizer_config.json").exists():
        require("gguf", "llm", "reading the tokenizer from the packaged Qwen2.5 GGUF")
        gguf = gguf_path("qwen2.5-coder-1.5b-instruct")
        tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tmp = folder.with_name(folder.name + ".tmp")
        tok.save_pretrained(tmp)
        tmp.rename(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)
