"""Issue 33 §4: recipe code lives in its recipe's folder, and no layer names a higher one in a string.

* A stage whose module is in `transforms/recipes/<r>/` is used by recipe r only.
* A stage outside the recipe folders is named for what it does, not for a recipe or a language
  (no `ko_`/`ja_`/`ru_`/`ta_`/`zh_` prefix, no module named after a language or a recipe): such a stage
  is one recipe's and belongs in its folder. Language tools that are not stages (japanese_words.py) stay
  where every layer can use them.
* Code that is not a stage but serves one recipe only (Ko-PIQA's cascade evaluation, its report, the KiN seed
  split) is defined in that recipe's folder only (`RECIPE_ONLY`); a module of a lower layer importing it is a
  deprecated re-export shim that defines nothing (the contract's `ignore_imports`).
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

ROOT = Path(__file__).resolve().parents[2]
# What only one recipe uses, by the names it is defined under (functions, classes, module constants).
RECIPE_ONLY = {
    "ko_piqa": {"KIN_SPLIT", "kin_parity",                                        # the KiN seed split
                "prefilter_scores", "by_group", "llm_tokens",                     # judge-eval's cascade evaluation
                "JudgesReport", "member_figures", "NEGATIVE_SOURCES",             # a run's kept rows vs the labels
                "render_judges", "render_judge_eval", "render_run",               # their HTML
                "measure_defence", "recipe_judges"},                             # the injection defence's figures
}
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


def _defined(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_code_only_one_recipe_uses_is_defined_in_its_folder_only():
    modules = sorted((ROOT / "transforms").rglob("*.py")) + sorted((ROOT / "jobs").rglob("*.py"))
    for recipe, names in RECIPE_ONLY.items():
        home = ROOT / "transforms" / "recipes" / recipe
        where: dict[str, list[Path]] = defaultdict(list)
        for path in modules:
            for name in _defined(path) & names:
                where[name].append(path)
        assert set(where) == names, f"not defined anywhere (RECIPE_ONLY is stale): {sorted(names - set(where))}"
        outside = [f"{name} in {p.relative_to(ROOT)}" for name, paths in where.items() for p in paths
                   if home not in p.parents]
        assert not outside, f"{recipe}'s own code outside transforms/recipes/{recipe}/: " + "; ".join(outside)


def test_an_import_up_a_layer_is_only_a_deprecated_shim_that_defines_nothing():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    for entry in contract.get("ignore_imports", []):
        module = entry.split("->")[0].strip()
        path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert doc.startswith("Deprecated"), f"{module} imports up a layer: a shim says so in its docstring"
        code = [n for n in tree.body[1:] if not isinstance(n, ast.Import | ast.ImportFrom)]
        assert not code, f"{module} imports up a layer (ignored by the contract) and defines code at line {code[0].lineno}"
