"""One YAML / `--set` / secrets path (transforms/flow/config_io.py) for recipes and the tools' configs.

The same `--set` text gives the same value in a recipe (`piqaforge run RECIPE --set ...`) and in the
`release` tool's config (`piqaforge run release --set ...`); a repeated key is refused naming the file and
the line in a recipe, in a recipe's `--config` file and in a tool's `--config` file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from jobs.cli import build_parser, main, recipe_overrides, run_overrides
from jobs.config import ConfigError, resolve_config
from transforms.flow.config_io import (
    OverrideError,
    YamlFileError,
    deep_merge,
    parse_set,
    read_yaml,
    secret_names,
    set_dotted,
)
from transforms.flow.recipe import RecipeError, load_recipe

RECIPE = {"recipe": "t", "description": "d", "dataset": "t", "language": {"code": "en"},
          "params": {"n": 1, "probe": {"value": None}},
          "runs": [{"name": "items", "source": {"stage": "read_items", "path": "x.jsonl"},
                    "stages": [{"stage": "degenerate"}]},
                   {"name": "release", "release": {"of": "items"}}]}


def _recipe(tmp_path: Path, text: str | None = None, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text or yaml.safe_dump(RECIPE, sort_keys=False), encoding="utf-8")
    return path


def _in_recipe(path: Path, raw: str) -> object:
    args, extra = build_parser().parse_known_args(["run", str(path), "--set", f"probe.value={raw}"])
    return load_recipe(str(path), recipe_overrides(args, extra)).params["probe"]["value"]


def _in_release(raw: str) -> object:
    args, extra = build_parser().parse_known_args(["run", "release", "--input", "x.jsonl", "--set", f"suite.probe={raw}"])
    return resolve_config("release", None, run_overrides(args, extra), bind_lake=False).suite["probe"]


@pytest.mark.parametrize("raw, value", [
    ("0.5", 0.5), ("7", 7), ("yes", True), ("null", None), ("'007'", "007"), ("", ""), ("a=b", "a=b"),
    ("2024-01-01", "2024-01-01"),   # a YAML date is its text, as in a file
    ("[a, 1]", ["a", 1]), ("{x: 1, 2: y}", {"x": 1, "2": "y"}), ("[unclosed", "[unclosed"),
])
def test_the_same_set_text_gives_the_same_value_in_a_recipe_and_in_the_release_tool(tmp_path, raw, value):
    path = _recipe(tmp_path)
    assert _in_recipe(path, raw) == value
    assert _in_release(raw) == value
    assert parse_set(f"k={raw}") == ("k", value)


def test_a_repeated_key_is_refused_naming_file_and_line_in_a_recipe_and_a_tool_config(tmp_path, capsys):
    text = yaml.safe_dump(RECIPE, sort_keys=False)
    line = text.splitlines().index("dataset: t") + 2  # the repeat follows it
    recipe = _recipe(tmp_path, text.replace("dataset: t\n", "dataset: t\ndataset: u\n"), name="repeated.yaml")
    with pytest.raises(RecipeError) as err:
        load_recipe(str(recipe))
    assert (err.value.path, err.value.key) == (str(recipe), f"line {line}") and "'dataset' appears twice" in str(err.value)

    config = tmp_path / "c.yaml"
    config.write_text("audit: false\nsuite:\n  x: 1\n  x: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{config}: line 4: not valid YAML: key 'x' appears twice"):
        resolve_config("release", str(config), {"input": "x.jsonl"}, bind_lake=False)
    with pytest.raises(RecipeError, match="line 4: not valid YAML: key 'x' appears twice"):
        load_recipe(str(_recipe(tmp_path)), config_file=str(config))  # a recipe's --config file too
    # on the command line: exit 2 before anything runs, the same words for both
    lake = str(tmp_path / "lake")
    assert main(["run", str(recipe), "--lake", lake]) == 2
    assert main(["run", "release", "--input", "x.jsonl", "--config", str(config), "--lake", lake]) == 2
    assert not (tmp_path / "lake").exists()
    err_text = capsys.readouterr().err
    assert f"{recipe}: line {line}: not valid YAML: key 'dataset' appears twice" in err_text
    assert f"{config}: line 4: not valid YAML: key 'x' appears twice" in err_text


def test_a_merge_key_may_be_overridden_and_anchors_become_copies(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("base: &b {x: 1, y: 2}\none: {<<: *b, x: 3}\ntwo: *b\n", encoding="utf-8")
    data = read_yaml(path)
    assert data == {"base": {"x": 1, "y": 2}, "one": {"x": 3, "y": 2}, "two": {"x": 1, "y": 2}}
    set_dotted(data, "two.x", 9)
    assert data["base"]["x"] == 1  # the anchor's other uses are untouched
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert read_yaml(tmp_path / "empty.yaml") == {}
    with pytest.raises(YamlFileError, match="must hold a mapping"):
        read_yaml(tmp_path / "empty.yaml", empty_ok=False)
    with pytest.raises(YamlFileError, match="no such file"):
        read_yaml(tmp_path / "missing.yaml")


def test_set_dotted_walks_sections_and_list_entries_by_name():
    data = {"runs": [{"name": "crawl", "stages": [{"stage": "langid", "min_score": 0.1}]}], "n": None}
    set_dotted(data, "runs.crawl.stages.langid.min_score", 0.5)
    set_dotted(data, "new.section.key", "v")
    assert data["runs"][0]["stages"][0]["min_score"] == 0.5 and data["new"] == {"section": {"key": "v"}}
    with pytest.raises(OverrideError, match="no run or stage named 'nope'"):
        set_dotted(data, "runs.nope.x", 1)
    with pytest.raises(OverrideError, match="cannot replace a whole run or stage"):
        set_dotted(data, "runs.crawl", 1)
    with pytest.raises(OverrideError, match="'n' is a value, not a section") as err:
        set_dotted(data, "n.x", 1)
    assert isinstance(err.value, ConfigError) and err.value.key == "n.x"
    # the tools and the recipe report the same problem for the same key
    with pytest.raises(ConfigError, match="--set audit.x: 'audit' is a value, not a section"):
        resolve_config("release", None, {"input": "x.jsonl", "audit.x": 1}, bind_lake=False)


def test_deep_merge_merges_sections_and_changes_neither_input():
    base, extra = {"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"b": 2}, "e": {"f": 1}}
    assert deep_merge(base, extra) == {"a": {"b": 2, "c": [1]}, "d": 1, "e": {"f": 1}}
    assert base == {"a": {"b": 1, "c": [1]}, "d": 1} and extra == {"a": {"b": 2}, "e": {"f": 1}}


def test_secret_names_and_literal_warnings_are_the_same_for_recipes_and_tools(tmp_path, caplog):
    tree = [{"stages": [{"stage": "s", "resources": {"secrets": ["B_KEY"]}}, {"stage": "t"}]}]
    assert secret_names(tree, ["A_KEY", "B_KEY"]) == ["A_KEY", "B_KEY"]
    with caplog.at_level(logging.WARNING, logger="piqaforge"):
        load_recipe(str(_recipe(tmp_path)), {"probe.api_token": "tok-abcdef-123"})
        resolve_config("release", None, {"input": "x.jsonl", "suite.api_token": "tok-abcdef-123"}, bind_lake=False)
    assert "--set: probe.api_token holds a literal secret" in caplog.text
    assert "--set: suite.api_token holds a literal secret" in caplog.text
