"""LLM-stage throughput on the local engine: the answer cache and the shared-prefix prompt layout.

    .venv/bin/python benchmarks/bench_llm_stage.py [--rows 48] [--chunk 16] [--threads 2]

One run, Gemma 3 270M through the transformers engine on CPU, an `LLMTransform` with a `choice`
output (classify_piqa/ko: 예/아니오, which this engine answers by scoring the options) over the first
distinct texts of the bundled Korean crawl sample. Side by side:

  shared prefix        the prompt as written: the instruction (system turn) first, the row last, so
                       each engine call computes the instruction's KV cache once for its whole chunk
  shared prefix, 2nd   the same stage again on the same answer cache: no engine call at all
  prefix cache off     the same layout, the engine told not to reuse the prefix (`prefix_cache: false`)
  row first            the same words with the row before the instruction: nothing is shared

Prompt tokens/s counts the rendered prompts' tokens (Gemma tokenizer) over the stage's wall time, so
it is comparable across layouts; for the cached pass it is tokens *served*, not computed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.core import columns as C  # noqa: E402
from transforms.llm.base import EngineConfig, LLMEngine, build_engine  # noqa: E402
from transforms.llm.output import ChoiceOutput  # noqa: E402
from transforms.llm.prompts import PromptTemplate, load_prompt  # noqa: E402
from transforms.llm.transform import LLMTransform  # noqa: E402

PROMPT = "classify_piqa/ko"


def load_rows(n: int) -> pa.Table:
    seen: dict[str, str] = {}
    with (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["text"] and r["text"] not in seen:
                seen[r["text"]] = r["id"]
            if len(seen) >= n:
                break
    return pa.table({C.ID: list(seen.values()), C.TEXT: list(seen)})


def row_first(prompt: PromptTemplate) -> PromptTemplate:
    """The same instruction after the row, in one user turn (load_prompt refuses this layout for prompt
    files, for exactly the reason measured here, so the benchmark builds it directly)."""
    return prompt.model_copy(update={"system": "", "template": prompt.template + "\n\n" + prompt.system})


def run(label: str, engine: LLMEngine, config: EngineConfig, table: pa.Table, chunk: int,
        cache_dir: str | None, layout: PromptTemplate | None) -> dict[str, Any]:
    stage = LLMTransform(engine=config, prompt=PROMPT, output=ChoiceOutput(column="physical"),
                         chunk_size=chunk, cache_dir=cache_dir).use_engine(engine)
    prompt = layout or load_prompt(PROMPT)
    if layout is not None:
        stage.use_prompt(layout)
    tokens = sum(len(engine.encode(engine.render_chat(prompt.render(text=t).messages)))  # type: ignore[attr-defined]
                 for t in table.column(C.TEXT).to_pylist())
    started = time.perf_counter()
    out = stage(table)
    seconds = time.perf_counter() - started
    return {"label": label, "seconds": seconds, "rows_per_s": table.num_rows / seconds,
            "prompt_tokens_per_s": tokens / seconds, "tokens_per_row": tokens / table.num_rows,
            **stage.counters.as_dict(), "answers": out.column("physical").to_pylist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=48, help="distinct sample texts to classify")
    ap.add_argument("--chunk", type=int, default=16, help="rows per engine call (LLMStage.chunk_size)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    args = ap.parse_args()
    table = load_rows(args.rows)
    config = EngineConfig(backend="transformers", model="gemma3-270m", options={"threads": args.threads})
    engine = build_engine(config)
    engine.setup()
    run("warm-up", engine, config, load_rows(4), args.chunk, None, None)  # one-off costs: not in any figure
    print(f"\nLLMTransform, choice output ({PROMPT}), Gemma 3 270M transformers CPU, {table.num_rows} rows, "
          f"chunks of {args.chunk}, {args.threads} threads\n")
    print(f"{'':34} {'s':>7} {'rows/s':>8} {'prompt tok/s':>13} {'tok/row':>8} {'calls':>6} {'hits':>5} "
          f"{'vs cold':>8}", flush=True)
    results: list[dict[str, Any]] = []

    def show(r: dict[str, Any]) -> None:
        results.append(r)
        print(f"{r['label']:34} {r['seconds']:7.2f} {r['rows_per_s']:8.2f} {r['prompt_tokens_per_s']:13.0f} "
              f"{r['tokens_per_row']:8.0f} {r['engine_calls']:6d} {r['cache_hits']:5d} "
              f"{r['rows_per_s'] / results[0]['rows_per_s']:7.1f}x", flush=True)

    with tempfile.TemporaryDirectory() as cache:
        show(run("shared prefix (cold cache)", engine, config, table, args.chunk, cache, None))
        show(run("shared prefix, 2nd pass (cache)", engine, config, table, args.chunk, cache, None))
    engine.options.prefix_cache = False  # type: ignore[attr-defined]
    show(run("shared prefix, prefix cache off", engine, config, table, args.chunk, None, None))
    engine.options.prefix_cache = True  # type: ignore[attr-defined]
    show(run("row first (nothing shared)", engine, config, table, args.chunk, None, row_first(load_prompt(PROMPT))))
    same = results[0]["answers"] == results[1]["answers"] == results[2]["answers"]
    print(f"\nsame answers with and without the answer cache and the prefix cache: {same}")
    agree = sum(a == b for a, b in zip(results[0]["answers"], results[3]["answers"], strict=True))
    print(f"row-first layout agrees with the shared-prefix layout on {agree}/{table.num_rows} rows "
          f"(another prompt, so answers may differ)")


if __name__ == "__main__":
    main()
