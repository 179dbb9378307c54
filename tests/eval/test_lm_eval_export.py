"""The lm-evaluation-harness export in the global_piqa shape: files, keys, and every row rendered as lm-eval would."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jinja2
import pytest
import yaml

from transforms.eval.lm_eval_export import ANSWER_REGEX, export_lm_eval_task
from transforms.eval.templates import load_global_cloze_contexts, prompt_for, prompts_for_style
from transforms.piqa.formats import read_items

# The keys of lm-eval's global_piqa templates (lm_eval/tasks/global_piqa/nonparallel_*/_template).
CLOZE_KEYS = {"dataset_path", "output_type", "test_split", "doc_to_text", "doc_to_target", "doc_to_choice",
              "metric_list"}
GENERATION_KEYS = {"dataset_path", "output_type", "test_split", "doc_to_text", "doc_to_target",
                   "generation_kwargs", "filter_list", "metric_list"}
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined)


def _yaml(path):
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def parus(shared_data, tmp_path_factory):
    table = read_items(shared_data / "ru_russiansuperglue_humanbench")
    return table, export_lm_eval_task(table, tmp_path_factory.mktemp("tasks"), "parus", recipe="ru-piqa")


def test_layout_templates_and_groups(parus):
    table, out = parus
    root = Path(out["include_path"])
    cloze, gen = _yaml(root / "cloze" / "_template"), _yaml(root / "generation" / "_template")
    assert set(cloze) >= CLOZE_KEYS and set(gen) >= GENERATION_KEYS
    assert cloze["output_type"] == "multiple_choice" and cloze["doc_to_text"] == "prompt"
    assert cloze["doc_to_choice"] == "{{[solution0, solution1]}}" and cloze["doc_to_target"] == "label"
    assert [m["metric"] for m in cloze["metric_list"]] == ["acc", "acc_norm", "acc_bytes"]
    assert gen["output_type"] == "generate_until" and gen["doc_to_target"] == "{{['A', 'B'][label]}}"
    regex = gen["filter_list"][0]["filter"][0]
    assert regex == {"function": "regex", "regex_pattern": ANSWER_REGEX, "group_select": -1}
    assert [m["metric"] for m in gen["metric_list"]] == ["exact_match"]
    assert out["tasks"] == ["piqaforge_parus_cloze_rus_cyrl", "piqaforge_parus_generation_rus_cyrl"]
    task = _yaml(root / "cloze" / "rus_cyrl.yaml")
    assert task["include"] == "_template" and task["task"] == "piqaforge_parus_cloze_rus_cyrl"
    data = Path(task["dataset_kwargs"]["data_files"]["test"])
    assert data.is_absolute() and data.exists()
    group = _yaml(out["groups"]["generation"]["yaml"])
    assert group["group"] == "piqaforge_parus_generation"
    assert group["task"] == [{"task": "piqaforge_parus_generation_rus_cyrl", "task_alias": "rus_cyrl"}]
    assert _yaml(out["yaml"])["metadata"]["n_items"] == table.num_rows == 500


def test_every_row_renders_like_lm_eval_and_like_our_evaluator(parus):
    table, out = parus
    root = Path(out["include_path"])
    cloze, gen = _yaml(root / "cloze" / "_template"), _yaml(root / "generation" / "_template")
    rows = [json.loads(x) for x in (root / "data" / "rus_cyrl.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 500 and list(rows[0])[:4] == ["prompt", "solution0", "solution1", "label"]
    contexts = load_global_cloze_contexts()
    prompt = prompt_for("ru", prompts_for_style("global_piqa"))
    raw_differs = needs_cleaning = 0
    for row, goal, sol1, sol2 in zip(rows, table.column("goal").to_pylist(), table.column("sol1").to_pylist(),
                                     table.column("sol2").to_pylist(), strict=True):
        assert row[cloze["doc_to_text"]] == goal == contexts.render("ru", goal)  # the bare prompt, both sides
        choices = ast.literal_eval(ENV.from_string(cloze["doc_to_choice"]).render(**row))
        assert choices == [sol1, sol2]
        ours = prompt.render(goal=goal, sol1=sol1, sol2=sol2).messages
        ours_text = f"{ours[0]['content']}\n\n{ours[1]['content']}"  # the system turn folded into the user turn
        # lm-eval shows the text raw; our renderer strips spaces, applies NFKC and removes fence tags
        clean = {**row, **{k: prompt.sanitise(row[k]) for k in ("prompt", "solution0", "solution1")}}
        assert ENV.from_string(gen["doc_to_text"]).render(**clean) == ours_text
        raw_differs += ENV.from_string(gen["doc_to_text"]).render(**row) != ours_text
        needs_cleaning += clean != row
        assert ENV.from_string(gen["doc_to_target"]).render(**row) == "AB"[row["label"]]
    # the only rows shown differently are those our renderer cleans (PARus: 1 of 500, a leading space)
    assert raw_differs == needs_cleaning < 5


@pytest.mark.parametrize(("reply", "letter"), [
    ("Let me think. The best answer is: B", "B"), ("Answer: A", "A"), ("so \\boxed{B}", "B"),
    ("The final answer is **A**.", "A"), ("I would pick the first one.", None)])
def test_the_regex_filter_reads_the_letter(reply, letter):
    import re

    match = re.findall(ANSWER_REGEX, reply)
    got = next((g for g in match[-1] if g), None) if match else None  # group_select -1, first non-empty group
    assert got == letter
