"""Summaries of a predictions table, and the papers' table (model × overall × cultural) and plot.

`summarize` is the whole result as a dict (what `results.json` holds); `paper_rows` flattens it to
the table the Ko-PIQA / Russian PIQA papers print, with the omitted-reply count beside each accuracy.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transforms.eval import items as I
from transforms.eval.evaluator import GENERATE, LOGLIK_ACC, LOGLIK_BYTES, LOGLIK_NORM, ORIGINAL, SWAPPED
from transforms.eval.metrics import accuracy, grouped_accuracy, random_baseline, swap_consistency
from transforms.eval.parse import STATUSES


def _runs(predictions: pa.Table) -> list[tuple[str, str, str]]:
    keys = predictions.select(["model", "method", "variant"]).to_pylist()
    return sorted({(k["model"], k["method"], k["variant"]) for k in keys})


def _select(predictions: pa.Table, model: str, method: str, variant: str) -> pa.Table:
    mask = pc.and_(pc.and_(pc.equal(predictions.column("model"), model), pc.equal(predictions.column("method"), method)),
                   pc.equal(predictions.column("variant"), variant))
    return predictions.filter(mask)


def summarize(predictions: pa.Table, items: pa.Table) -> dict[str, Any]:
    """Accuracy per run and subset, reply statuses, swap consistency and the random baselines."""
    runs = []
    subsets = [c for c in I.subset_columns(items) if c in predictions.schema.names]
    for model, method, variant in _runs(predictions):
        part = _select(predictions, model, method, variant)
        statuses = part.column("status").to_pylist()
        overall = accuracy(part.column("correct").to_pylist(), statuses)
        by = {col: grouped_accuracy(part, [col]) for col in subsets}
        prompts = sorted(set(part.column("prompt").to_pylist()))
        counts = {s: statuses.count(s) for s in STATUSES if s in statuses}
        runs.append({"model": model, "method": method, "variant": variant, "prompts": prompts,
                     "overall": overall, "by": by, "statuses": counts,
                     "random_baseline": random_baseline(part.column(I.LABEL).to_pylist())})
    swap = {}
    for model in sorted(set(predictions.column("model").to_pylist())):
        orig = _select(predictions, model, GENERATE, ORIGINAL)
        swapped = _select(predictions, model, GENERATE, SWAPPED)
        if orig.num_rows and swapped.num_rows:
            pred_swapped = dict(zip(swapped.column(I.ID).to_pylist(), swapped.column("pred").to_pylist(), strict=True))
            ids = orig.column(I.ID).to_pylist()
            swap[model] = swap_consistency(orig.column("pred").to_pylist(), [pred_swapped.get(i) for i in ids])
    return {"n_items": items.num_rows, "random_baseline": random_baseline(items.column(I.LABEL).to_pylist()),
            "runs": runs, "swap_consistency": swap}


def _group(run: dict[str, Any], col: str, value: Any) -> dict[str, Any] | None:
    return next((g for g in run["by"].get(col, []) if g[col] == value), None)


def _fmt(acc: dict[str, Any] | None) -> str:
    if not acc or acc.get("acc") is None:
        return "n/a"
    return f"{100 * acc['acc']:.1f} [{100 * acc['ci_low']:.1f}, {100 * acc['ci_high']:.1f}]"


def paper_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model × method × variant: n, scored, omitted (by reason), overall, cultural, universal."""
    rows = []
    for run in summary["runs"]:
        o = run["overall"]
        cultural, universal = _group(run, I.IS_CULTURAL, True), _group(run, I.IS_CULTURAL, False)
        swap = summary["swap_consistency"].get(run["model"]) if run["method"] == GENERATE else None
        rows.append({
            "model": run["model"], "method": run["method"], "variant": run["variant"],
            "prompt": ";".join(run["prompts"]), "n": o["n"], "scored": o["scored"], "omitted": o["omitted"],
            "refusal": o["omitted_by"].get("refusal", 0), "empty": o["omitted_by"].get("empty", 0),
            "unparsable": o["omitted_by"].get("unparsable", 0),
            "acc": o["acc"], "ci_low": o["ci_low"], "ci_high": o["ci_high"],
            "cultural_acc": cultural["acc"] if cultural else None, "cultural_n": cultural["scored"] if cultural else 0,
            "universal_acc": universal["acc"] if universal else None,
            "universal_n": universal["scored"] if universal else 0,
            "swap_consistency": swap["consistency"] if swap and run["variant"] == ORIGINAL else None,
        })
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        if not rows:
            f.write("")
            return
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def markdown(summary: dict[str, Any], title: str = "Evaluation") -> str:
    """The papers' table, then per-subset accuracy and the baselines, as Markdown."""
    rb = summary["random_baseline"]
    lines = [f"## {title}", "", f"{summary['n_items']} items in the release; each row scores the items in its *scored* "
             "column (a fixed-seed subset when a limit was set). Accuracy in %, 95% Wilson interval in brackets; "
             "replies that were refusals, empty or unparsable, and questions the endpoint never answered, are left out "
             "of accuracy and counted in *omitted*.", "",
             "| model | method | variant | prompt | overall | cultural | universal | scored "
             "| omitted (refusal/empty/unparsable/request_failed) | swap consistency |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in summary["runs"]:
        o = run["overall"]
        swap = summary["swap_consistency"].get(run["model"]) if run["method"] == GENERATE else None
        swap_txt = "n/a"
        if swap and run["variant"] == ORIGINAL and swap["consistency"] is not None:
            swap_txt = f"{100 * swap['consistency']:.1f} (first slot {100 * (swap['first_position_rate'] or 0):.0f}%)"
        ob = o["omitted_by"]
        lines.append(f"| {run['model']} | {run['method']} | {run['variant']} | {', '.join(run['prompts'])} | {_fmt(o)} "
                     f"| {_fmt(_group(run, I.IS_CULTURAL, True))} | {_fmt(_group(run, I.IS_CULTURAL, False))} "
                     f"| {o['scored']}/{o['n']} | {o['omitted']} ({ob.get('refusal', 0)}/{ob.get('empty', 0)}/"
                     f"{ob.get('unparsable', 0)}/{ob.get('request_failed', 0)}) | {swap_txt} |")
    lines += loglik_lines(summary)
    emp = "n/a" if rb["empirical"] is None else f"{100 * rb['empirical']:.1f}"
    maj = "n/a" if rb["majority"] is None else f"{100 * rb['majority']:.1f}"
    lines += ["", f"Random baselines on the whole release: uniform guess {100 * rb['uniform']:.1f}%, guess by the label distribution "
              f"{rb['label_dist']} {emp}%, always the majority label {maj}%.", ""]
    for run in summary["runs"]:
        for col, groups in run["by"].items():
            if col == I.IS_CULTURAL or len(groups) < 2:
                continue
            cells = ", ".join(f"{g[col]}: {_fmt(g)} (n={g['scored']})" for g in groups)
            lines.append(f"- {run['model']} / {run['method']} / {run['variant']} by {col}: {cells}")
    return "\n".join(lines) + "\n"


def loglik_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model with lm-eval's three log-likelihood metrics side by side (acc, acc_norm, acc_bytes)."""
    names = {LOGLIK_ACC: "acc", LOGLIK_NORM: "acc_norm", LOGLIK_BYTES: "acc_bytes"}
    rows: dict[str, dict[str, Any]] = {}
    for run in summary["runs"]:
        if run["method"] in names and run["variant"] == ORIGINAL:
            row = rows.setdefault(run["model"], {"model": run["model"], "n": run["overall"]["scored"]})
            row[names[run["method"]]] = run["overall"]
    return list(rows.values())


def loglik_lines(summary: dict[str, Any]) -> list[str]:
    rows = loglik_rows(summary)
    if not rows:
        return []
    lines = ["", "Log-likelihood, the three ways lm-evaluation-harness picks a solution (acc: summed log-probability; "
             "acc_norm: per character; acc_bytes: per UTF-8 byte, Global PIQA's choice across scripts):", "",
             "| model | items | acc | acc_norm | acc_bytes |", "|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['n']} | {_fmt(r.get('acc'))} | {_fmt(r.get('acc_norm'))} | {_fmt(r.get('acc_bytes'))} |"
              for r in rows]
    return lines


def plot(summary: dict[str, Any], path: Path, title: str = "") -> Path:
    """Bars of overall and cultural accuracy per model × method with 95% intervals; random lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in summary["runs"] if r["variant"] == ORIGINAL]
    labels = [f"{r['model']}\n{r['method']}" for r in runs]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(runs) + 1), 3.6))

    def pick(run: dict[str, Any], name: str) -> dict[str, Any] | None:
        return run["overall"] if name == "overall" else _group(run, I.IS_CULTURAL, name == "cultural")

    # Cultural/universal bars only when the release marks cultural items; bars centred on the tick.
    series = ["overall"] + [n for n in ("cultural", "universal")
                            if any(_group(r, I.IS_CULTURAL, True) for r in runs) and any(pick(r, n) for r in runs)]
    width = 0.8 / len(series)
    for k, name in enumerate(series):
        xs, ys, err_lo, err_hi = [], [], [], []
        for i, run in enumerate(runs):
            acc = pick(run, name)
            if acc and acc.get("acc") is not None:
                xs.append(i + (k - (len(series) - 1) / 2) * width)
                ys.append(100 * acc["acc"])
                err_lo.append(max(0.0, 100 * (acc["acc"] - acc["ci_low"])))  # rounding can make it -1e-15
                err_hi.append(max(0.0, 100 * (acc["ci_high"] - acc["acc"])))
        if xs:
            ax.bar(xs, ys, width, yerr=[err_lo, err_hi], capsize=3, label=name)
    rb = summary["random_baseline"]
    ax.axhline(100 * rb["uniform"], color="grey", linestyle="--", linewidth=1, label="uniform guess")
    if rb["majority"] is not None and abs(rb["majority"] - rb["uniform"]) > 1e-9:
        ax.axhline(100 * rb["majority"], color="black", linestyle=":", linewidth=1, label="majority label")
    ax.set_xticks(range(len(runs)), labels, fontsize=7)
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title or f"{summary['n_items']} items", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
