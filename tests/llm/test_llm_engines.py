"""The transformers engine with the real packaged model (Gemma 3 270M), checked against a plain
full forward (`model(ids).logits`, all positions) computed here, independently of the engine's
hidden-state / prefix-cache code path."""

from __future__ import annotations

import json
import math

import pytest

from transforms.llm.base import EngineConfig, GenerationParams, build_engine
from transforms.llm.prepare import ROOT

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TOL = 2e-3  # float32; the cached path sums attention in a different order


@pytest.fixture(scope="module")
def engine():
    eng = build_engine(EngineConfig(backend="transformers", model="gemma3-270m",
                                    options={"batch_size": 3, "min_prefix_tokens": 4, "threads": 1}))
    eng.setup()
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def ko_rows() -> list[str]:
    rows = [json.loads(line) for line in (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8")]
    # a few short real rows of different lengths, so batches need padding
    texts = sorted({r["text"] for r in rows if 8 <= len(r["text"]) <= 60}, key=len)
    return [texts[0], texts[len(texts) // 2], texts[-1], texts[len(texts) // 3]]


INSTRUCTION = ("다음 문장이 일상생활의 물리적 상식(도구, 재료, 음식, 살림)에 관한 것인지 판단하세요.\n"
               "Answer yes or no.\n문장: ")


def reference_logprobs(engine, prompt: str, options: list[str]) -> list[float]:
    """log P(option | prompt) from full forwards over prompt+option (logits at every position).

    Options of one token share one forward of the prompt; longer ones get their own."""
    p_ids = engine.encode(prompt)
    opts = [engine.encode(o, special=False) for o in options]
    out = []
    prompt_logp = None
    with torch.inference_mode():
        for o_ids in opts:
            if len(o_ids) == 1 and prompt_logp is not None:
                logp = prompt_logp
            else:
                ids = torch.tensor([p_ids + (o_ids if len(o_ids) > 1 else [])])
                logp = torch.log_softmax(engine.model(input_ids=ids).logits[0].float(), dim=-1)
                if len(o_ids) == 1:
                    prompt_logp = logp
            out.append(sum(logp[len(p_ids) - 1 + k, t].item() for k, t in enumerate(o_ids)))
    return out


@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_option_logprobs_match_full_forward(engine, ko_rows):
    prompts = [INSTRUCTION + t + "\n답:" for t in ko_rows[:2]] + ["The capital of France is"]
    # multi-token options are summed over their tokens: " 아니오" (2 tokens) rides in the prompt's
    # sequence, "아니오" (3 tokens) needs a sequence of its own
    options = [" yes", " no", " 예", " 아니오", "아니오"]
    assert [len(engine.encode(o, special=False)) for o in options] == [1, 1, 1, 2, 3]
    got = engine.option_logprobs(prompts, options)
    assert len(got) == len(prompts) and all(len(r) == len(options) for r in got)
    for prompt, row in zip(prompts, got, strict=True):
        ref = reference_logprobs(engine, prompt, options)
        assert all(math.isfinite(x) and x < 0 for x in row)
        assert row == pytest.approx(ref, abs=TOL)
    # the options are distinguishable: not a flat or constant output
    assert len({round(x, 3) for x in got[0]}) == len(options)


def test_prefix_cache_equals_no_cache(engine, ko_rows):
    prompts = [INSTRUCTION + t + "\n답:" for t in ko_rows]
    items = [(engine.encode(p), [(len(engine.encode(p)) - 1, [0])]) for p in prompts]
    assert engine._shared_prefix_len(items) >= 20, "the shared instruction should be cached"
    options = [" yes", " 아니오", "아니오"]
    engine.options.prefix_cache = True
    cached = engine.option_logprobs(prompts, options)
    engine.options.prefix_cache = False
    try:
        plain = engine.option_logprobs(prompts, options)
    finally:
        engine.options.prefix_cache = True
    for a, b in zip(cached, plain, strict=True):
        assert a == pytest.approx(b, abs=TOL)


def test_loglikelihood_matches_full_forward(engine, ko_rows):
    requests = [("질문: 물을 빨리 끓이려면?\n답:", " 냄비 뚜껑을 덮는다."),
                ("The capital of France is", " Paris"),
                (ko_rows[1], " 그래서"),
                ("abc", "")]
    got = engine.loglikelihood(requests)
    assert got[3] == (0.0, 0)
    for (ctx, cont), (ll, n) in zip(requests[:3], got[:3], strict=True):
        assert n == len(engine.encode(cont, special=False)) > 0
        assert ll == pytest.approx(reference_logprobs(engine, ctx, [cont])[0], abs=TOL)
    # a plausible continuation beats an implausible one
    good, bad = engine.loglikelihood([("The capital of France is", " Paris"),
                                      ("The capital of France is", " banana")])
    assert good[0] > bad[0]


def test_chat_returns_strings_batched(engine):
    convs = [[{"role": "user", "content": "The capital of France is"}],
             [{"role": "system", "content": "한국어로 답하세요."},
              {"role": "user", "content": "김치를 오래 보관하려면 어디에 두나요?"}]]
    params = GenerationParams(max_tokens=6)
    replies = engine.chat(convs, params)
    assert len(replies) == 2 and all(isinstance(r, str) and r.strip() for r in replies)
    # greedy and left-padded: the short conversation alone gives the same reply
    assert engine.chat(convs[:1], params) == replies[:1]
    # stop strings cut the reply
    first_word = replies[0].split()[0]
    cut = engine.chat(convs[:1], GenerationParams(max_tokens=6, stop=[first_word]))
    assert first_word not in cut[0]


def test_render_chat_plain_for_base_model(engine):
    conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = engine.render_chat(conv)
    if engine.tokenizer.chat_template:  # an instruction-tuned checkpoint renders its template
        assert "U" in text
    else:
        assert text == "S\n\nU"


def test_model_cache_resolves_and_is_idempotent(engine):
    import time

    from transforms.llm import prepare

    path = prepare.resolve_model("gemma3-270m")
    assert path == str(prepare.hf_checkpoint("gemma3-270m")) and prepare.is_prepared("gemma3-270m")
    t0 = time.perf_counter()
    assert str(prepare.prepare("gemma3-270m")) == path  # already prepared: no work
    assert time.perf_counter() - t0 < 1.0
    assert prepare.resolve_model("/some/local/checkpoint") == "/some/local/checkpoint"
    assert prepare.resolve_model("google/gemma-3-1b-it") == "google/gemma-3-1b-it"
