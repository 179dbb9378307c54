"""The shared prefix's KV cache reused across batches (transforms/llm/hf_prefix.py) against the per-batch
copy it replaced and against no prefix cache at all, on real crawl rows over batches of several sizes.

A Qwen3-shaped model (random weights, transforms/llm/synthetic.py, with the real Qwen2.5 tokenizer) takes
the fast path: its cache layers are plain `DynamicLayer`s. Gemma 3 270M (the packaged default) has
sliding-window layers and must fall back to the copy path by itself."""

from __future__ import annotations

import json

import pytest

from transforms.llm import hf
from transforms.llm.base import EngineConfig
from transforms.llm.hf import TransformersEngine
from transforms.llm.hf_prefix import SharedPrefixKV
from transforms.llm.prepare import ROOT
from transforms.llm.prompts import load_prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# Measured on this machine's CPU, float32: reuse vs copy path 0 (the same values reach the same kernels);
# against no prefix cache 2.9e-6 (Qwen3 tiny) and 1.5e-5 (Gemma 3), where attention sums in another order.
# 2e-3 is test_llm_engines.py's tolerance for the cached path, kept here for other CPUs' kernels.
TOL = 2e-3


def crawl_texts(n: int, max_chars: int | None = None) -> list[str]:
    with (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    if max_chars:
        texts = [t for t in texts if 8 <= len(t) <= max_chars]
    return texts[:n]


class Recording(SharedPrefixKV):
    """Remembers every instance and the (rows, width) of each batch it served."""

    made: list[Recording] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.served: list[tuple[int, int]] = []
        Recording.made.append(self)

    def for_batch(self, size, width):
        self.served.append((size, width))
        return super().for_batch(size, width)


@pytest.fixture
def recording(monkeypatch):
    Recording.made = []
    monkeypatch.setattr(hf, "SharedPrefixKV", Recording)
    return Recording.made


def three_ways(engine: TransformersEngine, prompts: list[str], options: list[str]) -> dict[str, list[list[float]]]:
    out = {}
    try:
        for name, reuse, prefix_cache in (("reuse", True, True), ("copy", False, True), ("plain", True, False)):
            engine.reuse_prefix_buffers, engine.options.prefix_cache = reuse, prefix_cache
            out[name] = engine.option_logprobs(prompts, options)
    finally:
        engine.reuse_prefix_buffers, engine.options.prefix_cache = True, True
    return out


def assert_same(a: list[list[float]], b: list[list[float]], tol: float = TOL) -> None:
    for ra, rb in zip(a, b, strict=True):
        assert ra == pytest.approx(rb, abs=tol)
    assert [r.index(max(r)) for r in a] == [r.index(max(r)) for r in b]


@pytest.fixture(scope="module")
def qwen() -> TransformersEngine:
    from transforms.llm.synthetic import qwen_tokenizer, random_model

    engine = TransformersEngine(EngineConfig(options={"batch_size": 5, "min_prefix_tokens": 4}))
    engine.use_model(random_model("tiny", "cpu", "float32", seed=0), qwen_tokenizer())
    return engine


def test_qwen3_reuses_the_prefix_buffers_and_scores_like_the_copy_and_no_cache(qwen, recording):
    prompt = load_prompt("classify_piqa/ko")
    prompts = [qwen.render_chat(prompt.render(text=t).messages) for t in crawl_texts(23)]
    options = [*prompt.options, "잘 모르겠습니다"]  # multi-token options: extra queries and sequences
    ids = [qwen.encode(p) for p in prompts]
    prefix = qwen._shared_prefix_len([(s, [(len(s) - 1, [0])]) for s in ids])
    widest = max(len(s) for s in ids) - prefix
    qwen.max_batch_tokens = 3 * widest  # the longest rows come 3 a batch, the rest 5, the last batch short
    try:
        got = three_ways(qwen, prompts, options)
    finally:
        qwen.max_batch_tokens = 8192
    reuse, copied = recording[0], recording[1]
    assert reuse.reuses and not copied.reuses and len(recording) == 2  # "plain" has no prefix cache
    sizes = [s for s, _ in reuse.served]
    assert sizes == [s for s, _ in copied.served]
    assert sizes[0] <= 3 and 5 in sizes and sizes[-1] < 5, sizes  # several sizes, one repeated, a short last
    assert len({w for _, w in reuse.served}) > 2
    assert_same(got["reuse"], got["copy"])
    assert_same(got["reuse"], got["plain"])
    assert len({round(x, 4) for r in got["reuse"] for x in r}) > len(prompts)  # not a constant output
    # nothing carried over from one call to the next: a second call gives the same numbers
    assert_same(qwen.option_logprobs(prompts, options), got["reuse"], tol=1e-6)


def test_loglikelihood_with_reused_prefix_equals_copy_path(qwen, recording):
    texts = crawl_texts(9)
    requests = [("다음 글을 읽고 이어질 내용을 쓰세요.\n" + t[: len(t) // 2], t[len(t) // 2:]) for t in texts]
    qwen.reuse_prefix_buffers = False
    try:
        copied = qwen.loglikelihood(requests)
    finally:
        qwen.reuse_prefix_buffers = True
    for (ll, n), (ll_copy, n_copy) in zip(qwen.loglikelihood(requests), copied, strict=True):
        assert n == n_copy and ll == pytest.approx(ll_copy, abs=TOL)
    assert [kv.reuses for kv in recording] == [False, True] and recording[1].prefix_len >= 8


def test_buffers_rewind_to_the_prefix_and_leave_the_prefix_cache_alone(qwen):
    decoder = qwen.model.get_decoder()
    with torch.inference_mode():
        cache = decoder(input_ids=torch.tensor([list(range(100, 112))]), use_cache=True).past_key_values
        before = [layer.keys.clone() for layer in cache.layers]
        kv = SharedPrefixKV(cache, 12, [(3, 4), (3, 2), (1, 3)])
        assert kv.reuses
        first = kv.for_batch(3, 4)
        decoder(input_ids=torch.ones((3, 4), dtype=torch.long), past_key_values=first, use_cache=True)
        assert first.get_seq_length() == 16
        second = kv.for_batch(3, 2)
        assert second is first and second.get_seq_length() == 12  # rewound, the same buffers
        out = decoder(input_ids=torch.ones((3, 2), dtype=torch.long), past_key_values=second, use_cache=True)
        assert out.last_hidden_state.shape == (3, 2, 64) and second.get_seq_length() == 14
        assert kv.for_batch(1, 3).get_seq_length() == 12
        with pytest.raises(ValueError, match="not announced"):
            kv.for_batch(3, 2)  # its batches are spent: the buffer is gone
        for layer, keys in zip(cache.layers, before, strict=True):
            assert torch.equal(layer.keys, keys) and layer.keys.shape[0] == 1


@pytest.fixture(scope="module")
def gemma() -> TransformersEngine:
    engine = TransformersEngine(EngineConfig(model="gemma3-270m", options={
        "batch_size": 2, "min_prefix_tokens": 4, "threads": 1}))
    engine.setup()
    yield engine
    engine.close()


@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_gemma3_sliding_window_layers_fall_back_to_the_copy_path(gemma, recording):
    layers = {type(layer).__name__ for layer in gemma.model.get_decoder()(
        input_ids=torch.tensor([[2, 100, 200]]), use_cache=True).past_key_values.layers}
    assert "DynamicSlidingWindowLayer" in layers
    # a short instruction and short rows keep Gemma's full forwards quick; 5 rows: batches of 2, 2, 1
    prompts = ["다음 문장이 살림에 관한 것인지 예 또는 아니오로 답하세요.\n문장: " + t + "\n답:"
               for t in crawl_texts(5, max_chars=60)]
    options = [" 예", " 아니오"]
    got = three_ways(gemma, prompts, options)
    assert [kv.reuses for kv in recording] == [False, False]  # the default asked for reuse, and was refused
    assert [s for s, _ in recording[0].served] == [2, 2, 1]
    assert_same(got["reuse"], got["copy"])
    assert_same(got["reuse"], got["plain"])
    assert_same(gemma.option_logprobs(prompts, options), got["reuse"], tol=1e-6)
