"""Issue 33 §2: a stage entry is a typed model (`stage`, `when`, `as`, the stage's fields) with one `wanted(params)`
that the check before anything runs, the run and placement all read; it dumps back to the mapping it was read from,
so a run's fingerprint and the recipe record do not change with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_recipe_check import _zh  # the same edited copy of zh-piqa (same folder)

from transforms.flow.recipe import RecipeError, load_recipe
from transforms.flow.recipe_graph import wanted_places
from transforms.flow.recipe_schema import StageEntry

ROOT = Path(__file__).resolve().parents[2]


def _items(data: dict) -> dict:
    return next(r for r in data["runs"] if r["name"] == "items")


def test_entries_are_typed_and_dump_back_to_what_the_file_says():
    raw = yaml.safe_load((ROOT / "jobs/recipes/zh-piqa.yaml").read_text(encoding="utf-8"))
    recipe = load_recipe("zh-piqa")
    for run in recipe.runs:
        for entry in run.stages:
            assert isinstance(entry, StageEntry)
            assert set(entry.fields).isdisjoint({"stage", "when", "as"})
            assert entry.model_dump() == {"stage": entry.stage, **({"when": entry.when} if "when" in
                                          entry.model_fields_set else {}), **entry.fields}
    # stage names and field keys as the file wrote them (interpolated values aside)
    for raw_run in raw["runs"]:
        run = recipe.run(raw_run["name"])
        assert [e.stage for e in run.stages] == [s["stage"] for s in raw_run.get("stages", [])]
        assert [list(e.model_dump()) for e in run.stages] == [list(s) for s in raw_run.get("stages", [])]


def test_wanted_is_the_one_filter(tmp_path):
    def edit(data):
        data["params"]["deep_check"] = False
        _items(data)["stages"][1]["when"] = "deep_check"
        _items(data)["stages"][2]["when"] = "!deep_check"

    recipe = load_recipe(str(_zh(tmp_path, edit)))
    run = recipe.run("items")
    second, third = run.stages[1], run.stages[2]
    assert not second.wanted(recipe.params) and third.wanted(recipe.params)
    assert second.wanted({**recipe.params, "deep_check": True}) and not third.wanted({"deep_check": True})
    places = [e for _, e in wanted_places(run, recipe.params)]
    assert second not in places and third in places
    assert [e for _, e in wanted_places(run, {**recipe.params, "deep_check": True})].count(second) == 1


def test_as_names_an_entry_for_set_and_for_messages(tmp_path):
    def edit(data):
        entry = _items(data)["stages"][0]
        entry["as"] = "first_pass"

    path = _zh(tmp_path, edit)
    first = load_recipe(str(path)).run("items").stages[0]
    assert first.entry_name == "first_pass" and first.model_dump()["as"] == "first_pass"
    field = next(k for k, v in first.fields.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    changed = load_recipe(str(path), {f"runs.items.stages.first_pass.{field}": 3}).run("items").stages[0]
    assert changed.fields[field] == 3

    def typo(data):
        edit(data)
        _items(data)["stages"][0]["no_such_key"] = 1

    with pytest.raises(RecipeError) as err:
        load_recipe(str(_zh(tmp_path, typo)))
    assert "runs.items.stages.first_pass.no_such_key" in dict(err.value.problems)


def test_an_entry_without_a_stage_is_refused_by_its_place(tmp_path):
    def edit(data):
        _items(data)["stages"][1] = {"colums": ["goal"]}
        _items(data)["stages"].append("normalize")

    with pytest.raises(RecipeError) as err:
        load_recipe(str(_zh(tmp_path, edit)))
    problems = err.value.problems
    assert len(problems) == 2, problems
    assert any("needs `stage:" in p for _, p in problems)
    assert any("a stage entry is a mapping" in p and "'normalize'" in p for _, p in problems)
    last = len(_items(yaml.safe_load((ROOT / "jobs/recipes/zh-piqa.yaml").read_text(encoding="utf-8")))["stages"]) + 1
    assert {k for k, _ in problems} == {"runs.items.stages.(entry 2)", f"runs.items.stages.(entry {last})"}
