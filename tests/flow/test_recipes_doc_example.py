"""docs/recipes.md's format example is the real zh-piqa recipe (issue 35): the same YAML, and it loads
into the same recipe, so a team copying it starts from what the bundled recipe really runs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from transforms.flow.recipe import RECIPES_DIR, load_recipe

ROOT = Path(__file__).resolve().parents[2]


def format_example() -> str:
    doc = (ROOT / "docs" / "recipes.md").read_text("utf-8")
    section = doc[doc.index("## The format"):]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match, "docs/recipes.md: no yaml block under '## The format'"
    return match.group(1)


def test_the_format_example_is_the_zh_piqa_recipe(tmp_path):
    example = format_example()
    real = (RECIPES_DIR / "zh-piqa.yaml").read_text("utf-8")
    assert yaml.safe_load(example) == yaml.safe_load(real)
    copy = tmp_path / "zh-piqa.yaml"  # as a team would save it: beside nothing of the repository's
    copy.write_text(example, encoding="utf-8")
    ours, theirs = load_recipe(str(copy)), load_recipe("zh-piqa")
    assert ours.model_dump(exclude={"path"}) == theirs.model_dump(exclude={"path"})
