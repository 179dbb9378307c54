"""The j-piqa job: its three chains with an engine double (default tier), and the whole job on the
local Qwen model (slow tier).

`RecipeEngine` is a test double of the *engine interface* (transforms/llm/base.py:LLMEngine), not a
model: it recognises which of the job's prompts it was sent (by the system prompt) and replies with
text written here, in Japanese where a model would write Japanese. It lets the default tier check
the job's wiring, drop reasons and columns without a model; the slow test runs the real one.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

pytest.importorskip("fugashi", reason="the `lang` extra (fugashi, unidic-lite) is not installed")

from transforms.core import columns as C  # noqa: E402
from transforms.core.creating import ROLE, is_creating  # noqa: E402
from transforms.core.stage import GlobalStage  # noqa: E402
from transforms.flow.recipe import REPO as ROOT  # noqa: E402
from transforms.flow.recipe import load_recipe  # noqa: E402
from transforms.flow.runs.common import run_stages  # noqa: E402
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine  # noqa: E402
from transforms.piqa.provenance import ProvenanceColumns  # noqa: E402
from transforms.piqa.tables import release_columns  # noqa: E402
from transforms.recipes.j_piqa.rounds import direct_rows  # noqa: E402
from transforms.translate.llm import LLMTranslator  # noqa: E402

# The paper's form of direct generation: one request for many items as a CSV table (the recipe's item form
# is the local default); a recipe file or `--config` can put these stages in the direct run.
TABLE_FORM = [
    {"stage": "llm_generate", "engine": "@generator", "prompt": {"id": "j_piqa/direct_generation"},
     "variables": {"request": "request", "n_items": "n_items"}, "params": {"max_tokens": 480, "temperature": 0.7}},
    {"stage": "parse_table"},
    {"stage": "set_columns", "values": {"lang": "ja", "is_cultural": True, "source": "piqa_original",
                                        "is_translation": False}},
    {"stage": "ja_constraints"}, {"stage": "duplicate_triplet"}]


def parts(lake: Path, **overrides: Any) -> dict[str, list[Any]]:
    """Each part's stages as the orchestrator builds them from jobs/recipes/j-piqa.yaml."""
    recipe = load_recipe("j-piqa", overrides)
    return {name: run_stages(recipe, name, lake=lake)[1] for name in ("translation", "lexical", "direct")}

# English items in PIQA's style (written for this test), with the Japanese a translator would give.
ITEMS = [
    {"id": "piqa-t-0", "goal": "To keep bread fresh longer,", "sol1": "store it in the freezer.",
     "sol2": "store it in the oven.", "label": 0, "orig_line_no": 10},
    {"id": "piqa-t-1", "goal": "To eat noodles neatly,", "sol1": "use a spoon and a fork.",
     "sol2": "use a spoon and a sponge.", "label": 0, "orig_line_no": 11},
    {"id": "piqa-t-2", "goal": "To make my favorite sandwich,", "sol1": "use white bread.",
     "sol2": "use brown bread.", "label": 1, "orig_line_no": 12},
    {"id": "piqa-t-3", "goal": "To clean a window,", "sol1": "wipe it with a dry newspaper after spraying water.",
     "sol2": "paint it with thick black paint and leave it to dry overnight.", "label": 0, "orig_line_no": 13},
]
JA = {"To keep bread fresh longer,": "パンを長く新鮮に保つには",
      "store it in the freezer.": "冷凍庫に入れて保存する。", "store it in the oven.": "オーブンに入れて保存する。",
      "To eat noodles neatly,": "麺をきれいに食べるには",
      "use a spoon and a fork.": "スプーンとフォークを使う。", "use a spoon and a sponge.": "スプーンとスポンジを使う。"}
VARIANT = {"goal": "麺をきれいに食べるには", "sol1": "れんげと箸を使う。", "sol2": "れんげとスポンジを使う。",
           "replacements": ["スプーン→れんげ", "フォーク→箸"], "changed": True}
CSV = "\n".join([
    "id,category,question,option1,option2,correct,reasoning,question_en,option1_en,option2_en",
    "1,台所,ご飯を早く冷ましたい。,ご飯をうちわであおぐ。,ご飯を布団であおぐ。,1,うちわは軽い。,Cool rice fast.,Fan it.,Fan it with a futon.",
    "2,掃除,畳の部屋を掃除したい。,畳の目に沿って掃除機をかける。,畳の目に逆らって掃除機をかける。,1,目に沿う。,Clean a tatami room.,Along.,Against.",
    "3,掃除,窓を拭きたい。,窓を新聞紙で拭く。,窓に新聞紙で拭く。,1,助詞が違う。,Wipe a window.,With paper.,Wrong particle.",
    "4,旅行,切符を買いたい。,券売機で買う。,券売機で売る。,1,買う。,Buy a ticket.,Buy.,Sell.",
])

# What a model might answer to j_piqa/direct_item: a good item, a word that is not in the answer, and a
# replacement that breaks the particle (に → を: the constraint filter's particles_changed).
ITEMS_JA = [
    {"question": "麦茶を早く冷やしたい。", "answer": "やかんを氷水につける。", "word": "氷水", "wrong_word": "熱湯"},
    {"question": "鍋の焦げを落としたい。", "answer": "重曹を入れて煮る。", "word": "酢", "wrong_word": "砂糖"},
    {"question": "靴を乾かしたい。", "answer": "靴に新聞紙を詰める。", "word": "靴に", "wrong_word": "靴を"},
]


class RecipeEngine(LLMEngine):
    """Test double of the engine interface: replies written in this test, chosen by the prompt."""

    def __init__(self) -> None:
        super().__init__(EngineConfig(model="recipe-double"))
        self.asked: Counter[str] = Counter()

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [self._reply(c) for c in conversations]

    def _reply(self, conv: list[ChatMessage]) -> str:
        system, user = conv[0]["content"], conv[-1]["content"]
        if "before they are translated" in system:
            self.asked["judge"] += 1
            verdict = "preference" if "favorite" in user else "physical"
            return json.dumps({"verdict": verdict, "reason": "written by the test"})
        if "careful translator" in system:
            self.asked["translate"] += 1
            text = re.search(r"<text>\s*(.*?)\s*</text>", user, re.S).group(1)  # type: ignore[union-attr]
            return JA[text]
        if "編集者" in system:
            self.asked["lexical"] += 1
            if "フォーク" in user:
                return json.dumps(VARIANT, ensure_ascii=False)
            goal = re.search(r"目的: (.*)", user).group(1)  # type: ignore[union-attr]
            sols = re.findall(r"解答[12]: (.*)", user)
            return json.dumps({"goal": goal, "sol1": sols[0], "sol2": sols[1], "replacements": [],
                               "changed": False}, ensure_ascii=False)
        self.asked["direct"] += 1
        if "一問だけ" in system:  # j_piqa/direct_item: one JSON item, chosen by the request's number
            return json.dumps(ITEMS_JA[int(re.search(r"(\d+) 問目", user).group(1)) - 1],  # type: ignore[union-attr]
                              ensure_ascii=False)
        return "以下が表です。\n```csv\n" + CSV + "\n```\n以上です。"

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        raise NotImplementedError


def apply(stage: Any, table: pa.Table) -> tuple[pa.Table, Counter[str]]:
    """One stage as the runner applies it: kept rows (children for creating stages) and drop reasons."""
    out = stage.process_table(table) if isinstance(stage, GlobalStage) and not is_creating(stage) else stage(table)
    if ROLE in out.column_names:
        roles = out.column(ROLE).to_pylist()
        out = out.filter(pa.array([r != "consumed" for r in roles]))
    reasons = out.column(C.DROP_REASON).to_pylist() if C.DROP_REASON in out.column_names else [None] * out.num_rows
    kept = out.filter(pa.array([r is None for r in reasons]))
    drop = [c for c in (C.DROP_REASON, C.DROP_STAGE, ROLE, "_src", C.STATUS, "n_children", "child_ids")
            if c in kept.column_names]
    return kept.drop_columns(drop), Counter(r for r in reasons if r is not None)


def with_double(stages: list[Any], engine: RecipeEngine) -> list[Any]:
    for s in stages:
        if hasattr(s, "use_engine") and s.name == "translate":
            s.use_engine(LLMTranslator(s.engine, engine=engine))
        elif hasattr(s, "use_engine"):
            s.use_engine(engine)
    return stages


@pytest.fixture()
def chains(tmp_path: Path) -> dict[str, list[Any]]:
    return parts(tmp_path / "lake", translation_n=10, **{"runs.direct.stages": TABLE_FORM})


def test_direct_generation_one_item_per_request(tmp_path: Path):
    rows = direct_rows(1, {"台所": 2}, [], overshoot=1.5)
    assert [r["request"] for r in rows] == ["ラウンド 1、台所 の 1 問目", "ラウンド 1、台所 の 2 問目",
                                            "ラウンド 1、台所 の 3 問目"]
    assert {r["category"] for r in rows} == {"台所"} and len({r["id"] for r in rows}) == 3
    assert [r["topic"] for r in rows] == ["台所"] * 3  # no topics: the category itself
    table, dropped = pa.Table.from_pylist(rows), Counter()
    for stage in with_double(parts(tmp_path / "lake")["direct"], RecipeEngine()):
        table, why = apply(stage, table)
        dropped += why
    assert dropped == {"edit_word_missing": 1, "particles_changed": 1}
    (item,) = table.to_pylist()
    assert item["goal"] == "麦茶を早く冷やしたい。" and item["category"] == "台所"
    assert {item["sol1"], item["sol2"]} == {"やかんを氷水につける。", "やかんを熱湯につける。"}
    assert (item["sol1"] if item["label"] == 0 else item["sol2"]) == "やかんを氷水につける。"
    assert item["correct"] == str(item["label"] + 1) and item["option_word_distance"] == 1
    assert item[C.PROMPT].startswith("j_piqa/direct_item@") and item["source"] == "piqa_original"


def test_direct_requests_get_distinct_lexicon_topics_outside_the_prompt_examples():
    from transforms.llm.prompts import load_prompt
    from transforms.recipes.j_piqa.stages import lexicon_topics

    system = load_prompt("j_piqa/direct_item").system
    topics = lexicon_topics(str(ROOT / "lake/samples/ja_lexicon.jsonl"), ["tool", "everyday_object", "housing",
                                                                            "food_ingredient"], system)
    assert "炊飯器" in topics and "湯たんぽ" in topics and "障子" in topics
    assert not {"うちわ", "こたつ", "畳", "布団"} & set(topics)  # the worked examples' objects
    assert not any(t in topics for t in ("寿司", "花見"))  # dishes and events are not asked for
    lexicon = {"lexicon": str(ROOT / "lake/samples/ja_lexicon.jsonl"),
               "topic_categories": ["tool", "everyday_object", "housing", "food_ingredient"]}
    r1 = direct_rows(1, {"台所": 4, "掃除": 4}, [], **lexicon, seed=0)
    r2 = direct_rows(2, {"台所": 2}, [], **lexicon, seed=0)
    assert {r["topic"] for r in r1 + r2} <= set(topics)
    assert len({r["topic"] for r in r1 + r2}) == 10  # a later round continues the deck
    assert direct_rows(1, {"台所": 4, "掃除": 4}, [], **lexicon, seed=0) == r1  # seeded
    assert [r["topic"] for r in direct_rows(1, {"台所": 4}, [], **lexicon, seed=1)] != \
        [r["topic"] for r in r1[:4]]
    with pytest.raises(ValueError, match="no entries in categories"):
        lexicon_topics(str(ROOT / "lake/samples/ja_lexicon.jsonl"), ["furniture"])


def test_translation_then_lexical_chain_with_reasons(chains):
    engine = RecipeEngine()
    table, dropped = pa.Table.from_pylist(ITEMS), Counter()
    for stage in with_double(chains["translation"], engine):
        table, why = apply(stage, table)
        dropped += why
    # the clean-window item is not a minimal pair, the sandwich one is a matter of taste
    assert dropped == {"not_minimal_pair": 1, "personal_preference": 1}
    assert table.column("goal").to_pylist() == ["パンを長く新鮮に保つには", "麺をきれいに食べるには"]
    assert table.column("goal_gloss").to_pylist() == ["To keep bread fresh longer,", "To eat noodles neatly,"]
    assert set(table.column("source").to_pylist()) == {"piqa_translation"}
    assert table.column("verdict").to_pylist() == ["physical", "physical"]
    assert engine.asked["translate"] == 6  # goal, sol1, sol2 of the two items left
    lex, dropped = table, Counter()
    for stage in with_double(chains["lexical"], engine):
        lex, why = apply(stage, lex)
        dropped += why
    assert dropped == {"no_lexical_change": 1}  # the bread item: nothing to change
    assert lex.column("sol1").to_pylist() == ["れんげと箸を使う。"]
    assert lex.column(C.PARENT_ID).to_pylist() == ["piqa-t-1"] and lex.column("orig_line_no").to_pylist() == [11]
    assert "fork → 箸" in lex.column("lexicon_candidates")[0].as_py()
    both = pa.concat_tables([lex, table], promote_options="permissive")
    out = release_columns(ProvenanceColumns()(both))
    assert out.column_names == ["prompt", "solution0", "solution1", "label", "prompt_gloss", "solution0_gloss",
                                "solution1_gloss", "source", "orig_line_no", "is_translation"]
    assert out.column("source").to_pylist() == ["piqa_lexical_variation", "piqa_translation", "piqa_translation"]
    assert out.column("is_translation").to_pylist() == [False, True, True]
    assert out.column("prompt_gloss").to_pylist() == [None, "To keep bread fresh longer,", "To eat noodles neatly,"]


def test_direct_generation_chain_and_rebalancing_request(chains):
    (row,) = direct_rows(1, {"台所": 2, "掃除": 1}, [], overshoot=1.5, form="table")
    assert (row["request"], row["n_items"]) == ("カテゴリー「台所」: 3 問\nカテゴリー「掃除」: 2 問", 5)
    table = pa.Table.from_pylist([row])
    dropped = Counter()
    for stage in with_double(chains["direct"], RecipeEngine()):
        table, why = apply(stage, table)
        dropped += why
    assert dropped == {"particles_changed": 1}  # 窓を / 窓に
    assert table.column("category").to_pylist() == ["台所", "掃除", "旅行"]  # 旅行 is left to QuotaCap
    assert set(table.column("source").to_pylist()) == {"piqa_original"}
    assert table.column("goal_gloss").to_pylist()[0] == "Cool rice fast."


@pytest.mark.slow
@pytest.mark.recipes  # scripts/test.sh --all
@pytest.mark.ray
def test_j_piqa_direct_part_end_to_end_on_the_local_model(tmp_path):
    """The direct part on Qwen 1.5B through llama.cpp, tiny: one item per category over two categories
    (two generation requests), review=auto (two annotators), release. Every run conserves its rows
    (run_chain raises otherwise); both replies are schema-valid JSON (constrained decoding) and become
    items; what the checks, review and gate then keep is the model's business, but the job must either
    release a set that passes the j-piqa suite with the appendix, or say why nothing was released.
    Measured here at load average ~50 (other sessions' models on the 2 cores): 688 s, of which 377 s the two
    replies and 101 s Ray's start; both items passed the checks and the position-biased LLM review dropped
    both (label 1, docs/j_piqa.md), so the job said why nothing was released. Quiet-machine time not measured."""
    from transforms.core.lake import Lake
    from transforms.core.manifest import RunManifest
    from transforms.flow.orchestrator import run_recipe
    from transforms.llm.prepare import gguf_path

    try:
        gguf_path("qwen2.5-coder-1.5b-instruct")
    except Exception as err:  # the model is assembled by scripts/setup.sh
        pytest.skip(f"local Qwen GGUF not prepared: {err}")
    # the direct part alone: the translation and lexical runs read an empty draw
    recipe = load_recipe("j-piqa", {"translation_n": 1, "translation_max_words": 1, "per_category": 1,
                                    "overshoot": 1.0, "max_rounds": 1})
    lake = Lake(tmp_path / "lake")
    result = run_recipe(recipe, lake=lake.root, run_id="jp-e2e")
    generate = next(s for s in RunManifest.load(lake.manifest_path("jp-e2e-direct-r1")).stages
                    if s.name == "llm_generate")
    assert generate.rows_in == 2 and generate.rows_created == 2, generate  # two JSON items, none failed
    final = RunManifest.load(lake.manifest_path("jp-e2e-final")) if lake.manifest_path("jp-e2e-final").exists() \
        else None
    if result.get("released"):
        appendix = pd.read_csv(Path(result["release"]) / "extras" / "j-piqa-appendix.csv")
        assert list(appendix.columns)[:4] == ["prompt", "solution0", "solution1", "label"]
        assert final is not None and len(appendix) == final.stages[-1].rows_kept
        assert set(appendix["source"]) == {"piqa_original"}
    else:
        assert result["exit_code"] == 1 and result["status"] in ("nothing_to_release", "failed"), result
