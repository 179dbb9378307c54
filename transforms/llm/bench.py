"""Throughput of option scoring on the bundled Korean sample, with and without prefix caching.

    .venv/bin/python -m transforms.llm.bench --rows 64 --threads 2

Renders each row with the production classifier prompt (prompts/classify_piqa/ko.yaml, via the
engine's render_chat), scores its options with `option_logprobs`, and prints prompt tokens/s and
rows/s for each mode, plus the largest score difference between the two modes.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from transforms.llm.base import EngineConfig
from transforms.llm.hf import TransformersEngine
from transforms.llm.prepare import ROOT
from transforms.llm.prompts import load_prompt

SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--prompt", default="classify_piqa/ko")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args(argv)
    with SAMPLE.open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for _, line in zip(range(args.rows), fh, strict=False)]
    engine = TransformersEngine(EngineConfig(backend="transformers", model=args.model,
                                       options={"threads": args.threads, "batch_size": args.batch_size}))
    t0 = time.perf_counter()
    engine.setup()
    load_s = time.perf_counter() - t0
    prompt = load_prompt(args.prompt)
    prompts = [engine.render_chat(prompt.render(text=t).messages) for t in texts]
    tokens = sum(len(engine.encode(p)) for p in prompts)
    engine.option_logprobs(prompts[:2], prompt.options)  # warm-up
    results = {}
    scores = {}
    for cached in (True, False):
        engine.options.prefix_cache = cached
        t0, c0 = time.perf_counter(), time.process_time()
        scores[cached] = engine.option_logprobs(prompts, prompt.options)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        # CPU seconds too: on a shared machine wall time mostly measures the other jobs; with
        # --threads 1, tokens per CPU-second is what one idle core would do.
        results["prefix_cache" if cached else "no_cache"] = {
            "wall_s": round(dt, 2), "cpu_s": round(cpu, 2),
            "prompt_tokens_per_s": round(tokens / dt, 1), "rows_per_s": round(len(prompts) / dt, 2),
            "prompt_tokens_per_cpu_s": round(tokens / cpu, 1), "rows_per_cpu_s": round(len(prompts) / cpu, 2)}
    diff = max(abs(a - b) for ra, rb in zip(scores[True], scores[False], strict=True)
               for a, b in zip(ra, rb, strict=True))
    print(json.dumps({"model": args.model, "prompt": prompt.ref, "options": prompt.options, "rows": len(prompts),
                      "prompt_tokens": tokens, "mean_prompt_tokens": round(tokens / len(prompts), 1),
                      "threads": args.threads, "load_s": round(load_s, 1), **results,
                      "max_abs_diff_cached_vs_plain": diff, "loadavg_1m": round(os.getloadavg()[0], 1)},
                     ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
