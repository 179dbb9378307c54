"""Issue 33 §2: a recipe is checked whole before anything runs: every problem at once, keyed by run and
stage names, an unknown key with the valid ones and the nearest, hooks resolved at load, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from transforms.flow.recipe import RecipeError, load_recipe
from transforms.flow.recipe_check import ref_problem, resolve_ref, suggest

ROOT = Path(__file__).resolve().parents[2]


def _zh(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((ROOT / "jobs/recipes/zh-piqa.yaml").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _stage(data: dict, run: str, stage: str) -> dict:
    return next(s for r in data["runs"] if r["name"] == run for s in r.get("stages", []) if s["stage"] == stage)


def _run(data: dict, name: str) -> dict:
    return next(r for r in data["runs"] if r["name"] == name)


def test_every_problem_is_reported_at_once_by_names_with_the_nearest_key(tmp_path):
    def edit(data):
        _stage(data, "items", "item_language")["colums"] = ["goal"]           # a stage field typo
        _run(data, "review")["review"]["anotators"] = 2                        # a recipe key typo
        _run(data, "review")["reveiw"] = {"of": "items"}                       # a run key typo
        _stage(data, "items", "degenerate")["no_such_field_at_all"] = 1

    path = _zh(tmp_path, edit)
    with pytest.raises(RecipeError) as err:
        load_recipe(str(path))
    problems = dict(err.value.problems)
    assert "did you mean 'annotators'" in problems["runs.review.review.anotators"]
    assert "did you mean 'review'" in problems["runs.review.reveiw"]
    # pydantic's errors come first, all of them; the stage fields are checked in the same pass when the
    # recipe model itself is valid (below), so a team sees the recipe's own typos at once
    text = str(err.value)
    assert text.count("\n  ") == len(err.value.problems) >= 2 and str(path) in text

    def stage_typos(data):
        _stage(data, "items", "item_language")["colums"] = ["goal"]
        _stage(data, "items", "degenerate")["no_such_field_at_all"] = 1

    with pytest.raises(RecipeError) as err:
        load_recipe(str(_zh(tmp_path, stage_typos)))
    problems = dict(err.value.problems)
    colums = problems["runs.items.stages.item_language.colums"]
    assert "did you mean 'columns'" in colums and "valid keys:" in colums and "lang" in colums
    assert "piqaforge stages item_language" in colums
    assert "runs.items.stages.degenerate.no_such_field_at_all" in problems


def test_a_hook_typo_is_refused_at_load_not_after_a_run(tmp_path):
    data = yaml.safe_load((ROOT / "jobs/recipes/ko-piqa.yaml").read_text(encoding="utf-8"))
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    assert "transforms.recipes.ko_piqa.judges:measure_judges" in text
    path = tmp_path / "ko.yaml"
    path.write_text(text.replace(":measure_judges", ":measure_judgs"), encoding="utf-8")
    with pytest.raises(RecipeError) as err:
        load_recipe(str(path))
    (key, problem), = err.value.problems
    assert key.endswith(".make") and "has no 'measure_judgs'" in problem and "did you mean 'measure_judges'" in problem


def test_a_stage_field_typo_writes_nothing_to_the_lake(tmp_path, capsys):
    from jobs.cli import main

    path = _zh(tmp_path, lambda d: _stage(d, "items", "item_language").update(colums=["goal"]))
    lake = tmp_path / "lake"
    assert main(["run", str(path), "--lake", str(lake)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'columns'" in err and "runs.items.stages.item_language.colums" in err
    assert not lake.exists()  # not even <lake>/.piqaforge/fingerprint.key


def test_the_one_resolver_and_its_source_check_agree():
    assert ref_problem("transforms.flow.recipe_check:suggest") is None
    assert resolve_ref("transforms.flow.recipe_check:suggest") is suggest
    assert "no module" in ref_problem("transforms.no_such_module:f")
    with pytest.raises(AttributeError, match="has no 'sugest'"):
        resolve_ref("transforms.flow.recipe_check:sugest", "hook")
    assert "did you mean 'suggest'" in ref_problem("transforms.flow.recipe_check:sugest")


def test_the_check_builds_each_stage_once_and_a_run_rebuilds_only_what_holds_a_changing_late_value(tmp_path):
    """Issue 33 §3: `check_stages` keeps a build whose fields are fixed from the start (`${run_dir}`,
    `${lake_root}`); `${curated:<run>}` and `${accepted}` are known only as the recipe goes, so those rebuild."""
    from transforms.core.lake import Lake
    from transforms.flow.context import Context, check_stages
    from transforms.flow.runs import kind_of
    from transforms.flow.runs.common import built_stages

    recipe = load_recipe("pindic", {"taxonomy": "open"})
    ctx = Context(recipe, Lake(tmp_path / "lake"), "pi", False, None, None)
    built: list[str] = []
    build = ctx.build
    ctx.build = lambda spec, *a, **k: built.append(spec.stage) or build(spec, *a, **k)  # type: ignore[method-assign]
    check_stages(ctx)
    assert not (tmp_path / "lake").exists()
    taxonomy, generation = ctx.checked["taxonomy"][1], ctx.checked["generation"][1]
    assert "source" not in taxonomy and "stages.cluster_labels" in taxonomy   # label_rows reads ${curated:open}
    assert "stages.novelty" not in generation and "stages.generate_items" in generation  # novelty: ${accepted}
    checked = len(built)
    classify = ctx.recipe.run("classify")
    planned = kind_of(classify).plan(ctx, classify)   # placement's view: the checked builds, nothing built
    assert len(built) == checked and planned[0][1] is ctx.checked["classify"][1]["stages.classify_items"]
    run_dir = ctx.lake.run_dir(ctx.run_id(classify))
    assert [s for _, s in built_stages(ctx, classify, run_dir, take=True)] == [s for _, s in planned]
    assert len(built) == checked and "classify" not in ctx.checked
    gen = ctx.recipe.run("generation")
    gen_dir = ctx.lake.run_dir(ctx.run_id(gen))
    first = built_stages(ctx, gen, gen_dir, [], take=True)       # round 1: only novelty is built again
    assert built[checked:] == ["novelty"] and first[0][1] is generation["stages.generate_items"]
    second = built_stages(ctx, gen, gen_dir, ["x"], take=True)   # round 2: a fresh chain
    assert len(built) == checked + 1 + len(second) and second[0][1] is not first[0][1]
