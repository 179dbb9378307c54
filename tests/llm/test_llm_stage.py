"""The LLM stage base: output specs, on_invalid, the answer cache, provenance and expansion.

Exact replies come from `ScriptedEngine`, a test double of the engine interface whose replies are
written in the test (it is not a model and does not pretend to be one); the tests marked with the
real model run Gemma 3 270M through the transformers engine (test_llm_stage_engines.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.core.creating import CHILD, CONSUMED, INPUT, ROLE, child_ids
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.cache import answer_key
from transforms.llm.generate import LLMGenerate
from transforms.llm.output import ChoiceOutput, JsonOutput
from transforms.llm.transform import LLMTransform

TOPIC = re.compile(r"<topic>\n(.*)\n</topic>", re.S)

PROMPT_YAML = """\
id: make_items/en
version: "{version}"
task: make_items
language: en
options: ["yes", "no"]
aliases: {{"yes": ["y"], "no": ["n"]}}
system: |-
  {system}
template: |-
  <topic>
  {{{{ text }}}}
  </topic>
fence: topic
"""
SYSTEM = "You write short everyday physical-commonsense items about the topic. Reply with JSON only."


def write_prompt(root: Path, *, version: str = "1", system: str = SYSTEM) -> str:
    """A prompt file under `root` (prompts/make_items/en.yaml); returns the root for PromptRef."""
    folder = root / "make_items"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "en.yaml").write_text(PROMPT_YAML.format(version=version, system=system), encoding="utf-8")
    return str(root)


class ScriptedEngine(LLMEngine):
    """A test double of the *engine interface* (not a model): its replies are written in the test.

    `script` maps a row's fenced topic to the replies to give, in order (the last one repeats);
    `reply` computes a reply from (topic, params) instead. Every conversation it receives is kept
    in `conversations`, so tests can read what a retry showed the model, and `calls` counts calls.
    """

    def __init__(self, script: dict[str, list[str]] | None = None,
                 reply: Callable[[str, GenerationParams], str] | None = None, model: str = "scripted"):
        super().__init__(EngineConfig(model=model))
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.reply = reply
        self.conversations: list[list[ChatMessage]] = []
        self.params: list[GenerationParams] = []
        self.calls = 0

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        self.calls += 1
        out = []
        for conv in conversations:
            self.conversations.append(conv)
            self.params.append(params)
            topic = next(m.group(1) for msg in conv if (m := TOPIC.search(msg["content"])))
            if self.reply is not None:
                out.append(self.reply(topic, params))
                continue
            replies = self.script[topic]
            out.append(replies.pop(0) if len(replies) > 1 else replies[0])
        return out

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError("the scripted engine only chats")

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        raise NotImplementedError("the scripted engine only chats")


def frame(texts: list[str], ids: list[str] | None = None) -> pa.Table:
    return pa.table({C.ID: ids or [f"r{i}" for i in range(len(texts))], C.TEXT: texts})


ITEM_FIELDS = {"goal": "str", "sol1": "str", "sol2": "str", "label": "int"}
GOOD = {"goal": "Keep bread fresh", "sol1": "Seal it in a bag", "sol2": "Leave it open", "label": 0}


def item(**changes) -> str:
    return json.dumps({**GOOD, **changes})


def transform(root: str, double: LLMEngine, **kw) -> LLMTransform:
    kw.setdefault("output", JsonOutput(fields=ITEM_FIELDS))
    return LLMTransform(prompt={"id": "make_items/en", "root": root}, **kw).use_engine(double)


@pytest.fixture
def root(tmp_path) -> str:
    return write_prompt(tmp_path / "prompts")


# -- json output: validation ----------------------------------------------------------------------------
def test_json_output_flattens_to_typed_columns_and_drops_bad_replies(root):
    script = {
        "good": [f"Sure! Here is the item:\n```json\n{item()}\n```\nHope that helps."],
        "bad json": ['{"goal": "Keep bread fresh", "sol1": '],
        "extra key": [item(difficulty="easy")],
        "wrong type": [item(label="zero")],
        "string number": [item(label="1")],  # strict: "1" is not an int
        "missing": [json.dumps({k: v for k, v in GOOD.items() if k != "sol2"})],
        "refusal": ["I'm sorry, I cannot help with that."],
    }
    engine = ScriptedEngine(script)
    out = transform(root, engine)(frame(list(script)))
    assert out.schema.field("label").type == pa.int64() and out.schema.field("goal").type == pa.string()
    reasons = out.column(C.DROP_REASON).to_pylist()
    assert reasons == [None] + ["invalid_output"] * 6
    assert out.column("goal").to_pylist() == ["Keep bread fresh"] + [None] * 6
    assert out.column("label").to_pylist() == [0] + [None] * 6
    raw = out.column("llm_raw").to_pylist()
    assert raw[0] is None and raw[1:] == [script[k][0] for k in list(script)[1:]]  # kept for rejected/
    assert out.column(C.STATUS).to_pylist() == ["kept"] + ["rejected"] * 6


def test_json_output_errors_say_what_is_wrong():
    spec = JsonOutput(fields=ITEM_FIELDS)
    from transforms.llm.answers import AnswerError

    for reply, message in [(item(difficulty="easy"), r"keys the schema does not allow: \['difficulty'\]"),
                           (item(label="zero"), r"label: Input should be a valid integer"),
                           ('{"goal": ', "no valid JSON"), ("[1, 2]", "JSON list, expected a JSON dict"),
                           ("", "empty")]:
        with pytest.raises(AnswerError, match=message):
            spec.parse(reply)


def test_json_model_from_a_dotted_path_and_items_schema():
    spec = JsonOutput(model="transforms.llm.stage:PromptRef", items=True)
    assert [f.name for f in spec.arrow_fields()] == ["id", "version", "root"]
    schema = spec.json_schema()
    assert schema["type"] == "object" and schema["properties"]["items"]["type"] == "array"
    with pytest.raises(ValueError, match="exactly one of"):
        JsonOutput()
    with pytest.raises(ValueError, match="not a pydantic model"):
        JsonOutput(model="json:dumps")


# -- on_invalid: retry ------------------------------------------------------------------------------------
def test_retry_once_shows_the_error_then_drops(root):
    script = {"fixed": [item(label="zero"), item(label=1)], "hopeless": ["no idea", "still no idea"],
              "fine": [item()]}
    engine = ScriptedEngine(script)
    out = transform(root, engine, on_invalid="retry")(frame(list(script)))
    assert out.column(C.DROP_REASON).to_pylist() == [None, "invalid_output", None]
    assert out.column("label").to_pylist() == [1, None, 0]
    assert out.column("llm_raw").to_pylist() == [None, "still no idea", None]
    # one first pass (3 rows) and one retry turn each for the two bad rows, nothing more
    assert len(engine.conversations) == 5
    retry_turns = engine.conversations[3:]
    for conv, first in zip(retry_turns, [item(label="zero"), "no idea"], strict=True):
        assert [m["role"] for m in conv] == ["system", "user", "assistant", "user"]
        assert conv[2]["content"] == first  # the model sees its own reply ...
        assert "could not be used" in conv[3]["content"]  # ... and what was wrong with it
    assert "label: Input should be a valid integer" in retry_turns[0][3]["content"]
    assert "no valid JSON" in retry_turns[1][3]["content"]


def test_drop_mode_never_retries(root):
    engine = ScriptedEngine({"a": ["nope", item()]})
    out = transform(root, engine)(frame(["a"]))
    assert out.column(C.DROP_REASON).to_pylist() == ["invalid_output"] and engine.calls == 1


# -- choice and text output ---------------------------------------------------------------------------------
def test_choice_output_validates_against_the_prompt_options(root):
    script = {"a": ["Yes, definitely."], "b": ["n"], "c": ["yesterday"], "d": ["maybe"]}
    engine = ScriptedEngine(script)
    out = transform(root, engine, output=ChoiceOutput(column="verdict"))(frame(list(script)))
    assert out.column("verdict").to_pylist() == ["yes", "no", None, None]
    assert out.column(C.DROP_REASON).to_pylist() == [None, None, "invalid_output", "invalid_output"]
    assert engine.params[0].choices == ["yes", "no"]  # the constraint reaches the engine
    explicit = transform(root, ScriptedEngine({"a": ["B"]}), output=ChoiceOutput(choices=["A", "B"]))
    assert explicit(frame(["a"])).column("llm_choice").to_pylist() == ["B"]


def test_text_output_and_missing_variable_column(root):
    engine = ScriptedEngine(reply=lambda topic, p: f"  about {topic}\n")
    stage = transform(root, engine, output={"kind": "text", "column": "note"},
                      variables={"text": "topic_col"})
    out = stage(pa.table({C.ID: ["x"], "topic_col": ["tea"]}))
    assert out.column("note").to_pylist() == ["about tea"]
    with pytest.raises(Exception, match="need column"):
        stage(frame(["tea"]))


# -- provenance ---------------------------------------------------------------------------------------------
def test_provenance_columns_on_every_row(root):
    engine = ScriptedEngine({"a": [item()], "b": ["junk"]})
    stage = transform(root, engine, params=GenerationParams(temperature=0.3, seed=7, max_tokens=99))
    out = stage(frame(["a", "b"]))
    assert out.column(C.PROMPT).to_pylist() == ["make_items/en@1"] * 2
    assert out.column(C.MODEL).to_pylist() == ["gemma3-270m"] * 2  # the configured model, not the double's
    params = json.loads(out.column(C.GEN_PARAMS)[0].as_py())
    assert params == {"temperature": 0.3, "top_p": 1.0, "max_tokens": 99, "n": 1, "seed": 7}
    empty = stage(frame([]))
    assert {C.PROMPT, C.MODEL, C.GEN_PARAMS, "label", "llm_raw"} <= set(empty.schema.names)
    assert empty.schema.field("label").type == pa.int64()


def test_pinned_prompt_version_must_match(root):
    stage = LLMTransform(prompt={"id": "make_items/en", "version": "2", "root": root})
    with pytest.raises(Exception, match="pins '2'"):
        stage.use_engine(ScriptedEngine({"a": ["x"]}))(frame(["a"]))
    assert LLMTransform(prompt="make_items/en@3").prompt.version == "3"


# -- the answer cache ---------------------------------------------------------------------------------------
def test_rerun_with_the_cache_asks_nothing(root, tmp_path):
    texts = ["a", "b", "c"]
    first_engine = ScriptedEngine(reply=lambda t, p: item(goal=f"goal {t}"))
    first = transform(root, first_engine, cache_dir=str(tmp_path / "cache"), chunk_size=2)
    out1 = first(frame(texts))
    assert first.counters.as_dict() == {"engine_calls": 2, "requests": 3, "cache_hits": 0}
    second_engine = ScriptedEngine(reply=lambda t, p: "a different answer")
    second = transform(root, second_engine, cache_dir=str(tmp_path / "cache"))
    # other row ids, same texts: the answers are reused, the engine is never called
    out2 = second(frame(texts, ids=["x", "y", "z"]))
    assert second_engine.calls == 0
    assert second.counters.as_dict() == {"engine_calls": 0, "requests": 0, "cache_hits": 3}
    assert out2.column("goal").equals(out1.column("goal"))
    files = sorted((tmp_path / "cache").glob("*/*.parquet"))
    assert len(files) == 2  # one file per chunk, no hidden leftovers
    # a rewritten text is a new question, though its row id is old
    third_engine = ScriptedEngine(reply=lambda t, p: item(goal="new"))
    third = transform(root, third_engine, cache_dir=str(tmp_path / "cache"))
    assert third(frame(["a", "b (rewritten)"])).column("goal").to_pylist() == ["goal a", "new"]
    assert third.counters.requests == 1


def test_equal_questions_in_a_batch_are_asked_once(root):
    engine = ScriptedEngine(reply=lambda t, p: item())
    stage = transform(root, engine)
    stage(frame(["same", "same", "other"]))
    assert len(engine.conversations) == 2 and stage.counters.cache_hits == 0


def test_cache_key_follows_prompt_text_and_params_not_row_id(root, tmp_path):
    def asks_again(stage_root: str, **kw) -> bool:
        """Run on one shared cache: is the question new to it (a new key), or answered from it?"""
        stage = transform(stage_root, ScriptedEngine(reply=lambda t, p: item()), cache_dir=str(tmp_path / "k"),
                          **kw)
        stage(frame(["a"], ids=[f"id-{len(list((tmp_path / 'k').glob('*/*')))}"]))
        return stage.counters.requests == 1

    assert asks_again(root)
    assert not asks_again(root)  # same question, another row id
    assert asks_again(write_prompt(tmp_path / "other", system=SYSTEM + " Be brief."))  # prompt text
    assert asks_again(root, params=GenerationParams(max_tokens=256, temperature=0.5))
    assert asks_again(root, params=GenerationParams(max_tokens=100))
    assert asks_again(root, params=GenerationParams(max_tokens=256, seed=1))
    assert asks_again(root, engine=EngineConfig(model="another"))
    assert not asks_again(root, engine=EngineConfig(options={"batch_size": 3, "threads": 1}))  # speed knobs
    conv = [{"role": "user", "content": "x"}]
    engine = EngineConfig()
    assert answer_key(conv, engine, {"temperature": 0.0, "n": 1}, 0) == answer_key(conv, engine,
                                                                                 {"temperature": 0.0, "n": 5}, 0)
    assert answer_key(conv, engine, {}, 0) != answer_key(conv, engine, {}, 1)
    # the same stage on other row ids
    stage = transform(root, ScriptedEngine(reply=lambda t, p: item()))
    stage(frame(["a"], ids=["id-1"]))
    stage(frame(["a"], ids=["id-2"]))
    assert stage.counters.requests == 1 and stage.counters.cache_hits == 1


def test_a_killed_writer_leaves_no_partial_answers(root, tmp_path):
    """Answers are appended as whole files written under a hidden name: a half-written one is ignored."""
    cache = tmp_path / "cache"
    stage = transform(root, ScriptedEngine(reply=lambda t, p: item()), cache_dir=str(cache))
    stage(frame(["a"]))
    folder = next(cache.iterdir())
    (folder / ".123-abc.parquet").write_bytes(b"PAR1 half a file")  # what kill -9 mid-write leaves
    again = transform(root, ScriptedEngine(reply=lambda t, p: item()), cache_dir=str(cache))
    again(frame(["a", "b"]))
    assert again.counters.cache_hits == 1 and again.counters.requests == 1


# -- LLMGenerate ----------------------------------------------------------------------------------------------
def generator(root: str, double: LLMEngine, **kw) -> LLMGenerate:
    kw.setdefault("output", JsonOutput(fields=ITEM_FIELDS, items=True))
    return LLMGenerate(prompt={"id": "make_items/en", "root": root}, **kw).use_engine(double)


def by_role(out: pa.Table, role: str) -> pa.Table:
    return out.filter(pa.compute.equal(out.column(ROLE), role))


def test_n_samples_expand_into_children_with_deterministic_ids(root):
    def reply(topic: str, params: GenerationParams) -> str:
        return json.dumps({"items": [json.loads(item(goal=f"{topic} seed {params.seed} #{j}")) for j in range(2)]})

    params = GenerationParams(n=3, temperature=0.8, seed=10, max_tokens=200)
    runs = [generator(root, ScriptedEngine(reply=reply), params=params)(frame(["tea", "rice"])) for _ in range(2)]
    children = by_role(runs[0], CHILD)
    assert children.num_rows == 12  # 2 parents x 3 samples x 2 items
    assert children.column("goal").to_pylist()[:6] == [f"tea seed {s} #{j}" for s in (10, 11, 12) for j in (0, 1)]
    assert children.column("_sample").to_pylist()[:6] == [0, 0, 1, 1, 2, 2]
    assert children.column(C.PARENT_ID).to_pylist() == ["r0"] * 6 + ["r1"] * 6
    ids = children.column(C.ID).to_pylist()
    assert ids == by_role(runs[1], CHILD).column(C.ID).to_pylist()  # same on every run
    expected = child_ids(pa.array(["r0"] * 6 + ["r1"] * 6), np.r_[np.arange(6), np.arange(6)], "llm_generate")
    assert ids == expected.to_pylist() and len(set(ids)) == 12
    gen = [json.loads(g) for g in children.column(C.GEN_PARAMS).to_pylist()]
    assert [(g["seed"], g["sample"], g["n"]) for g in gen[:3]] == [(10, 0, 3), (10, 0, 3), (10, 1, 3)]
    assert children.column(C.PROMPT).to_pylist() == ["make_items/en@1"] * 12
    consumed = by_role(runs[0], CONSUMED)
    assert consumed.column("n_children").to_pylist() == [6, 6]


def test_parent_without_valid_items_is_dropped_with_its_raw_replies(root):
    script = {"good": [json.dumps([json.loads(item()), {"goal": "no solutions"}])],
              "all bad": ['[{"goal": "x"}]', "I cannot write that."]}
    engine = ScriptedEngine(script)
    out = generator(root, engine, params=GenerationParams(n=2, max_tokens=100))(frame(["good", "all bad"]))
    dropped = by_role(out, INPUT)
    assert dropped.column(C.ID).to_pylist() == ["r1"]
    assert dropped.column(C.DROP_REASON).to_pylist() == ["generation_failed"]
    assert json.loads(dropped.column("llm_raw")[0].as_py()) == ['[{"goal": "x"}]', "I cannot write that."]
    children = by_role(out, CHILD)
    # "good" answered the same JSON twice (n=2): 2 valid items kept, 2 invalid ones dropped, raw kept
    assert children.column(C.DROP_REASON).to_pylist() == [None, "invalid_output", None, "invalid_output"]
    assert children.column("llm_raw").to_pylist()[1] == '{"goal": "no solutions"}'
    assert children.column("label").to_pylist() == [0, None, 0, None]
    assert by_role(out, CONSUMED).column(C.ID).to_pylist() == ["r0"]


def test_generate_retry_turns_a_failed_parent_into_children(root):
    engine = ScriptedEngine({"a": ["not json", json.dumps({"items": [json.loads(item())]})]})
    out = generator(root, engine, on_invalid="retry")(frame(["a"]))
    assert by_role(out, CHILD).num_rows == 1 and by_role(out, INPUT).num_rows == 0


def test_generate_rerun_from_the_cache_makes_the_same_children(root, tmp_path):
    def reply(topic: str, params: GenerationParams) -> str:
        return f"a sentence about {topic}, sample seed {params.seed}"

    params = GenerationParams(n=2, temperature=0.7, seed=3, max_tokens=40)
    kw = {"output": {"kind": "text"}, "params": params, "cache_dir": str(tmp_path / "c")}
    first = generator(root, ScriptedEngine(reply=reply), **kw)(frame(["x", "y"]))
    engine = ScriptedEngine(reply=lambda t, p: "changed")
    stage = generator(root, engine, **kw)
    second = stage(frame(["x", "y"]))
    assert engine.calls == 0 and stage.counters.cache_hits == 4
    assert by_role(second, CHILD).select([C.ID, "llm_text"]).equals(by_role(first, CHILD).select([C.ID, "llm_text"]))


# -- the answer parser ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("reply", "expected"), [
    ('{"a": 1}', {"a": 1}),
    ('Sure!\n```json\n{"a": [1, {"b": "}"}]}\n```\nAnything else?', {"a": [1, {"b": "}"}]}),
    ('The answer is {"a": 2} and also {"a": 3}', {"a": 2}),
    ('```\n[{"a": 1}]\n```', [{"a": 1}]),
    ('{broken {"a": 4}', {"a": 4}),
])
def test_extract_json_from_chatty_replies(reply, expected):
    from transforms.llm.answers import extract_json

    assert extract_json(reply) == expected


def test_one_parser_for_options_matches_the_prompt_files():
    """The ensemble parses yes/no with answers.match_choice; it must agree with PromptTemplate.parse."""
    from transforms.llm.answers import match_choice
    from transforms.llm.prompts import load_prompt

    replies = ["예", "**예**", "네, 맞아요", "아니요.", "아니오", "yes", "Yes.", "yesterday", "no way", "nope", "",
               "음...", "잘 모르겠어요", "> 예", "(아니오)", "n", "예아니오"]
    for pid in ("classify_piqa/ko", "classify_piqa/en"):
        prompt = load_prompt(pid)
        for reply in replies:
            assert match_choice(reply, prompt.options, prompt.aliases) == prompt.parse(reply), (pid, reply)


def test_ab_answers_and_refusals_share_the_parser():
    from transforms.eval import parse as eval_parse
    from transforms.llm import answers

    assert eval_parse.parse_answer is answers.parse_answer
    assert answers.parse_answer("Answer: B", ["A", "B"]) == answers.Parsed(1, answers.LENIENT)
    assert answers.parse_answer("1", ["0", "1"]).choice == 1
    assert answers.parse_answer("죄송합니다, 답할 수 없습니다", ["A", "B"]).status == answers.REFUSAL
    assert answers.is_refusal("I'm sorry, I can't help") and not answers.is_refusal("Seal the bag")


def test_a_fully_cached_rerun_never_loads_the_model(root, tmp_path):
    kw = {"output": {"kind": "text"}, "cache_dir": str(tmp_path / "c")}
    transform(root, ScriptedEngine(reply=lambda t, p: f"note on {t}"), **kw)(frame(["a", "b"]))
    # No engine injected: the configured one (transformers, Gemma) would be built only if asked.
    resumed = LLMTransform(prompt={"id": "make_items/en", "root": root}, **kw)
    out = resumed(frame(["a", "b"]))
    assert out.column("llm_text").to_pylist() == ["note on a", "note on b"]
    assert resumed._built == {} and resumed.counters.engine_calls == 0
