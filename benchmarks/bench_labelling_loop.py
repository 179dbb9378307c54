"""The labelling loop against random labelling at equal label budgets, on crawl-filter's bundled Japanese example
and on a Korean crawl built from ../shared/data.

Crawls (all real text; `everyday` is each question's source, the label the recipe's judge learns):
  ja  the 400 rows of lake/samples/ja_everyday_labels.jsonl and the 600 plain crawl rows of
      lake/samples/ja_crawl_sample.jsonl (JCommonsenseQA 1, JSQuAD 0; docs/examples/build_ja_crawl_sample.py);
  ko  1,700 Korean questions (`ko_rows`): BLEnD's 500 everyday-culture questions about South Korea (their
      answer-format notes and the leading country name cut off, so no keyword gives them away), of which the
      197 on food and on holidays and leisure are 1 and the 303 on sport, school, work and family are 0, with
      900 3i4k questions and commands to an assistant and 300 songys chit-chat lines, 0: one row in nine
      positive, where ja is half, and the hard negatives ask in the positives' own style.
The recipe's declared split (`held_out: {fraction: 0.2, seed: 0}`, a hash of the id) cuts each crawl: its rows
are the fixed evaluation set, written into every arm's labels file as round-0 rows, so the product's own split
holds them out (imported rows, which carry a round, never join it: `judge.imported_rows: train`); the others are
the pool the arms label from.
Per seed s (0..seeds-1): a seed set of `seed_labels` pool rows (half of each class, drawn with s; for ja from the
labels file); then `rounds` rounds of `step` labels each, chosen
  loop    by the product's export: the round's judge scores the pool as a run does (SupervisedPrefilter.score)
          and transforms/review/labelling.export_batch picks the batch (its random share drawn uniformly, the rest
          nearest the threshold, spread over the embedding space) and writes its CSV; an oracle fills `label`
          from the row's source and transforms/review/labelling.import_batch appends it (round, batch, share), as
          `piqaforge label export` / `label import` do;
  random  uniformly from the unlabelled pool rows (seed s), appended with `share: random`.
After every round the judge is refitted with the product's code (transforms/judge/linear.train, the recipe's
judge config), which reports precision and recall on the held-out rows at its threshold; for the loop, the kept
set's precision estimate from the random share (linear.kept_estimate, weighted to the pool's scores as a run weights
it to its crawl's) is compared with the truth: the precision of the pool rows the run keeps (final judge, its
threshold, labelled rows included).
The reference: the judge fitted on the whole pool. P = its held-out precision - 0.02; an arm reaches the target
at the first budget where held-out precision >= P and held-out recall >= 0.8.

Run: .venv/bin/python benchmarks/bench_labelling_loop.py --crawl ja   (--seeds 10 --seed-labels 40 --step 20
--rounds 10; --crawl ko --step 40 --rounds 5); writes benchmarks/results/labelling_loop_<crawl>.json
(transforms/core/results.py) and the plot docs/figures/labelling_loop_<crawl>.png
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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
SHARED = ROOT.parent / "shared" / "data"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def recipe_judge() -> Any:
    from transforms.flow.recipe import load_recipe
    from transforms.judge.linear import LinearJudge

    recipe = load_recipe("crawl-filter")
    entry = next(e for e in recipe.runs[0].stages if e.stage == "supervised_prefilter")
    return LinearJudge.model_validate(entry.fields["judge"])


def ja_rows() -> list[dict[str, Any]]:
    """The bundled example: its labels file's rows and its plain crawl rows."""
    labelled = [{k: r[k] for k in ("id", "text", "source", "everyday")} | {"url": None, "seedable": True}
                for r in _jsonl(LABELS)]
    crawl = [{"id": r["id"], "text": r["text"], "source": r["source"], "url": r["url"],
              "everyday": int(r["source"] == "jcommonsenseqa"), "seedable": False}
             for r in _jsonl(CRAWL)[:600] if r["source"] in ("jcommonsenseqa", "jsquad")]
    return labelled + crawl


# BLEnD's topics whose questions are the Korean crawl's positives: what people eat, celebrate and do for fun
FOOD_AND_LEISURE = ("Food", "Holidays/Celebration/Leisure")


def ko_rows() -> list[dict[str, Any]]:
    """A Korean crawl from ../shared/data: BLEnD's everyday-culture questions on food and leisure (1) among its
    questions on sport, school, work and family, questions and commands to an assistant (3i4k) and chit-chat
    (songys), all 0; about one row in eight positive; the same rows every time."""
    import re

    rng = np.random.default_rng(0)
    blend = _jsonl(SHARED / "ko_blend_everyday_culture" / "South_Korea_annotations.jsonl")
    def plain(q: str) -> str:  # without its answer-format note and the country it names, so no keyword tells
        q = re.sub(r"\s*\((?=[^)]*(아라비아|형식|숫자|기재|제공)).*$", "", q)
        return re.sub(r"^(대한민국|한국)(의|에서는|에서|에|인들은|인들이|인|사람들은|사람들이|사람들의)?\s*", "", q).strip()

    rows = [{"id": f"blend-{r['id']}", "text": plain(r["question"]), "source": f"blend:{r['topic']}",
             "everyday": int(r["topic"] in FOOD_AND_LEISURE)} for r in blend]
    lines = [x.split("\t", 1) for x in (SHARED / "ko_3i4k" / "fci.txt").read_text(encoding="utf-8").splitlines()]
    for kind, n in (("2", 700), ("3", 200)):
        texts = sorted({t.strip() for k, t in lines if k == kind and len(t.strip()) >= 8})
        rows += [{"id": f"3i4k-{kind}-{i}", "text": texts[i], "source": "3i4k", "everyday": 0}
                 for i in sorted(rng.choice(len(texts), n, replace=False))]
    with (SHARED / "ko_chatbot_songys" / "ChatbotData.csv").open(encoding="utf-8") as f:
        chat = sorted({r["Q"].strip() for r in csv.DictReader(f) if len(r["Q"].strip()) >= 8})
    rows += [{"id": f"chat-{i}", "text": chat[i], "source": "chatbot_songys", "everyday": 0}
             for i in sorted(rng.choice(len(chat), 300, replace=False))]
    return [r | {"url": None, "seedable": True} for r in rows]


def rows_and_split(judge: Any, crawl: str = "ja") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pool, evaluation): every row as a labels-file row, cut by the recipe's held-out split."""
    from transforms.judge.labels import LabelledRow

    pool, evaluation = [], []
    for r in ja_rows() if crawl == "ja" else ko_rows():
        (evaluation if judge.held_out.holds_out(LabelledRow(id=r["id"], text=r["text"])) else pool).append(r)
    return pool, evaluation


def _write(path: Path, rows: list[dict[str, Any]], mode: str = "w") -> None:
    with path.open(mode, encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def fit(judge: Any, labels: Path, cache: str, pool: list[dict[str, Any]]) -> dict[str, Any]:
    """Refit on the labels file as a run does, and score the pool as the run scores the crawl; the figures the
    prefilter's report gives, the kept-set estimate and its truth (the pool rows kept, by their source)."""
    import pyarrow as pa

    from transforms.judge.gate import SupervisedPrefilter
    from transforms.judge.linear import (
        checking_rows,
        embedder_for,
        kept_estimate,
        threshold_for_recall,
        train,
    )

    config = judge.model_copy(update={"labels": str(labels), "min_labels": None})
    fitted = train(config, cache)
    cv, held = fitted.cv, fitted.cv["held_out"]
    stage = SupervisedPrefilter(judge=config, embed_cache_dir=cache)
    table = stage.score(pa.table({"id": [r["id"] for r in pool], "text": [r["text"] for r in pool]}), fitted)
    scores = np.array(table.column("prefilter_score").to_pylist())
    # the ranking alone, whatever the threshold: held-out precision where the held-out rows' own scores keep 80% of
    # their positives (a threshold no run can know, so never a judge's setting)
    checking = checking_rows(config)
    held_truth = np.array([r.value(config.label) for r in checking], dtype=bool)
    held_scores = fitted.score_texts([r.text for r in checking], embedder_for(config, cache))
    at_r80 = float(held_truth[held_scores >= threshold_for_recall(held_scores, held_truth, 0.8)].mean())
    # the truth the estimate is for: the rows the run keeps (the pool rows the final judge scores at or above its
    # threshold, labelled ones included: a run keeps them too), as the run's report estimates it from its scores
    done = {json.loads(x)["id"] for x in labels.read_text(encoding="utf-8").splitlines()}
    unlabelled = np.array([r["id"] not in done for r in pool])
    truth = np.array([r["everyday"] for r in pool], dtype=bool)
    kept = scores >= fitted.threshold
    estimate = kept_estimate(cv.get("samples") or {}, fitted.threshold, scores)
    true_p = float(truth[kept].mean()) if kept.any() else float("nan")
    unlabelled_p = float(truth[kept & unlabelled].mean()) if (kept & unlabelled).any() else float("nan")
    interval = (estimate or {}).get("precision_interval")
    return {"labels": cv["seed_rows"], "positives": cv["positives"], "oof_precision": cv["precision"],
            "oof_recall": cv["recall"], "held_precision": held["precision"], "held_recall": held["recall"],
            "held_auc": held["auc"], "held_precision_at_r80": at_r80, "oof_auc": cv["auc"], "threshold": fitted.threshold, "held_rows": held["rows"],
            "threshold_rows": cv.get("threshold_rows"), "kept_true_precision": true_p,
            "kept_true_precision_unlabelled": unlabelled_p,
            "kept_true_recall": float(kept[truth].mean()) if truth.any() else float("nan"), "kept_estimate": estimate,
            "kept_covered": None if not interval else bool(interval[0] <= true_p <= interval[1]),
            "_fitted": fitted, "_scores": scores}


def loop_batch(judge: Any, fitted: Any, pool: list[dict[str, Any]], scores: np.ndarray, labels: Path, cache: str,
               folder: Path, n: int, round_no: int, random_share: float, run_id: str) -> None:
    """One round of `piqaforge label export` + an oracle's filled CSV + `piqaforge label import`."""
    from transforms.judge.linear import embedder_for, prepare
    from transforms.review.labelling import export_batch, import_batch

    embedder = embedder_for(judge.model_copy(update={"labels": str(labels)}), cache)
    rows = [r | {"score": float(s)} for r, s in zip(pool, scores, strict=True)]
    embeddings = embedder.encode([prepare(r["text"], fitted.embed_chars) for r in rows])  # as jobs/labelling.py
    export_batch(rows, threshold=fitted.threshold, embeddings=embeddings, n=n, folder=folder, label=judge.label,
                 labels_path=str(labels), round_no=round_no, run_id=run_id, random_share=random_share)
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
    # random: a team that labels a random sample and trains on all of it; loop: the recipe's judge as it is (its
    # random share trains too unless --random-rows calibrate)
    judge = judge.model_copy(update={"random_rows": "train" if arm == "random" else args.random_rows,
                                     "threshold_on": "representative" if arm == "random" else args.threshold_on})
    rng = np.random.default_rng(seed)
    from_file = [r for r in pool if r["seedable"]]
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
        figures = fit(judge, labels, args.cache, pool)
        fitted, scores = figures.pop("_fitted"), figures.pop("_scores")
        curve.append({"arm": arm, "seed": seed, "round": k} | figures)
        if k == args.rounds:
            break
        done = {json.loads(x)["id"] for x in labels.read_text(encoding="utf-8").splitlines()}
        if arm == "loop":
            loop_batch(judge, fitted, pool, scores, labels, args.cache, work / f"{arm}-{seed}-round{k + 1}",
                       args.step, k + 1, args.random_share, f"bench-{seed}")
        else:
            left = [r for r in pool if r["id"] not in done]
            picked = [left[i] for i in picker.choice(len(left), args.step, replace=False)]
            _write(labels, [r | {"annotator": "oracle:source", "round": k + 1, "batch": f"random-{k + 1}",
                                 "share": "random"} for r in picked], mode="a")
    return curve


def reached(curve: list[dict[str, Any]], precision: float, recall: float = 0.8, stays: bool = False) -> int | None:
    """The fewest labels at which held-out precision >= `precision` and recall >= `recall` (with `stays`: and at
    every larger budget of the curve too); None when never."""
    ok = [c["held_precision"] >= precision and c["held_recall"] >= recall for c in curve]
    return next((c["labels"] for i, c in enumerate(curve) if (all(ok[i:]) if stays else ok[i])), None)


def summary(points: list[dict[str, Any]], arm: str, k: int) -> dict[str, Any]:
    at = [p for p in points if p["arm"] == arm and p["round"] == k]
    out: dict[str, Any] = {"labels": at[0]["labels"]}
    for key in ("oof_precision", "oof_recall", "held_precision", "held_recall", "held_auc", "threshold",
                "kept_true_precision", "held_precision_at_r80"):
        v = np.array([p[key] for p in at])
        out[key] = (float(v.mean()), float(v.min()), float(v.max()))
    return out


def paired_margins(points: list[dict[str, Any]], k: int, seeds: int) -> np.ndarray:
    """Per seed, round k: the loop's held-out precision minus random's (both arms start from the seed's labels)."""
    at = {(p["arm"], p["seed"]): p["held_precision"] for p in points if p["round"] == k}
    return np.array([at[("loop", s)] - at[("random", s)] for s in range(seeds)])


def plot(points: list[dict[str, Any]], rounds: int, target: float, crawl: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4), dpi=110)
    for arm, colour in (("loop", "#2f6db5"), ("random", "#c8553d")):
        rows = [summary(points, arm, k) for k in range(rounds + 1)]
        x = [r["labels"] for r in rows]
        for key, style in (("held_precision", "-"), ("held_recall", ":")):
            ax.plot(x, [r[key][0] for r in rows], style, color=colour, label=f"{arm} {key.split('_')[1]}")
            ax.fill_between(x, [r[key][1] for r in rows], [r[key][2] for r in rows], color=colour, alpha=0.12)
    ax.axhline(target, color="#444", lw=0.8, ls="--", label=f"P = {target:.3f}")
    ax.axhline(0.8, color="#999", lw=0.8, ls="-.", label="recall 0.8")
    ax.set_xlabel("labels used")
    ax.set_ylabel("held out: precision (solid), recall (dotted)")
    ax.set_ylim(0.5, 1.01)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"crawl-filter's judge on the {crawl} crawl: labelling loop vs random labels\n"
                 "(mean; band: min-max over seeds)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)


def result_figures(points: list[dict[str, Any]], rounds: int, seeds: int, full: dict[str, Any], target: float,
                   crawl: str) -> dict[str, Any]:
    """What the docs quote: per round, each arm's mean held-out precision and recall, and the loop's margin; the
    worst margin; the kept-set estimate's coverage."""
    from transforms.core.results import figure

    out: dict[str, Any] = {}
    margins = []
    for k in range(rounds + 1):
        lo, ra = summary(points, "loop", k), summary(points, "random", k)
        out[f"labels_r{k}"] = figure(lo["labels"], "labels", f"labels used after round {k} ({crawl} crawl)")
        for arm, got in (("loop", lo), ("random", ra)):
            for key in ("held_precision", "held_recall"):
                out[f"{arm}_{key}_r{k}"] = figure(round(got[key][0], 3), key.split("_")[1],
                                                  f"{arm} arm, round {k}: mean held-out {key.split('_')[1]} over "
                                                  f"{seeds} seeds at the judge's own threshold ({crawl} crawl)")
            out[f"{arm}_ranking_precision_r{k}"] = figure(
                round(got["held_precision_at_r80"][0], 3), "precision",
                f"{arm} arm, round {k}: mean held-out precision where the held-out rows' own scores keep 80% of "
                f"their positives (the ranking, whatever the threshold; {crawl} crawl)")
        margins.append(lo["held_precision"][0] - ra["held_precision"][0])
        out[f"margin_r{k}"] = figure(round(margins[-1], 3), "precision",
                                     f"loop minus random mean held-out precision, round {k} ({crawl} crawl)")
        paired = paired_margins(points, k, seeds)
        out[f"margin_se_r{k}"] = figure(round(float(paired.std(ddof=1) / np.sqrt(len(paired))), 3), "precision",
                                        f"standard error of the mean over seeds of the loop minus random held-out "
                                        f"precision (paired by seed), round {k} ({crawl} crawl)")
    ranked = [summary(points, "loop", k)["held_precision_at_r80"][0] - summary(points, "random", k)[
        "held_precision_at_r80"][0] for k in range(1, rounds + 1)]  # round 0: the same seed labels in both arms
    out["worst_ranking_margin"] = figure(round(min(ranked), 3), "precision", "the smallest loop minus random mean "
                                         f"held-out precision at held-out recall 0.8 over rounds 1 and on ({crawl} crawl)")
    for arm in ("loop", "random"):
        got = [reached([q for q in points if q["arm"] == arm and q["seed"] == s], target, stays=True)
               for s in range(seeds)]
        hit = [g for g in got if g is not None]
        out[f"{arm}_seeds_at_target"] = figure(len(hit), "seeds", f"{arm} arm: seeds whose held-out precision "
                                               f"reaches the target at recall >= 0.8 and stays ({crawl} crawl)")
        out[f"{arm}_labels_to_target"] = figure(int(np.median(hit)) if hit else "never", "labels",
                                                f"{arm} arm: median labels from which held-out precision stays at "
                                                f"or above the target at recall >= 0.8, over those seeds ({crawl})")
    out["worst_margin"] = figure(round(min(margins[1:]), 3), "precision", "the smallest loop minus random mean "
                                 f"held-out precision over rounds 1 and on ({crawl} crawl)")
    worst = 1 + int(np.argmin(margins[1:]))
    out["worst_margin_round"] = figure(worst, "round", f"the round of the worst margin ({crawl} crawl)")
    out["worst_margin_se"] = out[f"margin_se_r{worst}"]
    every = np.concatenate([paired_margins(points, k, seeds) for k in range(1, rounds + 1)])
    out["mean_margin"] = figure(round(float(every.mean()), 3), "precision", "loop minus random held-out precision, "
                                f"mean over every seed and every round from 1 ({crawl} crawl)")
    covered = [p["kept_covered"] for p in points if p["arm"] == "loop" and p["kept_covered"] is not None]
    out["kept_coverage"] = figure(round(sum(covered) / max(len(covered), 1), 3), "share",
                                  "share of the loop's (seed, round) fits whose 95% interval for the kept set's "
                                  f"precision, from the batches' random share, holds the truth ({crawl} crawl)")
    for k in range(1, rounds + 1):  # per budget: round 0 has no random share
        at = [p for p in points if p["arm"] == "loop" and p["round"] == k and p["kept_covered"] is not None]
        out[f"kept_covered_r{k}"] = figure(sum(p["kept_covered"] for p in at), "seeds", "seeds whose 95% interval "
                                           f"for the kept set's precision after round {k} holds the truth ({crawl})")
        out[f"kept_estimate_r{k}"] = figure(round(float(np.mean([p["kept_estimate"]["precision"] for p in at])), 3)
                                            if at else None, "precision", f"round {k}: the mean estimate of the "
                                            f"kept set's precision ({crawl} crawl)")
        out[f"kept_truth_r{k}"] = figure(round(float(np.mean([p["kept_true_precision"] for p in at])), 3)
                                         if at else None, "precision", f"round {k}: the mean true precision of the "
                                         f"rows the run keeps ({crawl} crawl)")
    last = [p["kept_covered"] for p in points if p["arm"] == "loop" and p["round"] == rounds]
    out["kept_coverage_last"] = figure(sum(bool(c) for c in last), "seeds", "seeds whose 95% interval for the kept "
                                       f"set's precision after the last round holds the truth ({crawl} crawl)")
    out["kept_estimates"] = figure(len(covered), "fits", "loop fits with a kept-set precision estimate")
    out["whole_pool_held_precision"] = figure(round(full["held_precision"], 3), "precision",
                                              f"held-out precision of the judge fitted on the whole pool ({crawl})")
    out["target_precision"] = figure(target, "precision", "the target: whole-pool held-out precision - 0.02")
    out["pool_rows"] = figure(full["labels"], "rows", f"rows of the {crawl} pool (the crawl the arms label from)")
    out["held_rows"] = figure(full["held_rows"], "rows", f"held-out rows of the {crawl} crawl (the recipe's split)")
    out["seeds"] = figure(seeds, "seeds", "seeds per arm")
    return out


def doc_table(crawl: str, rounds: int) -> str:
    """The markdown table the docs carry, each cell a marker rendered from the results file."""
    name = f"labelling_loop_{crawl}"
    lines = ["| labels | held-out precision: loop | random | held-out recall: loop | random "
             "| ranking's precision: loop | random |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for k in range(rounds + 1):
        cells = [f"<!--fig {name}.labels_r{k}-->?<!--/fig-->"] + [
            f"<!--fig {name}.{arm}_{key}_r{k}:.3f-->?<!--/fig-->"
            for key in ("held_precision", "held_recall", "ranking_precision") for arm in ("loop", "random")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The bench's arguments; tests parse theirs with it, so a new flag reaches them with its default."""
    from transforms.review.labelling import RANDOM_SHARE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--crawl", choices=("ja", "ko"), default="ja")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--seed-labels", type=int, default=40)
    p.add_argument("--step", type=int, default=20)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--random-share", type=float, default=RANDOM_SHARE)
    p.add_argument("--random-rows", choices=("train", "calibrate"), default="train",
                   help="the loop's judge.random_rows (the recipe's default: train)")
    p.add_argument("--threshold-on", choices=("representative", "all"), default="representative",
                   help="the loop's judge.threshold_on (the recipe's default: representative)")
    p.add_argument("--cache", default=str(ROOT / "lake" / "cache" / "embeddings"))
    p.add_argument("--png", default=None, help="default: docs/figures/labelling_loop_<crawl>.png")
    p.add_argument("--doc-table", action="store_true", help="print the docs' table of markers and stop")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.doc_table:
        print(doc_table(args.crawl, args.rounds))
        return 0
    load_start = list(os.getloadavg())
    judge = recipe_judge()
    pool, evaluation = rows_and_split(judge, args.crawl)
    print(f"{args.crawl}: pool {len(pool)} rows ({sum(r['everyday'] for r in pool)} everyday), evaluation "
          f"{len(evaluation)} rows ({sum(r['everyday'] for r in evaluation)} everyday); budget {args.seed_labels} + "
          f"{args.rounds} x {args.step} = {args.seed_labels + args.rounds * args.step}", flush=True)
    started = time.time()
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "whole.jsonl"
        _write(whole, evaluation + pool)
        full = fit(judge, whole, args.cache, pool)
        full.pop("_fitted"), full.pop("_scores")
        for seed in range(args.seeds):
            for arm in ("loop", "random"):
                points += run_arm(arm, judge, pool, evaluation, seed, args, Path(tmp))
            print(f"seed {seed} done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    target = round(full["held_precision"] - 0.02, 3)
    print(f"\nwhole pool ({full['labels']} labels): held-out precision {full['held_precision']:.3f}, recall "
          f"{full['held_recall']:.3f}. Target: held-out precision >= P = {target:.3f} at recall >= 0.8\n")
    print("| labels | loop held-out P | random held-out P | loop held-out R | random held-out R "
          "| loop out-of-fold P | random out-of-fold P | loop threshold | random threshold | loop kept P (truth) "
          "| loop P at held-out R 0.8 | random (same) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cell(v: tuple[float, float, float]) -> str:
        return f"{v[0]:.3f} ({v[1]:.2f}–{v[2]:.2f})"

    for k in range(args.rounds + 1):
        lo, ra = summary(points, "loop", k), summary(points, "random", k)
        print(f"| {lo['labels']} | {cell(lo['held_precision'])} | {cell(ra['held_precision'])} | "
              f"{cell(lo['held_recall'])} | {cell(ra['held_recall'])} | {cell(lo['oof_precision'])} | "
              f"{cell(ra['oof_precision'])} | {cell(lo['threshold'])} | {cell(ra['threshold'])} | "
              f"{cell(lo['kept_true_precision'])} | {cell(lo['held_precision_at_r80'])} | "
              f"{cell(ra['held_precision_at_r80'])} |")
    needed = {f"{arm} {how}": [reached([q for q in points if q["arm"] == arm and q["seed"] == s], target,
                                       stays=how == "and stays")
                               for s in range(args.seeds)] for arm in ("loop", "random") for how in ("first", "and stays")}
    print()
    for what, got in needed.items():
        hit = [g for g in got if g is not None]
        print(f"{what}: held-out precision >= {target:.3f} at recall >= 0.8 in {len(hit)} of {args.seeds} seeds; "
              f"labels per seed: {', '.join('-' if g is None else str(g) for g in got)}"
              + (f" (median {int(np.median(hit))})" if hit else ""))
    figures = result_figures(points, args.rounds, args.seeds, full, target, args.crawl)
    print(f"worst margin (loop - random mean held-out precision): {figures['worst_margin']['value']:+.3f} "
          f"(round {figures['worst_margin_round']['value']}, standard error {figures['worst_margin_se']['value']:.3f});"
          f" mean over rounds {figures['mean_margin']['value']:+.3f}; "
          f"kept-set precision intervals holding the truth: {figures['kept_coverage']['value']:.3f} of "
          f"{figures['kept_estimates']['value']}")
    png = Path(args.png or ROOT / "docs" / "figures" / f"labelling_loop_{args.crawl}.png")
    plot(points, args.rounds, target, args.crawl, png)
    from transforms.core.results import write_result

    out = write_result(f"labelling_loop_{args.crawl}", figures, benchmark="benchmarks/bench_labelling_loop.py",
                       load_start=load_start,
                       data={"args": vars(args), "pool": len(pool), "evaluation": len(evaluation),
                             "whole_pool": full, "needed": needed, "seconds": round(time.time() - started),
                             "points": points})
    print(f"\nplot: {png}; results: {out}; {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
