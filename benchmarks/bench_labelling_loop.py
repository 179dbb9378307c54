"""The labelling loop against random labelling at equal label budgets, on crawl-filter's bundled Japanese example
(issue 43 §4).

Rows (all real, docs/examples/build_ja_crawl_sample.py; `everyday` is each question's source: JCommonsenseQA 1,
JSQuAD 0):
  the 400 rows of lake/samples/ja_everyday_labels.jsonl, and the 600 plain crawl rows of
  lake/samples/ja_crawl_sample.jsonl (300 JCommonsenseQA, 300 JSQuAD; not the HTML pages, other languages,
  reposts or near repeats, which the recipe's front half cleans or drops before the judge);
  the recipe's declared split (`held_out: {fraction: 0.2, seed: 0}`, a hash of the id) cuts both: its rows
  (66 labelled + 114 crawl = 180) are the fixed evaluation set that no arm ever labels; the others (334 + 486 =
  820) are the pool the arms label from.
Per seed s (0..seeds-1): a seed set of `seed_labels` pool rows from the labels file (half of each class, drawn
with s); then `rounds` rounds of `step` labels each, chosen
  loop    by the product's export: the round's judge scores the unlabelled pool rows as the run does
          (SupervisedPrefilter.score), and transforms/review/labelling.export_batch picks the batch (the rows
          nearest the threshold, spread over the embedding space) and writes its CSV; an oracle fills `label`
          from the row's source and transforms/review/labelling.import_batch appends it (round, batch) to the
          labels file, as `piqaforge label export` / `label import` do;
  random  uniformly from the unlabelled pool rows (seed s), appended with the same fields.
After every round the judge is refitted with the product's code (transforms/judge/linear.train, the recipe's
judge config: e5-small, views, 5 folds, target recall 0.9), which reports out-of-fold precision and recall on
the labels it has and precision and recall on the 180 held-out rows at its threshold.
The reference: the judge fitted on the whole pool (820 labels). P = its held-out precision - 0.02; an arm
reaches the target at the first budget where held-out precision >= P and held-out recall >= 0.8.

Run: .venv/bin/python benchmarks/bench_labelling_loop.py [--seeds 5 --seed-labels 40 --step 20 --rounds 10]
(prints the table docs/recipes.md carries; writes --json and the --png plot)
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LABELS = ROOT / "lake" / "samples" / "ja_everyday_labels.jsonl"
CRAWL = ROOT / "lake" / "samples" / "ja_crawl_sample.jsonl"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def recipe_judge() -> Any:
    from transforms.flow.recipe import load_recipe
    from transforms.judge.linear import LinearJudge

    recipe = load_recipe("crawl-filter")
    entry = next(e for e in recipe.runs[0].stages if e.stage == "supervised_prefilter")
    return LinearJudge.model_validate(entry.fields["judge"])


def rows_and_split(judge: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pool, evaluation): every row as a labels-file row, cut by the recipe's held-out split."""
    from transforms.judge.labels import LabelledRow

    labelled = [{k: r[k] for k in ("id", "text", "source", "everyday")} | {"url": None} for r in _jsonl(LABELS)]
    crawl = [{"id": r["id"], "text": r["text"], "source": r["source"], "url": r["url"],
              "everyday": int(r["source"] == "jcommonsenseqa")}
             for r in _jsonl(CRAWL)[:600] if r["source"] in ("jcommonsenseqa", "jsquad")]
    pool, evaluation = [], []
    for r in labelled + crawl:
        (evaluation if judge.held_out.holds_out(LabelledRow(id=r["id"], text=r["text"])) else pool).append(r)
    return pool, evaluation


def _write(path: Path, rows: list[dict[str, Any]], mode: str = "w") -> None:
    with path.open(mode, encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def fit(judge: Any, labels: Path, cache: str) -> dict[str, Any]:
    """Refit on the labels file as a run does; the figures the prefilter's report gives."""
    from transforms.judge.linear import checking_rows, embedder_for, threshold_for_recall, train

    config = judge.model_copy(update={"labels": str(labels), "min_labels": None})
    fitted = train(config, cache)
    cv, held = fitted.cv, fitted.cv["held_out"]
    # diagnosis only, never a judge's setting: the ranking's precision where the held-out rows' own scores keep
    # 90% of their positives (a threshold no run can know)
    rows = checking_rows(config)
    truth = np.array([r.value(config.label) for r in rows], dtype=bool)
    scores = fitted.score_texts([r.text for r in rows], embedder_for(config, cache))
    at_r90 = float(truth[scores >= threshold_for_recall(scores, truth, 0.9)].mean())
    return {"labels": cv["seed_rows"], "positives": cv["positives"], "oof_precision": cv["precision"],
            "oof_recall": cv["recall"], "held_precision": held["precision"], "held_recall": held["recall"],
            "held_auc": held["auc"], "held_precision_at_held_r90": at_r90, "oof_auc": cv["auc"], "threshold": fitted.threshold, "held_rows": held["rows"],
            "_fitted": fitted}


def loop_batch(judge: Any, fitted: Any, pool: list[dict[str, Any]], labels: Path, cache: str, folder: Path,
               n: int, round_no: int) -> None:
    """One round of `piqaforge label export` + an oracle's filled CSV + `piqaforge label import`."""
    import pyarrow as pa

    from transforms.judge.gate import SupervisedPrefilter
    from transforms.judge.linear import embedder_for, prepare
    from transforms.review.labelling import export_batch, import_batch

    stage = SupervisedPrefilter(judge=judge.model_copy(update={"labels": str(labels)}), embed_cache_dir=cache)
    embedder = embedder_for(stage.judge, cache)
    table = stage.score(pa.table({"id": [r["id"] for r in pool], "text": [r["text"] for r in pool]}), fitted, embedder)
    rows = [r | {"score": s} for r, s in zip(pool, table.column("prefilter_score").to_pylist(), strict=True)]
    embeddings = embedder.encode([prepare(r["text"], fitted.embed_chars) for r in rows])  # as jobs/labelling.py
    export_batch(rows, threshold=fitted.threshold, embeddings=embeddings, n=n, folder=folder, label=judge.label,
                 labels_path=str(labels), round_no=round_no, run_id="bench")
    truth = {r["id"]: r["everyday"] for r in pool}
    with (folder / "labelling.csv").open(encoding="utf-8") as f:
        batch = list(csv.DictReader(f))
    for r in batch:  # the oracle: the row's source says its label
        r["label"], r["annotator"] = str(truth[r["id"]]), "oracle:source"
    filled = folder / "filled.csv"
    with filled.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(batch[0]))
        writer.writeheader()
        writer.writerows(batch)
    import_batch(folder, [str(filled)], now="2026-11-30T00:00:00+00:00")


def run_arm(arm: str, judge: Any, pool: list[dict[str, Any]], evaluation: list[dict[str, Any]], seed: int,
            args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    from_file = [r for r in pool if r["id"].startswith(("everyday-", "wiki-"))]
    pos = [r for r in from_file if r["everyday"]]
    neg = [r for r in from_file if not r["everyday"]]
    half = args.seed_labels // 2
    seeds = ([pos[i] for i in rng.choice(len(pos), half, replace=False)]
             + [neg[i] for i in rng.choice(len(neg), args.seed_labels - half, replace=False)])
    labels = work / f"{arm}-{seed}.jsonl"
    _write(labels, evaluation + seeds)
    picker = np.random.default_rng(1000 + seed)
    curve = []
    for k in range(args.rounds + 1):
        figures = fit(judge, labels, args.cache)
        fitted = figures.pop("_fitted")
        curve.append({"arm": arm, "seed": seed, "round": k} | figures)
        if k == args.rounds:
            break
        done = {json.loads(x)["id"] for x in labels.read_text(encoding="utf-8").splitlines()}
        if arm == "loop":
            loop_batch(judge, fitted, pool, labels, args.cache, work / f"{arm}-{seed}-round{k + 1}", args.step,
                       k + 1)
        else:
            left = [r for r in pool if r["id"] not in done]
            picked = [left[i] for i in picker.choice(len(left), args.step, replace=False)]
            _write(labels, [r | {"annotator": "oracle:source", "round": k + 1, "batch": f"random-{k + 1}"}
                            for r in picked], mode="a")
    return curve


def reached(curve: list[dict[str, Any]], precision: float, recall: float = 0.8, stays: bool = False) -> int | None:
    """The fewest labels at which held-out precision >= `precision` and recall >= `recall` (with `stays`: and at
    every larger budget of the curve too); None when never."""
    ok = [c["held_precision"] >= precision and c["held_recall"] >= recall for c in curve]
    return next((c["labels"] for i, c in enumerate(curve) if (all(ok[i:]) if stays else ok[i])), None)


def summary(points: list[dict[str, Any]], arm: str, k: int) -> dict[str, Any]:
    at = [p for p in points if p["arm"] == arm and p["round"] == k]
    out: dict[str, Any] = {"labels": at[0]["labels"]}
    for key in ("oof_precision", "oof_recall", "held_precision", "held_recall", "held_auc", "held_precision_at_held_r90",
                "threshold"):
        v = np.array([p[key] for p in at])
        out[key] = (float(v.mean()), float(v.min()), float(v.max()))
    return out


def plot(points: list[dict[str, Any]], rounds: int, full: dict[str, Any], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for ax, which in zip(axes, ("held", "oof"), strict=True):
        for arm, colour in (("loop", "#2f6db5"), ("random", "#c8553d")):
            rows = [summary(points, arm, k) for k in range(rounds + 1)]
            x = [r["labels"] for r in rows]
            for key, style in ((f"{which}_precision", "-"), (f"{which}_recall", ":")):
                mean = [r[key][0] for r in rows]
                ax.plot(x, mean, style, color=colour, label=f"{arm} {key.split('_')[1]}")
                ax.fill_between(x, [r[key][1] for r in rows], [r[key][2] for r in rows], color=colour, alpha=0.12)
        if which == "held":
            ax.axhline(target, color="#444", lw=0.8, ls="--", label=f"P = {target:.3f}")
            ax.axhline(0.8, color="#999", lw=0.8, ls="-.", label="recall 0.8")
        ax.set_title({"held": f"held-out ({full['held_rows']} rows, never labelled)",
                      "oof": "out of fold (on the labels each arm has)"}[which], fontsize=9)
        ax.set_xlabel("labels used")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("solid: precision, dotted: recall")
    axes[0].set_ylim(0.6, 1.01)
    axes[1].set_ylim(0.2, 1.01)
    fig.suptitle("crawl-filter's judge: labelling loop vs random labels (mean, band: min-max over seeds)",
                 fontsize=10)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seed-labels", type=int, default=40)
    p.add_argument("--step", type=int, default=20)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--cache", default=str(ROOT / "lake" / "cache" / "embeddings"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "labelling_loop.json"))
    p.add_argument("--png", default=str(ROOT / "docs" / "figures" / "labelling_loop_ja.png"))
    args = p.parse_args(argv)
    judge = recipe_judge()
    pool, evaluation = rows_and_split(judge)
    print(f"pool {len(pool)} rows ({sum(r['everyday'] for r in pool)} everyday), evaluation {len(evaluation)} rows "
          f"({sum(r['everyday'] for r in evaluation)} everyday); budget {args.seed_labels} + {args.rounds} x "
          f"{args.step} = {args.seed_labels + args.rounds * args.step}", flush=True)
    started = time.time()
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "whole.jsonl"
        _write(whole, evaluation + pool)
        full = fit(judge, whole, args.cache)
        full.pop("_fitted")
        for seed in range(args.seeds):
            for arm in ("loop", "random"):
                points += run_arm(arm, judge, pool, evaluation, seed, args, Path(tmp))
            print(f"seed {seed} done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    target = round(full["held_precision"] - 0.02, 3)
    print(f"\nwhole pool ({full['labels']} labels): held-out precision {full['held_precision']:.3f}, recall "
          f"{full['held_recall']:.3f}; out of fold precision {full['oof_precision']:.3f}, recall "
          f"{full['oof_recall']:.3f}. Target: held-out precision >= P = {target:.3f} at recall >= 0.8\n")
    print("| labels | loop held-out P | random held-out P | loop held-out R | random held-out R "
          "| loop out-of-fold P | random out-of-fold P | loop held-out AUC | random held-out AUC "
          "| loop threshold | random threshold | loop held-out P at held-out R 0.9 | random (same) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cell(v: tuple[float, float, float]) -> str:
        return f"{v[0]:.3f} ({v[1]:.2f}–{v[2]:.2f})"

    for k in range(args.rounds + 1):
        lo, ra = summary(points, "loop", k), summary(points, "random", k)
        print(f"| {lo['labels']} | {cell(lo['held_precision'])} | {cell(ra['held_precision'])} | "
              f"{cell(lo['held_recall'])} | {cell(ra['held_recall'])} | {cell(lo['oof_precision'])} | "
              f"{cell(ra['oof_precision'])} | {cell(lo['held_auc'])} | {cell(ra['held_auc'])} | "
              f"{cell(lo['threshold'])} | {cell(ra['threshold'])} | {cell(lo['held_precision_at_held_r90'])} | "
              f"{cell(ra['held_precision_at_held_r90'])} |")
    needed = {f"{arm} {how}": [reached([q for q in points if q["arm"] == arm and q["seed"] == s], target,
                                       stays=how == "and stays")
                               for s in range(args.seeds)] for arm in ("loop", "random") for how in ("first", "and stays")}
    print()
    for what, got in needed.items():
        hit = [g for g in got if g is not None]
        print(f"{what}: held-out precision >= {target:.3f} at recall >= 0.8 in {len(hit)} of {args.seeds} seeds; "
              f"labels per seed: {', '.join('-' if g is None else str(g) for g in got)}"
              + (f" (median {int(np.median(hit))})" if hit else ""))
    plot(points, args.rounds, full, target, Path(args.png))
    print(f"\nplot: {args.png}; {time.time() - started:.0f} s on {platform.processor() or platform.machine()}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"args": vars(args), "pool": len(pool), "evaluation": len(evaluation),
                                           "whole_pool": full, "target_precision": target, "needed": needed,
                                           "points": points}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
