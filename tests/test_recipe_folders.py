"""Issue 33 §4: recipe code lives in its recipe's folder, and no layer names a higher one in a string.

* A stage whose module is in `transforms/recipes/<r>/` is used by recipe r only.
* A stage outside the recipe folders is named for what it does, not for a recipe or a language
  (no `ko_`/`ja_`/`ru_`/`ta_`/`zh_` prefix, no module named after a language or a recipe): such a stage
  is one recipe's and belongs in its folder. Language tools that are not stages (japanese_words.py) stay
  where every layer can use them.
* The import layers of pyproject.toml are also held for `module:attr` strings: a module never names a
  module of a higher layer in a string literal (lint-imports cannot see those imports).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import yaml

from transforms.flow.registry import STAGES

ROOT = Path(__file__).resolve().parents[1]
RECIPE_PREFIXES = ("ko_", "ja_", "ru_", "ta_", "zh_", "pindic")
LANGUAGE_MODULES = re.compile(r"(korean|japanese|russian|tamil|chinese|pindic|ko_piqa|j_piqa|ru_piqa|ta_piqa)")


def _uses() -> dict[str, set[str]]:
    uses: dict[str, set[str]] = defaultdict(set)

    def walk(node, recipe):
        if isinstance(node, dict):
            if isinstance(node.get("stage"), str):
                uses[node["stage"]].add(recipe)
            for v in node.values():
                walk(v, recipe)
        elif isinstance(node, list):
            for v in node:
                walk(v, recipe)

    for path in sorted((ROOT / "jobs" / "recipes").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        walk(data, data["recipe"])
    return uses


def _recipe_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2].replace("_", "-") if parts[:2] == ["transforms", "recipes"] and len(parts) > 2 else None


def test_a_stage_in_a_recipe_folder_is_used_by_that_recipe_only():
    uses = _uses()
    assert uses, "no recipe uses any stage?"
    folder_stages = 0
    for name, ref in STAGES.items():
        owner = _recipe_of(ref.split(":")[0])
        if owner is None:
            continue
        folder_stages += 1
        assert uses.get(name, set()) <= {owner}, f"{name} ({ref}) lives in {owner}'s folder but {uses[name]} use it"
    assert folder_stages >= 15  # PIndicQA's, J-PIQA's, Russian and Korean stages


def test_no_recipe_or_language_stage_lives_outside_the_recipe_folders():
    uses = _uses()
    misplaced = []
    for name, ref in STAGES.items():
        module = ref.split(":")[0]
        if _recipe_of(module) is not None:
            continue
        if name.startswith(RECIPE_PREFIXES) or LANGUAGE_MODULES.search(module.rsplit(".", 1)[-1]):
            misplaced.append(f"{name} ({ref}, used by {sorted(uses.get(name, ()))})")
    assert not misplaced, "one recipe's stages outside transforms/recipes/<recipe>/: " + "; ".join(misplaced)


def _layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer): the most specific package wins
    for i, layer in enumerate(layers):
        for package in layer:
            inside = module == package or module.startswith(package + ".")
            if inside and (best is None or len(package) > best[0]):
                best = (len(package), i)
    return None if best is None else best[1]


def test_no_module_names_a_higher_layer_in_a_string():
    layers = _layers()
    ref = re.compile(r"^((?:transforms|jobs|expectations)(?:\.\w+)+):\w+$")  # resolved at run time
    upward = []
    for path in sorted((ROOT / "transforms").rglob("*.py")) + sorted((ROOT / "expectations").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        own = _layer_of(module, layers)
        if own is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := ref.match(node.value)):
                target = _layer_of(m.group(1), layers)
                if target is not None and target < own:  # layers are listed from the top
                    upward.append(f"{module} names {node.value!r}")
    # the registry and the orchestrator (transforms.flow) sit above every stage: they may name any of them
    assert not upward, "string imports up a layer: " + "; ".join(upward)
