"""The transformers engine's batch sizes follow the device, and its batching (sorted, packed, one
host copy per batch) gives the same log-probabilities however the rows are cut into batches."""

from __future__ import annotations

import json

import pytest

from transforms.llm.base import EngineConfig
from transforms.llm.hf import CPU_SIZES, GPU_SIZES, TransformersEngine, device_sizes
from transforms.llm.prepare import ROOT
from transforms.llm.prompts import load_prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_sizes_follow_the_device():
    assert device_sizes("cpu") == CPU_SIZES == (16, 8192, 8)
    assert device_sizes("cuda") == device_sizes("cuda:1") == GPU_SIZES == (256, 131072, 64)


def test_batches_are_sorted_and_packed_under_both_limits():
    eng = TransformersEngine(EngineConfig(options={"batch_size": 4, "max_batch_tokens": 40}))
    eng.batch_size, eng.max_batch_tokens = 4, 40
    lengths = [3, 12, 5, 9, 1, 7, 2, 11, 4, 6]
    items = [([0] * n, [(n - 1, [1])]) for n in lengths]
    batches = eng._batches(items, prefix_len=0)
    assert sorted(i for b in batches for i in b) == list(range(len(items)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)  # longest first: each batch pads to similar lengths
    for b in batches:
        assert len(b) <= 4 and lengths[b[0]] * len(b) <= 40
    assert [len(b) for b in batches] == [3, 4, 3]  # 12,11,9 | 7,6,5,4 | 3,2,1


@pytest.fixture(scope="module")
def gemma():
    eng = TransformersEngine(EngineConfig(model="gemma3-270m", options={"threads": 1, "min_prefix_tokens": 4}))
    eng.setup()
    yield eng
    eng.close()


def test_cpu_engine_takes_cpu_sizes_unless_set(gemma):
    assert (gemma.device, gemma.batch_size, gemma.max_batch_tokens, gemma.gen_batch_size) == ("cpu", *CPU_SIZES)
    other = TransformersEngine(EngineConfig(options={"batch_size": 3, "gen_batch_size": 2}))
    other.use_model(gemma.model, gemma.tokenizer)
    assert (other.batch_size, other.max_batch_tokens, other.gen_batch_size) == (3, 8192, 2)


@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_scores_do_not_depend_on_how_rows_are_batched(gemma):
    rows = [json.loads(line)["text"] for line in (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl")
            .open(encoding="utf-8")][:12]
    prompt = load_prompt("classify_piqa/ko")
    prompts = [gemma.render_chat(prompt.render(text=t).messages) for t in rows]
    options = ["예", "아니오", "잘 모르겠습니다"]  # a multi-token option exercises the extra queries
    one_batch = gemma.option_logprobs(prompts, options)
    small = TransformersEngine(EngineConfig(options={"batch_size": 2, "max_batch_tokens": 64,
                                                     "min_prefix_tokens": 4}))
    small.use_model(gemma.model, gemma.tokenizer)
    many_batches = small.option_logprobs(prompts, options)
    for a, b in zip(one_batch, many_batches, strict=True):
        assert a == pytest.approx(b, abs=2e-3)
    assert [r.index(max(r)) for r in one_batch] == [r.index(max(r)) for r in many_batches]


def test_encode_many_equals_encode_one_by_one(gemma):
    bos = gemma.tokenizer.bos_token
    texts = ["물을 끓이려면?", f"{bos}이미 BOS로 시작하는 문장", "", "plain text"]
    assert gemma.encode_many(texts) == [gemma.encode(t) for t in texts]
