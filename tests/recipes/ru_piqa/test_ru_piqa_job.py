"""The ru-piqa job: its arms and checks with an engine double (default tier), and the whole job on
the local Qwen model (slow tier).

`RussianItemsEngine` is a test double of the *engine interface* (transforms/llm/base.py:LLMEngine),
not a model: it replies to the grounded and no-source prompts with JSON items written here in
Russian (good pairs, a phrase swap, pairs that must fail), so the default tier checks the job's
wiring, provenance and drop reasons without a model; the slow test runs the real one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from transforms.flow.recipe import load_recipe
from transforms.flow.runs.common import run_stages
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.piqa.provenance import ProvenanceColumns, provenance_tables
from transforms.recipes.ru_piqa.contrast import length_share, repeated_openings

GROUNDED = [  # a minimal pair over 25 words, a swap of two phrases, a pair that differs everywhere, a bad label
    {"goal": "Летом на даче нужно быстро охладить бутылку воды, а холодильника нет; у колодца есть ведро "
             "холодной воды и тень под деревом.",
     "sol1": "Опустите бутылку в ведро с холодной водой.", "sol2": "Опустите бутылку в ведро с горячей водой.",
     "label": 0, "fact": "Теплота переходит от горячего тела к холодному."},
    {"goal": "Вы несёте из магазина тяжёлую сумку с продуктами и хотите, чтобы хрупкие яйца дошли до дома "
             "целыми, а ручки сумки не порвались.",
     "sol1": "Положите пакет с картошкой на коробку с яйцами.",
     "sol2": "Положите коробку с яйцами на пакет с картошкой.", "label": 1, "fact": "Сила давит на опору."},
    {"goal": "Нужно открыть тугую крышку банки.", "sol1": "Подержите крышку под горячей водой.",
     "sol2": "Попросите соседа купить новую банку огурцов.", "label": 0, "fact": "Металл расширяется."},
    {"goal": "Как сохранить лёд?", "sol1": "Заверните лёд в шерстяной плед.", "sol2": "Заверните лёд в мокрый плед.",
     "label": 2, "fact": "Шерсть плохо проводит тепло."},
]
NO_SOURCE = [
    {"goal": "Зимой на прогулке у ребёнка замёрзли руки, а до дома ещё полчаса пешком по парку; в рюкзаке "
             "есть запасные варежки и бутылка воды.",
     "sol1": "Наденьте ребёнку сухие варежки.", "sol2": "Наденьте ребёнку мокрые варежки.", "label": 0},
]

# What a model might answer in the edit form: a good item, and a word that is not in the answer.
EDITS = [
    {"goal": "Летом на даче нужно быстро охладить бутылку воды, а холодильника нет; у колодца есть ведро "
             "холодной воды и тень под деревом.", "answer": "Опустите бутылку в ведро с холодной водой.",
     "word": "холодной", "wrong_word": "горячей"},
    {"goal": "Нужно открыть тугую металлическую крышку стеклянной банки с огурцами.",
     "answer": "Подержите крышку под горячей водой.", "word": "тёплой", "wrong_word": "ледяной"},
]


class RussianItemsEngine(LLMEngine):
    """Test double of the engine interface: JSON items written in this test, by prompt."""

    def __init__(self) -> None:
        super().__init__(EngineConfig(model="ru-double"))
        self.asked: Counter[str] = Counter()

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        out = []
        for conv in conversations:
            grounded = "<document>" in conv[-1]["content"]
            self.asked["grounded" if grounded else "no_source"] += 1
            if "одно задание" in conv[0]["content"]:  # the edit form: one item per reply, by sample seed
                out.append(json.dumps(EDITS[(params.seed or 0) % len(EDITS)], ensure_ascii=False))
                continue
            out.append(json.dumps({"items": GROUNDED if grounded else NO_SOURCE}, ensure_ascii=False))
        return out

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        raise NotImplementedError


ARMS = ["arm-grounded-t03", "arm-grounded-t08", "arm-no-source"]


def list_form(arm: str) -> list[dict]:
    """The paper's form of an arm: n_items items as one JSON list per request (a recipe file or `--config`
    can put these stages in an arm's run; the recipe's local default is the edit form)."""
    grounded = arm != "arm-no-source"
    variables = {"n_items": "n_items", **({"title": "title", "subject": "subject", "grade": "grade", "chunk": "text"}
                                          if grounded else {"topic": "text"})}
    fields = {"goal": "str", "sol1": "str", "sol2": "str", "label": "int", **({"fact": "str"} if grounded else {})}
    kind = "document" if grounded else "topic_seeds"
    return [{"stage": "attach_chunks", "documents": {"paths": ["${data.documents}"], "kinds": [kind], "max_chars": 900}},
            {"stage": "llm_generate", "engine": "@generator",
             "prompt": {"id": "ru_piqa/grounded_generation" if grounded else "ru_piqa/no_source"},
             "variables": variables, "output": {"kind": "json", "items": True, "fields": fields},
             "params": {"max_tokens": 240, "temperature": 0.8 if arm.endswith("t08") else 0.3,
                        "seed": 1 if arm.endswith("t08") else 0}},
            {"stage": "set_columns", "values": {"model": arm, "lang": "ru", "is_cultural": False},
             "copy_columns": {"source": "doc_source"}}]


def arms(lake: Path, **overrides: object) -> tuple[object, list[tuple[object, list]]]:
    """The recipe and each arm's source and stages, as the orchestrator builds them."""
    recipe = load_recipe("ru-piqa", overrides)
    return recipe, [run_stages(recipe, arm, lake=lake) for arm in ARMS]


def _run(stages: list, table: pa.Table) -> tuple[pa.Table, Counter[str]]:
    from test_j_piqa_job import apply

    dropped: Counter[str] = Counter()
    for stage in stages:
        table, why = apply(stage, table)
        dropped += why
    return table, dropped


def test_arms_in_the_edit_form_build_minimal_pairs(tmp_path: Path):
    recipe, built = arms(tmp_path / "lake", chunks=1, n_items=2)
    engine, items, dropped = RussianItemsEngine(), [], Counter()
    for name, (source, stages) in zip(ARMS, built, strict=True):
        for s in stages:
            if s.name == "llm_generate":
                assert s.prompt.id == ("ru_piqa/no_source_item" if name == "arm-no-source" else "ru_piqa/grounded_item")
                s.use_engine(engine)
        out, why = _run(stages, source.rows())
        items.append(out)
        dropped += why
    assert engine.asked == {"grounded": 4, "no_source": 2}  # 1 request per arm, 2 samples each
    assert dropped == {"edit_word_missing": 3}  # the second sample of every arm
    union = pa.concat_tables(items, promote_options="permissive")
    checked, why = _run(run_stages(recipe, "checks", lake=tmp_path / "lake")[1], union)  # type: ignore[arg-type]
    assert why == {"duplicate_triplet": 2} and checked.num_rows == 1  # the same item from every arm
    (item,) = checked.to_pylist()
    assert {item["sol1"], item["sol2"]} == {"Опустите бутылку в ведро с холодной водой.",
                                            "Опустите бутылку в ведро с горячей водой."}
    assert item["contrast_type"] == "word_substitution" and item["label"] in (0, 1)


def test_arms_then_checks_with_provenance(tmp_path: Path):
    # the paper's form: a JSON list per request
    overrides = {f"runs.{arm}.stages": list_form(arm) for arm in ARMS}
    recipe, built = arms(tmp_path / "lake", chunks=2, n_items=4, **overrides)
    engine, items = RussianItemsEngine(), []
    for name, (source, stages) in zip(ARMS, built, strict=True):
        for s in stages:
            if s.name == "llm_generate":
                s.use_engine(engine)
        out, dropped = _run(stages, source.rows())
        assert not dropped and set(out.column("model").to_pylist()) == {name}
        items.append(out)
    assert engine.asked == {"grounded": 4, "no_source": 2}  # 2 chunks x 2 grounded arms, 2 topic seeds
    union = pa.concat_tables(items, promote_options="permissive")
    assert union.num_rows == 2 * 2 * 4 + 2
    checked, dropped = _run(run_stages(recipe, "checks", lake=tmp_path / "lake")[1], union)  # type: ignore[arg-type]
    # per grounded request: one not minimal, one bad label; every repeat of an item across requests is a duplicate
    assert dropped == {"not_minimal_contrast": 4, "invalid_label": 4, "duplicate_triplet": 7}
    assert Counter(checked.column("contrast_type").to_pylist()) == {"word_substitution": 2, "phrase_reorder": 1}
    checked = ProvenanceColumns()(checked)
    assert set(checked.column("prompt_id").to_pylist()) == {"ru_piqa/grounded_generation", "ru_piqa/no_source"}
    tables = provenance_tables(checked, ("source_document", "grade", "model"))
    assert sum(tables["model"].column("items").to_pylist()) == 3
    grades = dict(zip(*[tables["grade"].column(c).to_pylist() for c in ("grade", "items")], strict=True))
    assert grades == {"encyclopedic": 2, "3–5": 1}
    share = length_share(checked)
    assert share["over"] == 3 and share["share_over"] == 1.0
    assert repeated_openings(checked)["all"]["distinct_openings"] == 3  # летом, вы, зимой


def test_chunk_draw_is_seeded_and_follows_subjects(tmp_path: Path):
    def drawn(**overrides: object) -> list[str]:
        recipe = load_recipe("ru-piqa", {"chunks": 3, "subjects": ["физика"], **overrides})
        source, _ = run_stages(recipe, "arm-grounded-t03", lake=tmp_path / "lake")
        return source.rows().column("chunk_id").to_pylist()  # type: ignore[attr-defined]

    first = drawn()
    assert first == drawn() and len(first) == 3
    assert first != drawn(seed=1)
    assert all(c.startswith("xquad-ru-") for c in first)
    with pytest.raises(ValueError, match="no chunks with subjects"):
        drawn(subjects=["астрология"])


@pytest.mark.slow
@pytest.mark.recipes  # scripts/test.sh --all
@pytest.mark.ray
def test_ru_piqa_job_end_to_end_on_the_local_model(tmp_path):
    """One grounded arm on Qwen 1.5B, tiny: one chunk, two items (two samples of one request), review=auto,
    release and the zero-shot evaluation. Every run conserves its rows; both replies are schema-valid JSON;
    a release passes the ru-piqa suite and is evaluated (answered + refusals + unparsable = items, the
    random baseline in the table), or the job says why nothing was released."""
    from transforms.core.lake import Lake
    from transforms.core.manifest import RunManifest
    from transforms.flow.orchestrator import run_recipe
    from transforms.llm.prepare import gguf_path

    try:
        gguf_path("qwen2.5-coder-1.5b-instruct")
    except Exception as err:
        pytest.skip(f"local Qwen GGUF not prepared: {err}")
    lake = Lake(tmp_path / "lake")
    result = run_recipe(load_recipe("ru-piqa", {"chunks": 1, "n_items": 2}), lake=lake.root, run_id="ru-e2e")
    generate = next(s for s in RunManifest.load(lake.manifest_path("ru-e2e-arm-grounded-t03")).stages
                    if s.name == "llm_generate")
    assert generate.rows_in == 1 and generate.rows_created == 2, generate
    if not result.get("released"):
        assert result["exit_code"] == 1, result
        return
    card = (Path(result["release"]) / "README.md").read_text(encoding="utf-8")
    assert "Items by provenance" in card
    ev = RunManifest.load(lake.manifest_path("ru-e2e-evaluation"))
    assert ev.status == "succeeded" and ev.parents == ["ru-e2e-release"]
