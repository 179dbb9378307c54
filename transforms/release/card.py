"""The dataset card: the statistics the PIQA-family papers report, as Markdown, PNG plots and HTML.

`item_stats` is pure (a dict from a table); `card_markdown` and `report_html` render it with the
gate result, the artifact audit (when available) and the funnel of the run that built the table.
matplotlib (Agg) is imported inside `render_plots`.
"""

from __future__ import annotations

import base64
import html
import io
import statistics
from typing import Any

import pyarrow as pa

from transforms.piqa.schema import CATEGORY_COLUMNS, GOAL, IS_CULTURAL, LABEL, LANG, SOL1, SOL2
from transforms.text import textcheck as tc


def _summary(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"mean": None, "median": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(values), 2), "median": statistics.median(values),
            "min": min(values), "max": max(values)}


def _col(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


def item_stats(table: pa.Table, funnel: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    """Counts, label balance, lengths (chars and words), cultural share, per-category counts, funnel."""
    n = table.num_rows
    labels = [x for x in _col(table, LABEL) if x is not None]
    langs = _col(table, LANG)
    goals = ["" if x is None else str(x) for x in _col(table, GOAL)]
    sols = ["" if x is None else str(x) for x in _col(table, SOL1) + _col(table, SOL2)]
    sol_langs = langs + langs
    cultural = [x for x in _col(table, IS_CULTURAL) if x is not None]
    counts: dict[str, dict[str, int]] = {}
    for name in CATEGORY_COLUMNS:
        values = [str(v) for v in _col(table, name) if v is not None and v != ""]
        if values:
            tally: dict[str, int] = {}
            for v in values:
                tally[v] = tally.get(v, 0) + 1
            counts[name] = dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))
    return {
        "items": n,
        "labels": {"0": labels.count(0), "1": labels.count(1), "other": len(labels) - labels.count(0) - labels.count(1),
                   "share_1": round(labels.count(1) / len(labels), 4) if labels else None},
        "lengths": {
            "goal": {"chars": _summary([len(g) for g in goals]),
                     "words": _summary([tc.n_words(g, lang) for g, lang in zip(goals, langs, strict=True)])},
            "solution": {"chars": _summary([len(s) for s in sols]),
                         "words": _summary([tc.n_words(s, lang) for s, lang in zip(sols, sol_langs, strict=True)])},
        },
        "cultural": {"share": round(sum(cultural) / len(cultural), 4) if cultural else None, "known": len(cultural)},
        "counts": counts,
        "review": _review(table),
        "funnel": [{"stage": s, "rows": r} for s, r in (funnel or [])],
        "_goal_chars": [len(g) for g in goals],
        "_solution_chars": [len(s) for s in sols],
    }


def _review(table: pa.Table) -> dict[str, Any] | None:
    """How the items were reviewed (transforms/review: `review_automatic`, `review_batch`), or None."""
    if "review_automatic" not in table.column_names:
        return None
    flags = [bool(x) for x in _col(table, "review_automatic") if x is not None]
    batches = sorted({str(b) for b in _col(table, "review_batch") if b is not None})
    return {"automatic": sum(flags), "people": len(flags) - sum(flags), "batches": batches}


def public_stats(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if not k.startswith("_")}


# -- plots ----------------------------------------------------------------------------------------------
def render_plots(stats: dict[str, Any]) -> dict[str, bytes]:
    """PNG bytes per plot name: label_balance, lengths and (when known) funnel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def png(fig: Any) -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        return buf.getvalue()

    plots: dict[str, bytes] = {}
    fig, ax = plt.subplots(figsize=(4, 3))
    lab = stats["labels"]
    ax.bar(["sol1 (0)", "sol2 (1)"], [lab["0"], lab["1"]], color=["#4477aa", "#ee6677"])
    ax.set_title("Label balance")
    ax.set_ylabel("items")
    plots["label_balance"] = png(fig)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, key, title in ((axes[0], "_goal_chars", "Goal length"), (axes[1], "_solution_chars", "Solution length")):
        ax.hist(stats[key] or [0], bins=30, color="#228833")
        ax.set_title(title)
        ax.set_xlabel("characters")
    plots["lengths"] = png(fig)
    if stats["funnel"]:
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(stats["funnel"]) + 1))
        names = [f["stage"] for f in stats["funnel"]][::-1]
        ax.barh(names, [f["rows"] for f in stats["funnel"]][::-1], color="#66ccee")
        ax.set_title("Funnel (rows kept after each stage)")
        plots["funnel"] = png(fig)
    return plots


# -- Markdown card --------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    return "–" if v is None else (f"{v:,}" if isinstance(v, int) else str(v))


def _length_rows(stats: dict[str, Any]) -> list[str]:
    rows = ["| text | unit | mean | median | min | max |", "|---|---|---|---|---|---|"]
    for part in ("goal", "solution"):
        for unit in ("chars", "words"):
            s = stats["lengths"][part][unit]
            rows.append(f"| {part} | {unit} | {_fmt(s['mean'])} | {_fmt(s['median'])} | {_fmt(s['min'])} | {_fmt(s['max'])} |")
    return rows


def _review_rows(review: dict[str, Any] | None) -> list[str]:
    if review is None:
        return []
    if review["automatic"] and not review["people"]:
        how = (f"**automatic**: LLM annotators, not people (a dry run; batch {', '.join(review['batches'])}); "
               "the items were not validated by humans")
    elif review["automatic"]:
        how = f"{review['people']:,} items by people, {review['automatic']:,} **automatically** by LLM annotators"
    else:
        how = f"by people (batch {', '.join(review['batches'])})"
    return [f"| review | {how} |"]


def card_markdown(stats: dict[str, Any], *, title: str, recipe: str, version: str, gate: dict[str, Any],
                  audit_md: str | None = None, files: list[str] | None = None, plots: list[str] | None = None,
                  sections: list[str] | None = None, plots_dir: str = "plots",
                  lead: list[str] | None = None) -> str:
    lab = stats["labels"]
    share = "–" if lab["share_1"] is None else f"{100 * lab['share_1']:.1f}%"
    cultural = stats["cultural"]
    cultural_share = "–" if cultural["share"] is None else f"{100 * cultural['share']:.1f}%"
    status = "PASSED" if gate.get("success") else "FAILED"
    lines = [f"# {title} ({version})", "",
             f"Recipe `{recipe}`. Quality gate: **{status}** (suite `{gate.get('suite')}`).", "",
             *[line for section in lead or [] for line in (section, "")],
             "## Statistics", "", "| | |", "|---|---|", f"| items | {stats['items']:,} |",
             f"| label 0 / 1 | {lab['0']:,} / {lab['1']:,} (label 1: {share}) |",
             f"| cultural items | {cultural_share} (known for {cultural['known']:,}) |",
             *_review_rows(stats.get("review")), "",
             "Lengths (words are whitespace tokens; characters for Japanese/Chinese/Thai):", "",
             *_length_rows(stats), ""]
    for name, tally in stats["counts"].items():
        lines += [f"### Items per {name}", "", f"| {name} | items |", "|---|---|"]
        top = list(tally.items())[:25]
        lines += [f"| {html.escape(k)} | {v:,} |" for k, v in top]
        if len(tally) > 25:
            lines.append(f"| … {len(tally) - 25} more | |")
        lines.append("")
    if stats["funnel"]:
        lines += ["## Funnel", "", "| stage | rows kept |", "|---|---|"]
        lines += [f"| {f['stage']} | {f['rows']:,} |" for f in stats["funnel"]] + [""]
    lines += ["## Quality gate", ""]
    failures = gate.get("reasons") or []
    lines += [f"{len(gate.get('checks', []))} checks, {len(failures)} failed."] + [""]
    lines += [f"- {r}" for r in failures] + ([""] if failures else [])
    if audit_md:
        lines += [audit_md, ""]
    for section in sections or []:  # e.g. the Global PIQA files and their columns
        lines += [section, ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({plots_dir}/{p}.png)" for p in plots] + [""]
    if files:
        lines += ["## Files", ""] + [f"- `{f}`" for f in files] + [""]
    return "\n".join(lines)


def report_html(markdown_title: str, stats: dict[str, Any], gate: dict[str, Any], plots: dict[str, bytes],
                audit: dict[str, Any] | None = None) -> str:
    """One self-contained HTML file: statistics, the gate's checks, the audit, plots inlined as base64."""
    esc = html.escape
    lab = stats["labels"]
    rows = "".join(
        f"<tr class='{'ok' if c['success'] else 'bad'}'><td>{'✔' if c['success'] else '✘'}</td><td>{esc(c['name'])}</td>"
        f"<td>{esc(c['description'])}</td><td>{esc(_detail(c))}</td></tr>" for c in gate.get("checks", []))
    lengths = "".join(
        f"<tr><td>{p}</td><td>{u}</td>" + "".join(f"<td>{_fmt(stats['lengths'][p][u][k])}</td>"
                                                 for k in ("mean", "median", "min", "max")) + "</tr>"
        for p in ("goal", "solution") for u in ("chars", "words"))
    counts = "".join(f"<h3>Items per {esc(name)}</h3><table>" + "".join(
        f"<tr><td>{esc(k)}</td><td>{v}</td></tr>" for k, v in list(tally.items())[:25]) + "</table>"
        for name, tally in stats["counts"].items())
    imgs = "".join(f"<figure><img alt='{esc(name)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'>"
                   f"<figcaption>{esc(name)}</figcaption></figure>" for name, data in plots.items())
    audit_html = ""
    if audit:
        audit_rows = "".join(f"<tr><td>{esc(k)}</td><td>{_fmt(None if b.get('acc') is None else round(100 * b['acc'], 1))}"
                             f"</td></tr>" for k, b in audit.get("baselines", {}).items())
        audit_html = (f"<h2>Artifact audit</h2><p>{'FLAGGED: ' + esc(', '.join(audit.get('flags', []))) if audit.get('flagged') else 'not flagged'}"
                      f"</p><table><tr><th>baseline</th><th>accuracy %</th></tr>{audit_rows}</table>")
    status = "PASSED" if gate.get("success") else "FAILED"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{esc(markdown_title)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}tr.bad{{background:#fdd}}tr.ok td:first-child{{color:green}}
.status{{font-size:1.3em;font-weight:bold;color:{'green' if gate.get('success') else '#c00'}}}figure{{display:inline-block}}</style>
</head><body><h1>{esc(markdown_title)}</h1><p class="status">Quality gate {status}</p>
<p>{stats['items']:,} items; label 0 / 1: {lab['0']:,} / {lab['1']:,}</p>
<h2>Lengths</h2><table><tr><th>text</th><th>unit</th><th>mean</th><th>median</th><th>min</th><th>max</th></tr>{lengths}</table>
{counts}<h2>Expectations ({esc(str(gate.get('suite')))})</h2><table><tr><th></th><th>check</th><th>rule</th><th>result</th></tr>{rows}</table>
{audit_html}<h2>Plots</h2>{imgs}</body></html>"""


def _detail(check: dict[str, Any]) -> str:
    if check.get("error"):
        return str(check["error"])
    if check.get("unexpected_count"):
        ids = ", ".join(check.get("failing_ids", [])[:10])
        return f"{check['unexpected_count']} rows: {ids}"
    if check.get("observed") is not None:
        return f"observed {check['observed']}"
    return ""
