"""vLLM on CPU (vllm-cpu, in .venv-vllm) with the packaged Gemma 3 270M, checked against the
transformers engine as the oracle. Run with `scripts/test.sh --vllm` (or scripts/test_vllm.sh)."""

from __future__ import annotations

import json
import os

import pytest

from transforms.llm.base import EngineConfig, GenerationParams, build_engine
from transforms.llm.prepare import ROOT
from transforms.llm.prompts import load_prompt

pytestmark = pytest.mark.vllm

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
N_ROWS = 8


@pytest.fixture(scope="module")
def engines():
    pytest.importorskip("vllm")
    vllm_engine = build_engine(EngineConfig(backend="vllm", model="gemma3-270m",
                                            options={"dtype": "float32", "max_model_len": 1024,
                                                     # no torch.compile: minutes of inductor builds on CPU
                                                     "enforce_eager": True}))
    vllm_engine.setup()
    hf_engine = build_engine(EngineConfig(backend="transformers", model="gemma3-270m", options={"threads": 1}))
    hf_engine.setup()
    yield vllm_engine, hf_engine
    vllm_engine.close()
    hf_engine.close()


@pytest.fixture(scope="module")
def ko_prompts(engines):
    vllm_engine, _ = engines
    with (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(N_ROWS), fh, strict=False)]
    prompt = load_prompt("classify_piqa/ko")
    return [vllm_engine.render_chat(prompt.render(text=t).messages) for t in texts], prompt.options


def test_option_scores_and_ranking_match_transformers(engines, ko_prompts):
    vllm_engine, hf_engine = engines
    prompts, options = ko_prompts
    assert vllm_engine.render_chat([{"role": "user", "content": "x"}]) == hf_engine.render_chat(
        [{"role": "user", "content": "x"}])
    got = vllm_engine.option_logprobs(prompts, options)
    ref = hf_engine.option_logprobs(prompts, options)
    diff = max(abs(a - b) for g, r in zip(got, ref, strict=True) for a, b in zip(g, r, strict=True))
    same = sum((g[0] > g[1]) == (r[0] > r[1]) for g, r in zip(got, ref, strict=True))
    print(f"\nvllm vs transformers on {len(prompts)} Korean rows: max |diff| {diff:.4f}, "
          f"same preferred option on {same}/{len(prompts)}")
    for g, r in zip(got, ref, strict=True):
        assert g == pytest.approx(r, abs=0.05)
        if abs(r[0] - r[1]) > 0.1:  # a clear preference must be the same preference
            assert (g[0] > g[1]) == (r[0] > r[1])


def test_loglikelihood_matches_transformers(engines):
    vllm_engine, hf_engine = engines
    requests = [("질문: 물을 빨리 끓이려면?\n답:", " 냄비 뚜껑을 덮는다."), ("The capital of France is", " Paris"),
                ("The capital of France is", " banana")]
    got = vllm_engine.loglikelihood(requests)
    ref = hf_engine.loglikelihood(requests)
    print("\nloglikelihood vllm", [round(g, 4) for g, _ in got], "transformers", [round(r, 4) for r, _ in ref])
    for (g, gn), (r, rn) in zip(got, ref, strict=True):
        assert gn == rn and g == pytest.approx(r, abs=0.05)
    assert got[1][0] > got[2][0]


def test_constrained_choice_and_chat(engines, ko_prompts):
    vllm_engine, _ = engines
    prompts, options = ko_prompts
    picks = vllm_engine.choose(prompts[:4], options)
    assert len(picks) == 4 and set(picks) <= set(options)
    replies = vllm_engine.chat([[{"role": "user", "content": "The capital of France is"}]],
                               GenerationParams(max_tokens=6))
    assert isinstance(replies[0], str) and replies[0].strip()
