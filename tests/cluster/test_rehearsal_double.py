"""The CI tier's engine double, selected by config (EngineConfig.backend "module:Class", built by build_engine),
in process and behind its OpenAI-compatible server through the openai backend, answering as it does in process."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from transforms.llm.base import EngineConfig, GenerationParams, build_engine

DOUBLE = "harness.rehearsal.double:RehearsalDouble"
REVIEW = ("You check items of a physical commonsense benchmark.\n\n<item>\nGoal: To keep ants away from jaggery,\n"
          "Solution 1: stand the jar in a shallow heap of sugar.\nSolution 2: stand the jar in a shallow plate of water."
          "\n</item>")


def test_a_backend_named_module_class_is_built_when_used_and_anything_else_is_refused():
    from harness.rehearsal.double import RehearsalDouble

    engine = build_engine(EngineConfig(backend=DOUBLE, model="rehearsal-double"))
    assert isinstance(engine, RehearsalDouble) and engine.config.backend == DOUBLE
    with pytest.raises(TypeError, match="not an LLMEngine subclass"):
        build_engine(EngineConfig(backend="transforms.llm.base:EngineConfig"))
    with pytest.raises(ValidationError):
        EngineConfig(backend="harness.rehearsal.double")          # neither registered nor "module:Class"
    with pytest.raises(ModuleNotFoundError):
        build_engine(EngineConfig(backend="no_such_package.engines:Engine"))


def test_the_double_served_answers_as_the_double_in_process():
    from harness.rehearsal.double_server import handler_for
    from transforms.llm.openai_engine import OpenAIEngine

    local = build_engine(EngineConfig(backend=DOUBLE, model="rehearsal-double"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(local))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        served = OpenAIEngine(EngineConfig(backend="openai", model="rehearsal-served", options={"base_url": url}))
        served.setup()
        safety = [[{"role": "system", "content": "You screen items of a physical-commonsense benchmark before people "
                                                 "review them."}, {"role": "user", "content": "<item>x</item>"}]]
        params = GenerationParams(max_tokens=120, n=2)
        assert served.generate(safety, params) == local.generate(safety, params)
        assert json.loads(served.chat(safety, params)[0]) == {"flag": False, "category": "none", "evidence": ""}
        letters = ["A", "B", "C", "D", "E", "F"]
        # the oracle: solution 1 carries the double's wrong word, so B (solution 2 achieves the goal)
        assert served.option_logprobs([REVIEW], letters) == local.option_logprobs([REVIEW], letters)
        assert served.choose([REVIEW], letters) == ["B"]
        served.close()
    finally:
        server.shutdown()
