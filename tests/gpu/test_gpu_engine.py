"""The transformers engine on a GPU against the CPU result as the oracle (`-m gpu`; run by
scripts/gpu_check.sh, which also runs it on the CPU with --cpu to prove the script).

A Qwen3-shaped model with random weights (transforms/llm/synthetic.py, seeded) and the packaged
Qwen2.5 tokenizer score the Ko-PIQA classify prompt over bundled crawl rows: on the device in float32
the engine's prefix-cache and batching path must give the CPU's numbers; in bfloat16 (the GPU
default) the same choice wherever the CPU's margin is clear of bf16 rounding; on the device the prefix
buffers reused across batches give what the per-batch copy of the prefix cache gave."""

from __future__ import annotations

import copy
import json

import pytest
from gpuutil import gpu_device

from transforms.llm.base import EngineConfig
from transforms.llm.hf import TransformersEngine
from transforms.llm.prepare import ROOT
from transforms.llm.prompts import load_prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

ROWS = 96


@pytest.fixture(scope="module")
def oracle():
    from transforms.llm.synthetic import qwen_tokenizer, random_model

    tokenizer = qwen_tokenizer()
    model = random_model("tiny", "cpu", "float32", seed=0)
    cpu = TransformersEngine(EngineConfig(options={"min_prefix_tokens": 4}))
    cpu.use_model(model, tokenizer)
    prompt = load_prompt("classify_piqa/ko")
    with (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(ROWS), fh, strict=False)]
    prompts = [cpu.render_chat(prompt.render(text=t).messages) for t in texts]
    options = [*prompt.options, "잘 모르겠습니다"]  # a multi-token option too
    requests = [(t[: len(t) // 2], t[len(t) // 2:]) for t in texts[:24] if len(t) > 4]
    return {"model": model, "tokenizer": tokenizer, "prompts": prompts, "options": options,
            "scores": cpu.option_logprobs(prompts, options), "requests": requests,
            "ll": cpu.loglikelihood(requests)}


def on_device(oracle, dtype) -> TransformersEngine:
    device = gpu_device()
    engine = TransformersEngine(EngineConfig(options={"min_prefix_tokens": 4}))
    engine.use_model(copy.deepcopy(oracle["model"]).to(device=device, dtype=dtype), oracle["tokenizer"])
    return engine


@pytest.fixture
def full_float32():
    """float32 means float32 here: no TF32 matmuls, whatever a library set globally."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def test_float32_on_device_equals_cpu(oracle, full_float32):
    engine = on_device(oracle, torch.float32)
    if engine.device.startswith("cuda"):
        assert (engine.batch_size, engine.max_batch_tokens) == (256, 131072)  # GPU-sized defaults
    got = engine.option_logprobs(oracle["prompts"], oracle["options"])
    for a, b in zip(got, oracle["scores"], strict=True):
        assert a == pytest.approx(b, abs=2e-3)
    for (ll, n), (ll_cpu, n_cpu) in zip(engine.loglikelihood(oracle["requests"]), oracle["ll"], strict=True):
        assert n == n_cpu and ll == pytest.approx(ll_cpu, abs=5e-3)


def test_bfloat16_on_device_keeps_the_cpu_choice(oracle):
    engine = on_device(oracle, torch.bfloat16)
    got = engine.option_logprobs(oracle["prompts"], oracle["options"])
    worst = max(abs(a - b) for ra, rb in zip(got, oracle["scores"], strict=True) for a, b in zip(ra, rb, strict=True))
    assert worst < 0.5, worst
    clear = 0
    for a, b in zip(got, oracle["scores"], strict=True):
        ranked = sorted(b, reverse=True)
        if ranked[0] - ranked[1] > 2 * worst:  # the CPU's choice is clear of bf16 rounding
            clear += 1
            assert a.index(max(a)) == b.index(max(b))
    print(f"bf16: max |Δ logprob| {worst:.4f}; {clear}/{len(got)} rows with a clear margin agree")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_reused_prefix_buffers_equal_the_copy_path_on_device(oracle, full_float32, dtype):
    """The shared prefix's buffers reused across batches (transforms/llm/hf_prefix.py) against the per-batch copy
    it replaced: both feed attention the same keys and values, so only kernel choice can tell them apart."""
    engine = on_device(oracle, getattr(torch, dtype))
    reused = engine.option_logprobs(oracle["prompts"], oracle["options"])
    engine.reuse_prefix_buffers = False
    copied = engine.option_logprobs(oracle["prompts"], oracle["options"])
    worst = max(abs(a - b) for ra, rb in zip(reused, copied, strict=True) for a, b in zip(ra, rb, strict=True))
    print(f"{dtype}: reuse vs copy path, max |Δ logprob| {worst:.3g}")
    assert worst < 2e-3
    for a, b in zip(reused, copied, strict=True):
        ranked = sorted(b, reverse=True)
        if ranked[0] - ranked[1] > 2 * worst:  # a choice clear of the difference must not move
            assert a.index(max(a)) == b.index(max(b))
