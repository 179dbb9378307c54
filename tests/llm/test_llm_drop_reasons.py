"""The LLM stages declare every reason their real code paths drop rows for (issue 48 §1: `LLMGenerate` dropped
children as `invalid_output` and declared only `generation_failed`; `LLMTransform` dropped a row whose question
failed at the endpoint as `request_failed` and declared only `invalid_output`).

Each test drives the path with a scripted engine (the engine interface's test double, not a model) and then checks
the reasons the stage really wrote the way the runner does (`check_drop_reasons`, strict in the tests).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pytest
from test_llm_stage import GOOD, ScriptedEngine, by_role, frame, generator, item, transform, write_prompt

from transforms.core import columns as C
from transforms.core.creating import CHILD, INPUT
from transforms.core.stage import check_drop_reasons
from transforms.llm.base import ChatMessage, GenerationParams, QuestionsFailed


@pytest.fixture
def root(tmp_path) -> str:
    return write_prompt(tmp_path / "prompts")


def written(out: pa.Table) -> list[str]:
    return [r for r in out.column(C.DROP_REASON).to_pylist() if r is not None]


def test_generate_declares_the_invalid_output_of_its_children(root):
    script = {"good": [json.dumps([json.loads(item()), {"goal": "no solutions"}])], "all bad": ["I cannot."]}
    stage = generator(root, ScriptedEngine(script), params=GenerationParams(n=1, max_tokens=100))
    out = stage(frame(["good", "all bad"]))
    assert by_role(out, CHILD).column(C.DROP_REASON).to_pylist() == [None, "invalid_output"]
    assert by_role(out, INPUT).column(C.DROP_REASON).to_pylist() == ["generation_failed"]
    assert set(written(out)) == {"invalid_output", "generation_failed"}
    assert check_drop_reasons(stage, written(out)) == []  # strict in the tests: an undeclared one raises


class DownForOne(ScriptedEngine):
    """Answers every question but the one about `down`, which fails at the endpoint for good (retries spent)."""

    def generate(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[list[str]]:
        answers = super().generate(conversations, params)
        down = {i: "http_500" for i, conv in enumerate(conversations) if "<topic>\ndown\n</topic>" in conv[-1]["content"]}
        if down:  # as the HTTP engines do: the answers that came, None for the failed questions
            raise QuestionsFailed([None if i in down else a for i, a in enumerate(answers)], down, "scripted")
        return answers


def test_transform_declares_request_failed_for_a_question_the_endpoint_never_answered(root):
    stage = transform(root, DownForOne({"up": [item()], "down": [item()], "bad": ["not json"]}))
    out = stage(frame(["up", "down", "bad"]))
    assert out.column(C.DROP_REASON).to_pylist() == [None, "request_failed", "invalid_output"]
    assert out.column("goal").to_pylist() == [GOOD["goal"], None, None]
    assert check_drop_reasons(stage, written(out)) == []
