"""`piqaforge translate-eval`: the chrF/BLEU of a translation engine on a slice of the parallel corpora.

    piqaforge translate-eval --pair en-ja --engine qwen-local --limit 20
    piqaforge translate-eval --pair en-hi --engine madlad-ct2 --model /models/madlad400-7b-ct2 --device cuda
    piqaforge translate-eval --pair en-ta --engine my_engine.yaml --limit 200 --out figures.json

`--engine` is a preset name below, or a YAML/JSON file holding a translator config
(transforms/translate/config.py; `backend:` picks the class). See docs/translation.md.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("piqaforge.translate_eval")

PRESETS: dict[str, dict[str, Any]] = {
    # the local models that ship on PyPI (transforms/llm/prepare.py)
    "qwen-local": {"backend": "llm", "batch_size": 8, "engine": {
        "backend": "llamacpp", "model": "qwen2.5-coder-1.5b-instruct",
        "options": {"threads": 2, "parallel": 4, "ctx_size": 512}}},
    "gemma-local": {"backend": "llm", "batch_size": 8, "engine": {
        "backend": "transformers", "model": "gemma3-270m", "options": {"threads": 2}}},
    # converted checkpoints (need --model): see docs/translation.md for the conversion command
    "madlad-ct2": {"backend": "ctranslate2", "family": "madlad", "model": "", "batch_size": 32},
    "nllb-ct2": {"backend": "ctranslate2", "family": "nllb", "model": "", "batch_size": 32},
}


def engine_config(engine: str, *, model: str | None = None, device: str | None = None,
                  compute_type: str | None = None, cache_dir: str | None = None) -> dict[str, Any]:
    if engine in PRESETS:
        cfg = json.loads(json.dumps(PRESETS[engine]))
    elif Path(engine).is_file():
        cfg = yaml.safe_load(Path(engine).read_text(encoding="utf-8"))
    else:
        raise ValueError(f"--engine {engine!r} is neither a preset ({sorted(PRESETS)}) nor a config file")
    if model:
        if cfg["backend"] == "ctranslate2" or cfg["backend"] == "openai":
            cfg["model"] = model
        else:
            cfg["engine"]["model"] = model
    if cfg["backend"] == "ctranslate2":
        if not cfg.get("model"):
            raise ValueError(f"--engine {engine} needs --model PATH (a CTranslate2 model folder)")
        if device:
            cfg["device"] = device
        if compute_type:
            cfg["compute_type"] = compute_type
    if cache_dir:
        cfg["cache_dir"] = cache_dir
    return cfg


def add_parser(sub: Any) -> None:
    p = sub.add_parser("translate-eval", help="chrF/BLEU of a translation engine on the parallel corpora")
    p.add_argument("--pair", required=True, help="e.g. en-hi, en-ta, en-bn, en-ja, en-ko (or reversed)")
    p.add_argument("--engine", default="qwen-local", help=f"preset ({', '.join(PRESETS)}) or a config file")
    p.add_argument("--limit", type=int, default=100, help="sentence pairs (a seeded sample)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", help="model path or name overriding the preset's")
    p.add_argument("--device", help="ctranslate2: cpu, cuda, auto")
    p.add_argument("--compute-type", help="ctranslate2: int8, int8_float16, bfloat16...")
    p.add_argument("--cache-dir", help="segment cache folder (a re-run translates nothing twice)")
    p.add_argument("--data", help="the shared data folder (default: ../shared/data or $PIQAFORGE_SHARED_DATA)")
    p.add_argument("--out", help="write the figures as JSON here")


def run(args: argparse.Namespace) -> int:
    from transforms.translate.base import build_translator
    from transforms.translate.quality import evaluate_pair

    cfg = engine_config(args.engine, model=args.model, device=args.device, compute_type=args.compute_type,
                        cache_dir=args.cache_dir)
    engine = build_translator(cfg)
    engine.setup()
    try:
        figures = evaluate_pair(engine, args.pair, limit=args.limit, seed=args.seed, root=args.data)
    finally:
        engine.close()
    figures["engine"] = args.engine
    figures["stats"] = engine.stats.model_dump()
    text = json.dumps(figures, ensure_ascii=False, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(f"\n{args.pair}: chrF {figures['chrf']}  BLEU {figures['bleu']}  (n={figures['n']}, "
          f"failed={sum(figures['failed'].values())}, {figures['seconds']} s, {figures['model']})")
    return 0
