"""Ko-PIQA classification on one GPU: the transformers engine against the plain forward limit.

    .venv/bin/python benchmarks/bench_llm_gpu.py                 # a GPU: Qwen3-4B shape, 2,048 rows
    .venv/bin/python benchmarks/bench_llm_gpu.py --cpu           # here: tiny shape, 48 rows, float32

A Qwen3-shaped model (transforms/llm/synthetic.py: the published config, random weights, built in
memory) with the real Qwen2.5 tokenizer and chat template scores 예/아니오 (`option_logprobs`) for
rows of the bundled Korean crawl rendered through the production prompt `classify_piqa/ko`:

* engine, default options (the sizes the engine picks for the device) and with the CPU sizes;
* plain batched forward: the same model over only each row's non-shared tokens (what follows the
  prompts' common prefix), in batches of the same sizes, the LM head at the last position, one host
  copy per batch: no prefix to attend to and no Python per row, the limit of a perfect prefix cache.

It prints a table (rows/s, ratio engine/limit, the limit's share of the card's peak bf16 FLOP/s),
and the H100-hours for 3.01M rows per member size: 4B measured, 14B and 32B scaled by the weights a
token multiplies through (an estimate, stated as such). `--json PATH` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.llm.base import EngineConfig  # noqa: E402
from transforms.llm.hf import TransformersEngine  # noqa: E402
from transforms.llm.prompts import load_prompt  # noqa: E402
from transforms.llm.synthetic import matmul_params, qwen_tokenizer, random_model  # noqa: E402

SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
TARGET_ROWS = 3_010_000
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense tensor-core FLOP/s


def rows_texts(n: int) -> list[str]:
    with SAMPLE.open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    return [texts[i % len(texts)] for i in range(n)]


def timed(torch: Any, device: str, fn: Any) -> tuple[Any, float]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def plain_forward(engine: TransformersEngine, suffixes: list[list[int]], option_ids: list[int]) -> list[list[float]]:
    """Log-probs of the options after each suffix, batched like the engine, no prefix, no per-row work."""
    torch = engine._torch
    items = [(s, [(len(s) - 1, option_ids)]) for s in suffixes]
    decoder, head = engine.model.get_decoder(), engine.model.get_output_embeddings()
    pad = engine.tokenizer.pad_token_id
    out: list[list[float]] = [[] for _ in suffixes]
    with torch.inference_mode():
        for batch in engine._batches(items, 0):
            seqs = [suffixes[i] for i in batch]
            width = max(len(s) for s in seqs)
            ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=engine.device)
            lengths = torch.tensor([len(s) for s in seqs], device=engine.device)
            mask = (torch.arange(width, device=engine.device)[None, :] < lengths[:, None]).long()
            hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
            last = hidden[torch.arange(len(seqs), device=engine.device), lengths - 1]
            logp = torch.log_softmax(head(last).float(), dim=-1)[:, option_ids]
            for i, row in zip(batch, logp.cpu().tolist(), strict=True):
                out[i] = row
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = "cpu" if args.cpu else "cuda"
    size = "tiny" if args.cpu else args.size
    n_rows = args.rows or (48 if args.cpu else 2048)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    tokenizer = qwen_tokenizer()
    model = random_model(size, device)
    build_s = time.perf_counter() - t0
    engine = TransformersEngine(EngineConfig(model=f"qwen3-{size}-random-weights"))
    engine.use_model(model, tokenizer)
    prompt = load_prompt("classify_piqa/ko")
    options = list(prompt.options)
    prompts = [engine.render_chat(prompt.render(text=t).messages) for t in rows_texts(n_rows)]
    token_ids = [engine.encode(p) for p in prompts]
    n_tokens = sum(len(t) for t in token_ids)
    items = [(ids, [(len(ids) - 1, [0])]) for ids in token_ids]
    prefix = engine._shared_prefix_len(items)
    suffixes = [ids[prefix:] for ids in token_ids]
    suffix_tokens = sum(len(s) for s in suffixes)
    option_ids = [engine.encode(o, special=False)[0] for o in options]

    engine.option_logprobs(prompts[:32], options)  # warm-up (kernels, allocator)
    plain_forward(engine, suffixes[:32], option_ids)
    figures: dict[str, Any] = {}
    defaults = (engine.batch_size, engine.max_batch_tokens)
    scores, dt = timed(torch, device, lambda: engine.option_logprobs(prompts, options))
    figures["engine_default"] = {"batch_size": defaults[0], "max_batch_tokens": defaults[1],
                                 "seconds": round(dt, 3), "rows_per_s": round(n_rows / dt, 1)}
    engine.batch_size, engine.max_batch_tokens = 16, 8192
    cpu_scores, dt = timed(torch, device, lambda: engine.option_logprobs(prompts, options))
    figures["engine_cpu_sizes"] = {"batch_size": 16, "max_batch_tokens": 8192, "seconds": round(dt, 3),
                                   "rows_per_s": round(n_rows / dt, 1)}
    engine.batch_size, engine.max_batch_tokens = defaults
    if args.profile:
        profile(torch, device, args.profile, lambda: engine.option_logprobs(prompts[:512], options))
    _, dt = timed(torch, device, lambda: plain_forward(engine, suffixes, option_ids))
    flops = 2 * matmul_params(size) * suffix_tokens
    figures["plain_forward_limit"] = {"seconds": round(dt, 3), "rows_per_s": round(n_rows / dt, 1),
                                      "tflop_per_s": round(flops / dt / 1e12, 2)}
    card = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    peak = next((v for k, v in PEAK_BF16.items() if k in card), None)
    if peak:
        figures["plain_forward_limit"]["share_of_peak_bf16"] = round(flops / dt / peak, 3)
    engine_rps = figures["engine_default"]["rows_per_s"]
    ratio = engine_rps / figures["plain_forward_limit"]["rows_per_s"]
    agree = sum(a.index(max(a)) == b.index(max(b)) for a, b in zip(scores, cpu_scores, strict=True))
    hours = {s: round(TARGET_ROWS / (engine_rps * matmul_params(size) / matmul_params(s)) / 3600, 2)
             for s in ("4b", "14b", "32b")} if size == "4b" else {}
    return {
        "date": time.strftime("%Y-%m-%d"), "device": card, "torch": torch.__version__,
        "model": f"Qwen3-{size} shape, random weights", "tokenizer": "Qwen2.5 (packaged GGUF)",
        "prompt": prompt.ref, "options": options, "rows": n_rows, "mean_prompt_tokens": round(n_tokens / n_rows, 1),
        "shared_prefix_tokens": prefix, "mean_suffix_tokens": round(suffix_tokens / n_rows, 1),
        "build_s": round(build_s, 1), **figures, "engine_over_limit": round(ratio, 3),
        "argmax_same_default_vs_cpu_sizes": f"{agree}/{n_rows}",
        "gpu_hours_for_3_01M_rows": hours,
        "gpu_hours_note": "4B measured; 14B and 32B scaled by the weights a token multiplies through" if hours
        else "only a run with --size 4b on a GPU gives these",
    }


def profile(torch: Any, device: str, path: Path, fn: Any) -> None:
    """The engine's top operators on up to 512 rows (where the time goes when it trails the limit)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    path.write_text(prof.key_averages().table(sort_by=key, row_limit=25))


def table(r: dict[str, Any]) -> str:
    lines = [f"{r['model']} on {r['device']}, {r['rows']} rows of {r['prompt']}, "
             f"{r['mean_prompt_tokens']} tokens a row ({r['shared_prefix_tokens']} shared)",
             "| configuration | rows/s |", "|---|---:|"]
    e, c, p = r["engine_default"], r["engine_cpu_sizes"], r["plain_forward_limit"]
    lines.append(f"| engine, default options (batch_size {e['batch_size']}, max_batch_tokens "
                 f"{e['max_batch_tokens']}) | {e['rows_per_s']} |")
    lines.append(f"| engine, CPU sizes (batch_size 16, max_batch_tokens 8192) | {c['rows_per_s']} |")
    share = f", {p['share_of_peak_bf16']:.1%} of peak bf16" if "share_of_peak_bf16" in p else ""
    lines.append(f"| plain batched forward, non-shared tokens only ({p['tflop_per_s']} TFLOP/s{share}) "
                 f"| {p['rows_per_s']} |")
    lines.append(f"engine / limit: {r['engine_over_limit']}")
    if r["gpu_hours_for_3_01M_rows"]:
        lines.append("GPU-hours for 3.01M rows (" + r["gpu_hours_note"] + "): " + ", ".join(
            f"{k.upper()} {v}" for k, v in r["gpu_hours_for_3_01M_rows"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="tiny model on the CPU (proves the script here)")
    ap.add_argument("--size", default="4b", choices=["4b", "14b", "32b"])
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--profile", type=Path, default=None, help="write the engine's top operators here")
    args = ap.parse_args(argv)
    result = run(args)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
