"""Would a candidate judge raise the Ko-PIQA cascade's precision? Measured on the seed labels only.

    .venv/bin/python benchmarks/judge_candidates.py llm   [--prompt classify_piqa/ko_intent] [--min-oof 0.38]
    .venv/bin/python benchmarks/judge_candidates.py extra [--data ../shared/data]

Both start from `e5-strict` (the job's binding supervised member, jobs/recipes/ko-piqa.yaml) and its
out-of-fold scores on the even-docId KiN seeds (5 folds), so every figure is for questions the model
scoring them did not learn. The held-out (odd-docId) labels are never read.

* `llm`: an LLM member behind `e5-strict`. Scores P(yes) with the local Qwen2.5-Coder-1.5B (llama.cpp,
  any engine config through `--engine`) on every seed whose out-of-fold `e5-strict` score is at least
  `--min-oof` (the cut at recall 1.0 is 0.38), then prints the LLM's AUC on those rows and the cascade's
  recall and precision for a grid of (e5-strict cut, LLM threshold). Answers are cached in `--cache`.
* `extra`: out-of-domain labelled rows added to `e5-strict`'s training (English PIQA goals as positives,
  BLEnD's Korean everyday-knowledge questions as negatives), 5 folds x 3 fold seeds, test folds holding
  KiN seeds only: precision at recall 0.8 / 0.9 and AUC, mean and spread over the fold seeds.
Results and what was decided: docs/judges.md, round 4.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.flow.recipe import load_recipe  # noqa: E402
from transforms.judge.linear import (  # noqa: E402
    LinearJudge,
    embedder_for,
    prepare,
    threshold_for_recall,
    train,
    training_rows,
)


def strict_judge() -> LinearJudge:
    crawl = load_recipe("ko-piqa").run("crawl")
    for member in next(s for s in crawl.stages if s.stage == "ensemble").fields["classifiers"]:
        if member.get("name") == "e5-strict":
            return LinearJudge.model_validate(member["judge"])
    raise SystemExit("jobs/recipes/ko-piqa.yaml has no e5-strict member")


def run_llm(args: argparse.Namespace) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    from transforms.llm.base import EngineConfig, build_engine
    from transforms.llm.prompts import load_prompt

    judge = strict_judge()
    rows = training_rows(judge)
    fitted = train(judge, cache_dir=ROOT / "lake" / "cache" / "embeddings")
    oof, y = np.asarray(fitted.oof_scores), np.asarray(fitted.oof_labels, dtype=bool)
    near = np.flatnonzero(oof >= args.min_oof)
    prompt = load_prompt(args.prompt)
    cache_path = Path(args.cache)
    cache: dict[str, float] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    key = f"{args.prompt}@{prompt.version}|{args.engine}"
    todo = [i for i in near if f"{key}|{rows[i].id}" not in cache]
    print(f"{len(near)} seed KiN questions with out-of-fold e5-strict >= {args.min_oof} "
          f"({int(y[near].sum())} physical); {len(todo)} to score with {args.engine}", flush=True)
    if todo:
        engine = build_engine(EngineConfig.model_validate(json.loads(args.engine)))
        engine.setup()
        t0 = time.perf_counter()
        pos, neg = prompt.options[0], prompt.options[1]
        try:
            for start in range(0, len(todo), 8):
                chunk = todo[start:start + 8]
                texts = [engine.render_chat(prompt.render(text=rows[i].text).messages) for i in chunk]
                for i, (lp_yes, lp_no) in zip(chunk, engine.option_logprobs(texts, [pos, neg]), strict=True):
                    cache[f"{key}|{rows[i].id}"] = 1.0 / (1.0 + math.exp(lp_no - lp_yes))
                cache_path.parent.mkdir(parents=True, exist_ok=True)
                cache_path.write_text(json.dumps(cache))
                done = start + len(chunk)
                print(f"  {done}/{len(todo)} scored, {(time.perf_counter() - t0) / done:.1f} s a question", flush=True)
        finally:
            engine.close()
    llm = np.array([cache[f"{key}|{rows[i].id}"] for i in near])
    e5, yy = oof[near], y[near]
    report: dict[str, Any] = {"rows": len(near), "positives_total": int(y.sum()),
                              "auc_near": float(roc_auc_score(yy, llm))}
    strict_cut = fitted.threshold
    kept = e5 >= strict_cut
    report["auc_among_e5_strict_kept"] = float(roc_auc_score(yy[kept], llm[kept])) if 0 < yy[kept].sum() < kept.sum() else None
    print(f"LLM AUC on these rows {report['auc_near']:.3f}; among e5-strict's keeps "
          f"{report['auc_among_e5_strict_kept']}")
    grid = []
    print("e5-strict cut (its OOF recall) | LLM >= | kept | physical | recall | precision")
    for rec in (0.8, 0.85, 0.9, 1.0):
        cut = threshold_for_recall(oof, y, rec)
        for t in (0.0, 0.3, 0.5, 0.7):
            m = (e5 >= cut) & (llm >= t)
            r = float(yy[m].sum() / y.sum())
            p = float(yy[m].mean()) if m.any() else float("nan")
            grid.append({"e5_recall": rec, "e5_cut": cut, "llm_threshold": t, "kept": int(m.sum()),
                         "physical": int(yy[m].sum()), "recall": r, "precision": p})
            print(f"{cut:.3f} ({rec:.2f}) | {t:.1f} | {m.sum()} | {yy[m].sum()} | {r:.3f} | {p:.3f}")
    best = max((g for g in grid if g["recall"] >= 0.8), key=lambda g: g["precision"])
    print(f"best precision at cascade recall >= 0.8: {best['precision']:.3f} "
          f"(e5-strict alone at its cut: {grid[0]['precision']:.3f})")
    report["grid"] = grid
    return report


def run_extra(args: argparse.Namespace) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    data = Path(args.data)
    piqa_file = data / "piqa_en" / "valid.jsonl"
    blend_file = data / "ko_blend_everyday_culture" / "South_Korea_annotations.jsonl"
    for f in (piqa_file, blend_file):
        if not f.exists():
            raise SystemExit(f"{f} not found: point --data at the shared data folder (see its MANIFEST.md)")
    judge = strict_judge()
    rows = training_rows(judge)
    embedder = embedder_for(judge, cache_dir=ROOT / "lake" / "cache" / "embeddings")
    X = embedder.encode([prepare(r.text, judge.embed_chars) for r in rows])
    y = np.array([r.physical for r in rows], dtype=bool)
    rng = random.Random(0)
    piqa = rng.sample([json.loads(line)["goal"] for line in piqa_file.open(encoding="utf-8")], args.n)
    blend = rng.sample([json.loads(line)["question"] for line in blend_file.open(encoding="utf-8")], args.n)
    XP = embedder.encode([prepare(t, judge.embed_chars) for t in piqa])
    XB = embedder.encode([prepare(t, judge.embed_chars) for t in blend])

    def cv(extra: np.ndarray | None, extra_y: np.ndarray | None, weight: float) -> dict[str, Any]:
        per_seed = []
        for seed in range(3):
            oof = np.zeros(len(y))
            for tr, te in StratifiedKFold(5, shuffle=True, random_state=seed).split(X, y):
                Xt, yt, w = X[tr], y[tr], np.ones(len(tr))
                if extra is not None and extra_y is not None:
                    Xt, yt = np.vstack([Xt, extra]), np.concatenate([yt, extra_y])
                    w = np.concatenate([w, np.full(len(extra_y), weight)])
                model = LogisticRegression(C=judge.C, class_weight="balanced", max_iter=5000)
                oof[te] = model.fit(Xt, yt, sample_weight=w).predict_proba(X[te])[:, 1]
            prec = [float(y[oof >= threshold_for_recall(oof, y, r)].mean()) for r in (0.8, 0.9)]
            per_seed.append(prec + [float(roc_auc_score(y, oof))])
        a = np.array(per_seed)
        return {"p_at_0.8": a[:, 0].mean(), "p_at_0.9": a[:, 1].mean(), "auc": a[:, 2].mean(),
                "spread": a.std(0).tolist()}

    variants: list[tuple[str, np.ndarray | None, np.ndarray | None, float]] = [("KiN seeds only", None, None, 1.0)]
    for w in (0.3, 1.0):
        variants += [(f"+{args.n} PIQA goals as positives, weight {w}", XP, np.ones(len(XP), dtype=bool), w),
                     (f"+{args.n} BLEnD questions as negatives, weight {w}", XB, np.zeros(len(XB), dtype=bool), w),
                     (f"+both, weight {w}", np.vstack([XP, XB]),
                      np.r_[np.ones(len(XP), dtype=bool), np.zeros(len(XB), dtype=bool)], w)]
    report = {}
    print("training rows | KiN precision at recall 0.8 | at 0.9 | AUC (spread over 3 fold seeds)")
    for name, ex, ey, w in variants:
        r = cv(ex, ey, w)
        report[name] = r
        s = r["spread"]
        print(f"{name} | {r['p_at_0.8']:.3f} ± {s[0]:.3f} | {r['p_at_0.9']:.3f} ± {s[1]:.3f} | {r['auc']:.3f} ± {s[2]:.3f}")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="part", required=True)
    llm = sub.add_parser("llm", help="an LLM member behind e5-strict, scored on the seeds near its cut")
    llm.add_argument("--prompt", default="classify_piqa/ko_intent")
    llm.add_argument("--engine", default=json.dumps({"backend": "llamacpp", "model": "qwen2.5-coder-1.5b-instruct",
                                                     "options": {"threads": 2}}))
    llm.add_argument("--min-oof", type=float, default=0.38)
    llm.add_argument("--cache", default=str(ROOT / "benchmarks" / "results" / "judge_candidates_llm.json"))
    extra = sub.add_parser("extra", help="out-of-domain labelled rows added to e5-strict's training")
    extra.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    extra.add_argument("--n", type=int, default=400)
    for p in (llm, extra):
        p.add_argument("--json", help="write the report here")
    args = ap.parse_args()
    report = run_llm(args) if args.part == "llm" else run_extra(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
