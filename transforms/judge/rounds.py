"""The judge's learning curve over labelling rounds, and the judge's section of the run report.

`piqaforge label import` appends each row with the `round` of its batch (rows without one are round 0, the labels
a team started with). When the training rows span more than one round, the supervised prefilter refits on the
rows of rounds <= k for every earlier round k (transforms/judge/linear.train, `up_to_round`) and keeps, per k,
the labels used, the out-of-fold precision and recall at that fit's threshold, and precision and recall on the
held-out rows: all the held-out rows, which are the same for every k and every run (imported rows never join them,
`judge.imported_rows`). The last round's figures are the run's own fit. They go into the prefilter's report.json
(`label_rounds`). Each earlier round's point is kept on disk (`<cache>/label_rounds/<key>.json`, beside the
embedding cache), keyed by a hash of the judge's config and the labelled rows it was fitted and checked on, so a
run refits only the rounds whose labels or config changed, not every round on every run.

`judge_figures` / `judge_section` are a recipe report (`reports:` in jobs/recipes/crawl-filter.yaml): the
figures read back from the prefilter's report.json, and an HTML section with the learning curve as a table and
an inline SVG (no scripts, so the run report stays one self-contained page), and the kept set's precision and
recall estimated from the labels drawn at random (transforms/judge/linear.kept_estimate), with how many more
labels would halve each interval.
"""

from __future__ import annotations

import hashlib
import json
from html import escape
from pathlib import Path
from typing import Any

from transforms.judge.labels import LabelError
from transforms.judge.linear import (
    FittedLinear,
    LinearJudge,
    checking_rows,
    kept_estimate,
    label_round,
    train,
    training_rows,
)

# Bump when what a cached point holds, or how it is computed, changes: older points are then refitted.
CURVE_VERSION = 1

FIGURES = ("seed_rows", "positives", "precision", "recall", "precision_interval", "recall_interval", "auc",
           "threshold")


def round_figures(k: int, cv: dict[str, Any]) -> dict[str, Any]:
    """One point of the curve from a fit's `cv` report."""
    held = cv.get("held_out") or {}
    return ({"round": k, "labels": cv.get("seed_rows")} | {f"cv_{f}": cv.get(f) for f in FIGURES[1:]}
            | {f"held_out_{f}": held.get(f) for f in ("rows", "positives", "precision", "recall",
                                                       "precision_interval", "recall_interval")})


def curve_key(config: LinearJudge, k: int) -> str:
    """What a point of the curve depends on: the judge's config (but where its files are) and the rows it is fitted
    and checked on (labels, not floats: embeddings are recomputed bit for bit only on the same CPU)."""
    rows = [r.model_dump(mode="json") for r in training_rows(config, k)]
    checking = [r.model_dump(mode="json") for r in checking_rows(config)]
    ident = {"version": CURVE_VERSION, "round": k, "rows": rows, "checking": checking,
             "config": config.model_dump(mode="json", exclude={"labels", "extra_labels", "min_labels"})}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def curve_cache_dir(cache_dir: str | Path | None) -> Path | None:
    """Where the curve's points are kept: `label_rounds/` beside the embedding cache; None without one."""
    return None if cache_dir is None else Path(cache_dir).parent / "label_rounds"


def learning_curve(config: LinearJudge, fitted: FittedLinear, cache_dir: str | Path | None = None
                   ) -> list[dict[str, Any]]:
    """Per labelling round k (oldest first), the judge refitted on the rows of rounds <= k; [] when the
    training rows hold one round. `fitted` is the fit on every row (the last point). A point computed before for
    the same config and rows is read from the disk cache (curve_cache_dir) instead of refitted."""
    rounds = sorted({label_round(r) for r in training_rows(config)})
    if len(rounds) < 2:
        return []
    store = curve_cache_dir(cache_dir)
    curve = []
    for k in rounds[:-1]:
        path = store / f"{curve_key(config, k)}.json" if store is not None else None
        if path is not None and path.exists():
            curve.append(json.loads(path.read_text(encoding="utf-8")))
            continue
        try:  # min_labels gates a run, not a point of the curve: the early rounds may hold fewer
            point = round_figures(k, train(config.model_copy(update={"min_labels": None}), cache_dir,
                                           up_to_round=k).cv)
        except LabelError as err:
            point = {"round": k, "labels": len(training_rows(config, k)), "error": str(err)}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(point), encoding="utf-8")
            tmp.replace(path)
        curve.append(json.loads(json.dumps(point)))  # the same values a cached point gives (JSON's floats, lists)
    return curve + [round_figures(rounds[-1], fitted.cv)]


def judge_figures(manifest: Any, lake: Any, folder: str) -> dict[str, Any] | None:
    """The report maker: the prefilter's report.json in `folder` (the stage's output_dir), None without one."""
    path = Path(folder) / "report.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    keep = ("labels", "label", "labels_sha", "seed_rows", "seed_positives", "target_recall", "threshold",
            "cv_recall", "cv_precision", "cv_auc", "cv_recall_interval", "cv_precision_interval", "held_out",
            "rows", "rows_kept", "label_rounds", "first_tier_audit")
    figures = {k: report.get(k) for k in keep}
    model = Path(folder) / "model.json"  # the fit's scores of the rows drawn at random, at the threshold applied
    samples = (json.loads(model.read_text(encoding="utf-8")).get("cv") or {}).get("samples") if model.exists() else None
    threshold = report.get("threshold")
    # the run's estimate (weighted to its crawl's kept scores); a report written without one: from the samples alone
    figures["kept_estimate"] = report["kept_estimate"] if "kept_estimate" in report else (
        kept_estimate(samples or {}, float(threshold)) if threshold is not None else None)
    return figures


def kept_line(estimate: dict[str, Any]) -> str:
    """The kept-set estimate in one line of text (the console's and the Markdown report's)."""
    def more(key: str) -> str:
        m = estimate.get(key)
        return "" if m is None else f", ~{m} more labels halve it"

    line = (f"kept set estimated from {estimate['labels']} labels drawn at random ({estimate['what']}): precision "
            f"{_f(estimate['precision'])}{_ci(estimate['precision_interval'])}{more('precision_labels_to_halve')}")
    if "recall" in estimate:
        line += f"; recall {_f(estimate['recall'])}{_ci(estimate['recall_interval'])}{more('recall_labels_to_halve')}"
    return line + " (95% intervals)"


def kept_html(estimate: dict[str, Any] | None) -> str:
    """The kept set's estimated precision (and recall) with intervals, and what would halve them."""
    if not estimate:
        return ("<p class='meta'>The kept set's precision is not estimated yet: no labelled row was drawn at "
                "random. Every <code>piqaforge label export</code> batch carries a random share of the crawl (and "
                "<code>label export RUN --audit N</code> draws N of the kept rows); once imported, this section "
                "estimates the kept set's precision from them.</p>")

    def more(key: str) -> str:
        m = estimate.get(key)
        return "" if m is None else f"; about {m} more labels of that kind would halve the interval"

    html = (f"<h3>The kept set, estimated from {estimate['labels']} labels drawn at random "
            f"({escape(estimate['what'])})</h3><p>Precision {_f(estimate['precision'])}"
            f"{_ci(estimate['precision_interval'])} on the {estimate['kept_labels']} of them the judge keeps"
            f"{more('precision_labels_to_halve')}.")
    if (estimate.get("precision_strata") or 1) > 1:
        html += (f" Weighted to the run's kept rows in {estimate['precision_strata']} score strata (the random shares "
                 "of earlier rounds hold more rows just above the threshold than the kept set does): as sure as "
                 f"{estimate['precision_effective_labels']} unweighted labels.")
    if "recall" in estimate:
        html += (f" Recall {_f(estimate['recall'])}{_ci(estimate['recall_interval'])} of their "
                 f"{estimate['positives']} positives{more('recall_labels_to_halve')}.")
    return html + (" 95% Wilson intervals; label until they are as narrow as the team needs.</p>")


def _f(x: Any) -> str:
    return "–" if x is None else f"{x:.3f}" if isinstance(x, float) else escape(str(x))


def _ci(bounds: Any) -> str:
    return f" <span class='meta'>({bounds[0]:.2f}–{bounds[1]:.2f})</span>" if bounds else ""


def curve_svg(curve: list[dict[str, Any]], width: int = 520, height: int = 220) -> str:
    """Precision (solid) and recall (dashed), out of fold (blue) and held out (red), against labels used."""
    points = [p for p in curve if "error" not in p and p.get("labels")]
    if len(points) < 2:
        return ""
    left, right, top, bottom = 44, 12, 10, 30
    xs = [p["labels"] for p in points]
    lo_x, hi_x = min(xs), max(max(xs), min(xs) + 1)
    values = [p[k] for p in points for k in ("cv_precision", "cv_recall", "held_out_precision", "held_out_recall")
              if isinstance(p.get(k), float) and p[k] == p[k]]
    lo_y = min([0.5, *values])

    def xy(x: float, y: float) -> str:
        return (f"{left + (x - lo_x) / (hi_x - lo_x) * (width - left - right):.1f},"
                f"{top + (1 - (y - lo_y) / (1 - lo_y)) * (height - top - bottom):.1f}")

    lines = []
    for key, colour, dash in (("cv_precision", "#2f6db5", ""), ("cv_recall", "#2f6db5", "5,3"),
                              ("held_out_precision", "#c8553d", ""), ("held_out_recall", "#c8553d", "5,3")):
        pts = [xy(p["labels"], p[key]) for p in points if isinstance(p.get(key), float) and p[key] == p[key]]
        if len(pts) > 1:
            lines.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.6' stroke-dasharray='{dash}' "
                         f"points='{' '.join(pts)}'><title>{key}</title></polyline>")
    grid = "".join(f"<line x1='{left}' x2='{width - right}' y1='{xy(lo_x, y).split(',')[1]}' "
                   f"y2='{xy(lo_x, y).split(',')[1]}' stroke='#ddd'/><text x='{left - 4}' "
                   f"y='{float(xy(lo_x, y).split(',')[1]) + 4:.1f}' font-size='10' text-anchor='end'>{y:.1f}</text>"
                   for y in (lo_y, (lo_y + 1) / 2, 1.0))
    ticks = "".join(f"<text x='{xy(x, lo_y).split(',')[0]}' y='{height - 12}' font-size='10' "
                    f"text-anchor='middle'>{x}</text>" for x in xs)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
            f"aria-label='precision and recall per labelling round'>{grid}{ticks}{''.join(lines)}"
            f"<text x='{width - right}' y='{height - 1}' font-size='10' text-anchor='end'>labels used</text></svg>"
            "<p class='meta'>blue: out of fold; red: held out; solid: precision; dashed: recall</p>")


def tier_audit_html(audit: dict[str, Any] | None) -> str:
    """What the first tier cost on this crawl (linear.tier_audit): '' for a run without a first tier."""
    if not audit:
        return ""
    head = (f"<p>First tier: {_f(audit['rows_spared'])} rows spared from the embedder; {_f(audit['audited'])} of "
            f"them (a {audit['audit_share']:g} share, drawn by a hash of the text) embedded to check")
    if not audit["audited"]:
        return head + ": none drawn, so what the tier cost on this crawl is not known.</p>"
    return (head + f", of which the judge alone keeps {_f(audit['judge_would_keep'])}: about "
            f"{_f(audit['rows_lost'])} <span class='meta'>({audit['rows_lost_interval'][0]}–"
            f"{audit['rows_lost_interval'][1]})</span> rows lost to the tier, its recall against "
            f"the judge alone {_f(audit['recall_vs_judge'])}{_ci(audit['recall_vs_judge_interval'])}.</p>")


def judge_section(figures: dict[str, Any]) -> str:
    """The run report's section: the judge's figures, then its learning curve over labelling rounds."""
    held = figures.get("held_out") or {}
    html = (f"<h2>Judge: {escape(str(figures.get('label')))} from {escape(str(figures.get('labels')))}</h2>"
            f"<p>{_f(figures.get('seed_rows'))} labelled rows trained on ({_f(figures.get('seed_positives'))} "
            f"positive); threshold {_f(figures.get('threshold'))} for out-of-fold recall "
            f"{_f(figures.get('target_recall'))}. Out of fold: recall {_f(figures.get('cv_recall'))}"
            f"{_ci(figures.get('cv_recall_interval'))}, precision {_f(figures.get('cv_precision'))}"
            f"{_ci(figures.get('cv_precision_interval'))}."
            + (f" On {held.get('rows')} held-out rows ({held.get('positives')} positive): recall "
               f"{_f(held.get('recall'))}{_ci(held.get('recall_interval'))}, precision {_f(held.get('precision'))}"
               f"{_ci(held.get('precision_interval'))}." if held else "")
            + f" Kept {_f(figures.get('rows_kept'))} of {_f(figures.get('rows'))} rows (95% Wilson intervals).</p>")
    html += kept_html(figures.get("kept_estimate"))
    html += tier_audit_html(figures.get("first_tier_audit"))
    curve = figures.get("label_rounds") or []
    if not curve:
        return html + ("<p class='meta'>The labels carry one labelling round: <code>piqaforge label export</code> "
                       "and <code>label import</code> add rounds, and this section then shows the judge per round."
                       "</p>")
    rows = "".join(
        f"<tr><td>{p['round']}</td><td>{_f(p['labels'])}</td><td class='l' colspan='4'>{escape(p['error'])}</td></tr>"
        if "error" in p else
        f"<tr><td>{p['round']}</td><td>{_f(p['labels'])}</td><td>{_f(p['cv_precision'])}"
        f"{_ci(p.get('cv_precision_interval'))}</td><td>{_f(p['cv_recall'])}{_ci(p.get('cv_recall_interval'))}</td>"
        f"<td>{_f(p.get('held_out_precision'))}{_ci(p.get('held_out_precision_interval'))}</td>"
        f"<td>{_f(p.get('held_out_recall'))}{_ci(p.get('held_out_recall_interval'))}</td></tr>" for p in curve)
    return (html + "<h3>Learning curve: the judge refitted on the labels of rounds ≤ k</h3>"
            "<table><tr><th>round k</th><th>labels</th><th>out-of-fold precision</th><th>out-of-fold recall</th>"
            f"<th>held-out precision</th><th>held-out recall</th></tr>{rows}</table>{curve_svg(curve)}"
            "<p class='meta'>Each fit sets its own threshold for the target recall out of fold. The held-out rows "
            "are the same for every k. Out-of-fold figures are measured on the labels each fit has: rows the loop "
            "chose near the threshold are harder than a random sample, so they can fall as rounds are added while "
            "the held-out figures hold.</p>")
