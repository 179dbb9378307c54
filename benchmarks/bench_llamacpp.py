"""transformers vs llama.cpp on the same prompts, side by side: option scoring and short generation.

    .venv/bin/python benchmarks/bench_llamacpp.py --rows 24 --gen-rows 8 --threads 1

Prompts: real Korean Naver KiN questions (../shared/data/ko_naverkin_certifiedjoon), each rendered
with the production classifier prompt (prompts/classify_piqa/ko.yaml) by the engine's own
render_chat. Scoring = `option_logprobs` over the prompt's options (예/아니오); generation = greedy
`chat` of at most --max-tokens tokens. Engines: transformers on Gemma 3 270M (float32 from the same
GGUF), llama.cpp on the Gemma GGUF, llama.cpp on Qwen2.5-Coder-1.5B-Instruct Q4_K_M.

Per phase: wall seconds, CPU-seconds of this process (all threads, native ones included), prompt
tokens/s (every row's full prompt counted, shared prefix included, as in transforms/llm/bench.py),
generated tokens/s, rows/s, and the same per CPU-second (the honest figure on a shared, loaded
machine: with --threads 1, per CPU-second is what one idle core would do).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transforms.llm.base import EngineConfig, GenerationParams, build_engine  # noqa: E402
from transforms.llm.prompts import load_prompt  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
KIN = SHARED / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl"


def kin_questions(n: int) -> list[str]:
    with KIN.open(encoding="utf-8") as fh:
        rows = [json.loads(line)["question"] for line in fh if line.strip()]
    return rows[:n]


def timed(fn: Any) -> tuple[Any, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def rates(wall: float, cpu: float, rows: int, prompt_tokens: int, gen_tokens: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rows": rows, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "rows_per_s": round(rows / wall, 3), "rows_per_cpu_s": round(rows / cpu, 3),
        "prompt_tokens": prompt_tokens, "prompt_tok_per_s": round(prompt_tokens / wall, 1),
        "prompt_tok_per_cpu_s": round(prompt_tokens / cpu, 1)}
    if gen_tokens is not None:
        out.update(gen_tokens=gen_tokens, gen_tok_per_s=round(gen_tokens / wall, 2),
                   gen_tok_per_cpu_s=round(gen_tokens / cpu, 2))
    return out


def run_engine(label: str, config: EngineConfig, texts: list[str], gen_rows: int, max_tokens: int) -> dict[str, Any]:
    prompt = load_prompt("classify_piqa/ko")
    engine = build_engine(config)
    _, load_wall, load_cpu = timed(engine.setup)
    convs = [prompt.render(text=t).messages for t in texts]
    rendered = [engine.render_chat(c) for c in convs]
    n_tok = [len(engine.encode(p)) for p in rendered]
    engine.option_logprobs(rendered[:1], prompt.options)  # warm-up (first-call allocations)
    scores, wall, cpu = timed(lambda: engine.option_logprobs(rendered, prompt.options))
    yes = sum(row[0] > row[1] for row in scores)
    scoring = rates(wall, cpu, len(rendered), sum(n_tok)) | {"answered_yes": yes}
    params = GenerationParams(max_tokens=max_tokens, temperature=0.0)
    replies, wall, cpu = timed(lambda: engine.chat(convs[:gen_rows], params))
    gen_tok = sum(len(engine.encode(r, special=False)) for r in replies)
    generation = rates(wall, cpu, gen_rows, sum(n_tok[:gen_rows]), gen_tok)
    generation["parsed"] = sum(prompt.parse(r) is not None for r in replies)
    engine.close()
    return {"engine": label, "model": config.model, "options": config.options,
            "load_s": round(load_wall, 1), "load_cpu_s": round(load_cpu, 1),
            "scoring": scoring, "generation": generation, "sample_reply": replies[0][:60],
            "scores": scores, "replies": replies}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=24, help="KiN questions scored")
    ap.add_argument("--gen-rows", type=int, default=8, help="of those, questions answered by generation")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=4, help="llama.cpp slots decoded together")
    ap.add_argument("--skip", nargs="*", default=[], help="labels to skip: hf-gemma, lcpp-gemma, lcpp-qwen")
    args = ap.parse_args(argv)
    texts = kin_questions(args.rows)
    lcpp = {"threads": args.threads, "parallel": args.parallel, "ctx_size": 1024}
    engines = [
        ("hf-gemma", EngineConfig(backend="transformers", model="gemma3-270m",
                                  options={"threads": args.threads, "gen_batch_size": args.parallel})),
        ("lcpp-gemma", EngineConfig(backend="llamacpp", model="gemma3-270m", options=lcpp)),
        ("lcpp-qwen", EngineConfig(backend="llamacpp", model="qwen2.5-coder-1.5b-instruct", options=lcpp)),
    ]
    results = []
    for label, config in engines:
        if label in args.skip:
            continue
        results.append(run_engine(label, config, texts, min(args.gen_rows, len(texts)), args.max_tokens))
        brief = {k: v for k, v in results[-1].items() if k not in ("scores", "replies")}
        print(f"done {label}: {json.dumps(brief, ensure_ascii=False)}", file=sys.stderr, flush=True)
    cols = [("scoring", "prompt_tok_per_s"), ("scoring", "prompt_tok_per_cpu_s"), ("scoring", "rows_per_s"),
            ("scoring", "rows_per_cpu_s"), ("generation", "prompt_tok_per_s"), ("generation", "gen_tok_per_s"),
            ("generation", "gen_tok_per_cpu_s"), ("generation", "rows_per_s"), ("generation", "rows_per_cpu_s")]
    print(f"{'engine':<12}" + "".join(f"{(p[:3] + ':' + c)[:22]:>24}" for p, c in cols))
    for r in results:
        print(f"{r['engine']:<12}" + "".join(f"{r[p][c]:>24}" for p, c in cols))
    by_label = {r["engine"]: r for r in results}
    agreement: dict[str, Any] = {}
    if {"hf-gemma", "lcpp-gemma"} <= set(by_label):  # same GGUF, same rendered prompts and tokens
        a, b = by_label["hf-gemma"], by_label["lcpp-gemma"]
        diffs = [abs(x - y) for ra, rb in zip(a["scores"], b["scores"], strict=True)
                 for x, y in zip(ra, rb, strict=True)]
        agreement = {"max_abs_score_diff": round(max(diffs), 4),
                     "same_decision": sum((ra[0] > ra[1]) == (rb[0] > rb[1])
                                          for ra, rb in zip(a["scores"], b["scores"], strict=True)),
                     "same_greedy_reply": sum(x == y for x, y in zip(a["replies"], b["replies"], strict=True)),
                     "rows": len(diffs) // 2}
        print("hf-gemma vs lcpp-gemma:", json.dumps(agreement))
    for r in results:
        del r["scores"], r["replies"]
    print(json.dumps({"loadavg_1m": round(os.getloadavg()[0], 1), "threads": args.threads,
                      "agreement_gemma": agreement, "results": results}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
