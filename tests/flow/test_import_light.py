"""Importing the package and every engine module must stay light: heavy libraries load in setup()."""

from __future__ import annotations

import json
import subprocess
import sys

MODULES = ["transforms", "transforms.llm.base", "transforms.llm.hf", "transforms.llm.openai_engine",
           "transforms.llm.vllm_engine", "transforms.llm.prepare", "transforms.embed", "jobs.cli"]
HEAVY = ["torch", "vllm", "transformers", "sentence_transformers", "great_expectations", "accelerate", "gguf"]


def test_imports_load_no_heavy_library():
    code = (
        "import importlib, json, sys\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(h for h in {HEAVY!r} if h in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing {MODULES} pulled in heavy modules: {loaded}"


def test_engines_resolve_without_loading_models():
    code = (
        "import sys\n"
        "from transforms.llm.base import EngineConfig, build_engine\n"
        "for b in ('transformers', 'openai', 'vllm'):\n"
        "    e = build_engine(EngineConfig(backend=b, model='gemma3-270m'))\n"
        "    assert e.config.backend == b\n"
        "print([h for h in ('torch', 'vllm', 'transformers') if h in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
