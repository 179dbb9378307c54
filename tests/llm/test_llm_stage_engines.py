"""LLM stages on real engines: Gemma 3 270M through the transformers engine (choice by option
scoring, seeded samples, JSON validated and retried), and the vLLM request arguments.

The oracle for the choice is computed here, independently of the stage: the engine's own
option_logprobs on the chat the prompt renders, argmax."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from test_llm_stage import by_role, frame

from transforms.core import columns as C
from transforms.core.creating import CHILD
from transforms.llm.base import EngineConfig, GenerationParams, LLMEngine, build_engine
from transforms.llm.generate import LLMGenerate
from transforms.llm.output import ChoiceOutput, JsonOutput, choose_from_logprobs
from transforms.llm.prepare import ROOT
from transforms.llm.prompts import load_prompt
from transforms.llm.transform import LLMTransform
from transforms.llm.vllm_engine import sampling_kwargs, structured_kwargs

GEMMA = EngineConfig(backend="transformers", model="gemma3-270m", options={"threads": 2})


@pytest.fixture(scope="module")
def gemma() -> LLMEngine:
    pytest.importorskip("transformers", reason="needs the llm extra")
    engine = build_engine(GEMMA)
    engine.setup()
    return engine


@pytest.fixture(scope="module")
def ko_texts() -> list[str]:
    rows = [json.loads(line) for line in (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8")]
    texts = sorted({r["text"] for r in rows if 10 <= len(r["text"]) <= 80})
    return texts[::max(1, len(texts) // 6)][:6]


def test_choice_on_the_real_model_is_the_option_scores_argmax_and_cached(gemma, ko_texts, tmp_path):
    kw = {"engine": GEMMA, "prompt": "classify_piqa/ko", "output": ChoiceOutput(column="physical"),
          "params": GenerationParams(max_tokens=4), "cache_dir": str(tmp_path)}
    stage = LLMTransform(**kw).use_engine(gemma)
    out = stage(frame(ko_texts))
    prompt = load_prompt("classify_piqa/ko")
    scores = gemma.option_logprobs([gemma.render_chat(prompt.render(text=t).messages) for t in ko_texts],
                                   prompt.options)
    assert out.column("physical").to_pylist() == [prompt.options[r.index(max(r))] for r in scores]
    assert out.column(C.DROP_REASON).null_count == len(ko_texts)  # constrained: always a valid option
    assert stage.counters.requests == len(ko_texts) and stage.counters.engine_calls == 1
    assert out.column(C.MODEL).to_pylist() == ["gemma3-270m"] * len(ko_texts)
    again = LLMTransform(**kw).use_engine(gemma)
    assert again(frame(ko_texts)).column("physical").equals(out.column("physical"))
    assert again.counters.as_dict() == {"engine_calls": 0, "requests": 0, "cache_hits": len(ko_texts)}


def test_sampled_choice_follows_the_seed_not_the_batch():
    lps = [[-0.7, -0.7], [-0.7, -0.7]]
    a = choose_from_logprobs(lps, ["x", "y"], 1.0, 3, ["p", "q"])
    assert choose_from_logprobs(lps[:1], ["x", "y"], 1.0, 3, ["p"]) == a[:1]
    draws = {choose_from_logprobs(lps[:1], ["x", "y"], 1.0, s, ["p"])[0] for s in range(20)}
    assert draws == {"x", "y"}  # a 50/50 choice is really sampled
    assert choose_from_logprobs([[-3.0, -0.1]], ["x", "y"], 0.0, 3, ["p"]) == ["y"]


@pytest.mark.slow  # 4 generate calls on CPU: 370 s with the machine under load (load average 15)
def test_generated_samples_on_the_real_model(gemma, tmp_path):
    params = GenerationParams(n=2, temperature=1.0, top_p=0.95, seed=5, max_tokens=12)
    kw = {"engine": GEMMA, "prompt": "classify_piqa/en", "output": {"kind": "text"}, "params": params,
          "cache_dir": str(tmp_path)}
    table = frame(["How do I keep bread fresh for a week?", "How can I clean a burnt pot?"])
    out = LLMGenerate(**kw).use_engine(gemma)(table)
    children = by_role(out, CHILD)
    for text, reason, raw in zip(children.column("llm_text").to_pylist(), children.column(C.DROP_REASON).to_pylist(),
                                 children.column("llm_raw").to_pylist(), strict=True):
        kept = reason is None and text and raw is None
        assert kept or (reason == "invalid_output" and not text and not (raw or "").strip())
    # a 270M base model may answer with nothing, but not every time
    assert children.column(C.DROP_REASON).null_count >= 2
    assert [json.loads(g)["seed"] for g in children.column(C.GEN_PARAMS).to_pylist()] == [5] * children.num_rows
    # no cache, same seed: the same samples (the engine seeds sample k with seed + k)
    fresh = LLMGenerate(**{**kw, "cache_dir": None}).use_engine(gemma)(table)
    assert by_role(fresh, CHILD).column("llm_text").equals(children.column("llm_text"))
    again = LLMGenerate(**kw).use_engine(gemma)
    again(table)
    assert again.counters.engine_calls == 0


@pytest.mark.slow  # free generation plus retry turns on CPU: 507 s with the machine under load
def test_json_on_the_real_model_is_validated_and_retried(gemma, ko_texts):
    """transformers cannot constrain JSON: the stage validates every reply, retries once with the
    error shown, and drops what is still invalid with the reply kept. Whatever the small model writes,
    a kept row has typed, schema-valid columns and a dropped one has its raw reply."""
    output = JsonOutput(fields={"physical": "bool", "reason": "str"})
    stage = LLMTransform(engine=GEMMA, prompt="classify_piqa/en", output=output, on_invalid="retry",
                         params=GenerationParams(max_tokens=24)).use_engine(gemma)
    out = stage(frame(ko_texts[:4]))
    assert out.schema.field("physical").type == pa.bool_()
    invalid_first = stage.counters.requests - 4
    assert 0 <= invalid_first <= 4
    for reason, raw, physical in zip(out.column(C.DROP_REASON).to_pylist(), out.column("llm_raw").to_pylist(),
                                     out.column("physical").to_pylist(), strict=True):
        if reason is None:
            assert isinstance(physical, bool) and raw is None
        else:
            assert reason == "invalid_output" and raw is not None and physical is None
    if out.column(C.DROP_REASON).null_count < 4:
        assert invalid_first > 0  # a row can only be dropped after its retry


def test_vllm_request_arguments():
    schema = JsonOutput(fields={"a": "int"}).json_schema()
    params = GenerationParams(n=3, temperature=0.8, seed=4, max_tokens=50, json_schema=schema)
    assert sampling_kwargs(params) == {"n": 3, "max_tokens": 50, "temperature": 0.8, "top_p": 1.0, "stop": None,
                                       "seed": 4}
    assert structured_kwargs(params) == {"json": schema}
    assert structured_kwargs(GenerationParams(choices=["예", "아니오"])) == {"choice": ["예", "아니오"]}
    assert structured_kwargs(GenerationParams()) is None
