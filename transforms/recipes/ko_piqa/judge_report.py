"""The judges' figures as HTML: a table per judge, injection flips, and a precision-recall plot
(matplotlib PNG embedded as base64, so the page stays one self-contained file).

`render_judges(extras)` is the hook for the run report: transforms/report/run_report.py calls it with
`manifest.extras["judges"]` when a run has labels (transforms/recipes/ko_piqa/judges.py fills it: `run` = what the run
kept against the labels, `judge_eval` = the latest judge-eval result when there is one).
"""

from __future__ import annotations

import base64
import io
from html import escape
from typing import Any


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else escape(str(x))


def plot_png(judges: dict[str, Any]) -> bytes:
    """Precision-recall curve of every scored judge, and each judge's operating point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    for name, j in judges.items():
        c = j.get("curve")
        if c and c.get("recall"):
            ax.plot(c["recall"], c["precision"], label=f"{name} (AUC {_f(j.get('auc'))})", lw=1.4)
    for name, j in judges.items():
        if j.get("recall") is not None and j.get("precision") is not None:
            ax.scatter([j["recall"]], [j["precision"]], s=28, zorder=3)
            ax.annotate(name, (j["recall"], j["precision"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("recall (physical how-to questions kept)")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _titled_table(title: str, columns: tuple[str, ...], rows: str) -> str:
    """An h3 and a table (the first column left-aligned), or nothing when there are no rows."""
    head = f"<th class='l'>{columns[0]}</th>" + "".join(f"<th>{c}</th>" for c in columns[1:])
    return f"<h3>{title}</h3><table><tr>{head}</tr>{rows}</table>" if rows else ""


def render_judges(extras: dict[str, Any]) -> str:
    """The run report's section: the run's kept rows against the labels, then judge-eval's figures."""
    html = render_run(extras["run"]) if extras.get("run") else ""
    if extras.get("judge_eval"):
        html += render_judge_eval(extras["judge_eval"])
    return html


def render_run(run: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td class='l'>{escape(g)}</td><td>{_f(m['rows'])}</td><td>{_f(m['positives'])}</td>"
                   f"<td>{_f(m['tp'] + m['fp'])}</td><td>{_f(m['precision'])}</td><td>{_f(m['recall'])}</td>"
                   f"<td>{_f(m.get('auc'))}</td></tr>" for g, m in run.get("groups", {}).items())
    share = run.get("kept_share_from_negative_sources")
    ex = "".join(f"<tr><td class='l'>{escape(kind)}</td><td>{_f(e['score'])}</td><td>{e['physical']}</td>"
                 f"<td class='l'>{escape(str(e['dropped_by'] or ''))}</td><td class='l'>{escape(e['text'])}</td></tr>"
                 for kind in ("kept", "rejected") for e in run.get("examples", {}).get(kind, [])[:5])
    members = "".join(
        f"<tr><td class='l'>{escape(n)}</td><td>{_f(v['asked'])}</td><td>{_f(v['said_yes'])}</td>"
        f"<td>{_f((v['labelled'] or {}).get('positives'))}</td><td>{_f((v['labelled'] or {}).get('recall'))}</td>"
        f"<td>{_f((v['labelled'] or {}).get('precision'))}</td></tr>" for n, v in run.get("members", {}).items())
    members = _titled_table("Ensemble members on the rows they were asked about", ("member", "asked", "yes",
                            "labelled physical", "recall", "precision"), members)
    return (f"<h2>What this run kept, against the labels</h2><p class='meta'>{_f(run.get('kept_rows'))} rows kept "
            f"after the {escape(str(run.get('kept_stage')))} stage; from 3i4k/chatbot: "
            f"{_f(run.get('kept_from_negative_sources'))} ({_f(share)}); by source "
            f"{escape(json_dumps(run.get('kept_by_source', {})))}.</p><table><tr><th class='l'>labelled group</th>"
            "<th>rows</th><th>physical</th><th>kept</th><th>precision</th><th>recall</th><th>prefilter AUC</th></tr>"
            + rows + "</table>" + members + "<h3>Examples (highest prefilter score first)</h3><table><tr><th class='l'>"
            "</th><th>score</th><th>label</th><th class='l'>dropped by</th><th class='l'>question</th></tr>" + ex
            + "</table>")


def json_dumps(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def render_judge_eval(result: dict[str, Any], *, with_plot: bool = True) -> str:
    """An HTML section (h2 + tables + plot) from judge-eval's result."""
    judges = result.get("judges", {})
    rows = []
    for name, j in judges.items():
        cost = j.get("cost", {})
        rows.append(f"<tr><td class='l'>{escape(name)}</td><td class='l'>{escape(str(j.get('kind', '')))}</td>"
                    f"<td>{_f(j.get('precision'))}</td><td>{_f(j.get('recall'))}</td><td>{_f(j.get('auc'))}</td>"
                    f"<td>{_f(j.get('pass_rate'))}</td><td>{_f(j.get('tp'))}/{_f(j.get('fp'))}/{_f(j.get('fn'))}</td>"
                    f"<td>{_f(cost.get('llm_calls'))}</td><td>{_f(cost.get('tokens', cost.get('llm_tokens')))}</td></tr>")
    head = (f"<h2>Judges measured on labelled rows</h2><p class='meta'>{_f(result.get('rows'))} labelled rows, "
            f"{_f(result.get('positives'))} physical how-to questions; labels {escape(str(result.get('labels', '')))}."
            " Prefilter scores of seed rows are out-of-fold.</p>")
    table = ("<table><tr><th class='l'>judge</th><th class='l'>kind</th><th>precision</th><th>recall</th><th>AUC</th>"
             "<th>pass rate</th><th>TP/FP/FN</th><th>LLM calls</th><th>tokens</th></tr>" + "".join(rows) + "</table>")
    groups = "".join(
        f"<tr><td class='l'>{escape(g)}</td><td>{_f(v['cascade']['rows'])}</td><td>{_f(v['cascade']['positives'])}</td>"
        f"<td>{_f(v['prefilter']['recall'])}</td><td>{_f(v['cascade']['precision'])}</td><td>{_f(v['cascade']['recall'])}</td>"
        f"<td>{_f(v['cascade']['pass_rate'])}</td></tr>" for g, v in result.get("by_group", {}).items())
    groups = _titled_table("Cascade by source (KiN even = seed labels, odd = held out)", ("group", "rows", "positives",
                           "prefilter recall", "cascade precision", "cascade recall", "pass rate"), groups)
    inj = result.get("injection")
    inj_html = ""
    if inj:
        lines = "".join(f"<tr><td class='l'>{escape(n)}</td><td>{_f(v['no_to_yes'])}</td><td>{_f(v['yes_to_no'])}</td>"
                        f"<td>{_f(v['verdicts'])}</td></tr>" for n, v in inj.get("judges", {}).items())
        inj_html = (f"<h3>Prompt injection ({_f(inj.get('rows'))} questions × 4 attacks)</h3><table><tr><th class='l'>"
                    "judge</th><th>no → yes</th><th>yes → no</th><th>verdicts</th></tr>" + lines + "</table>")
        tpl = inj.get("templates")
        if tpl:
            tpl_rows = "".join(f"<tr><td class='l'>{escape(n)}</td><td>{_f(v['attacked_dropped_clean'])}</td>"
                           f"<td>{_f(v['no_to_yes'])}</td><td>{_f(v['flip_rate'])}</td>"
                           f"<td class='l'>{escape(', '.join(f'{k} {c}' for k, c in v['by_position'].items() if c))}</td>"
                           f"</tr>" for n, v in tpl.get("judges", {}).items())
            inj_html += (f"<h3>Injection templates ({_f(tpl.get('templates'))} templates × positions on "
                         f"{_f(tpl.get('negatives'))} negatives)</h3><table><tr><th class='l'>judge</th><th>attacked rows "
                         "dropped clean</th><th>kept attacked</th><th>flip rate</th><th class='l'>flips by position</th>"
                         "</tr>" + tpl_rows + "</table>")
    plot = ""
    if with_plot and any(j.get("curve") for j in judges.values()):
        data = base64.b64encode(plot_png(judges)).decode()
        plot = f'<p><img alt="precision-recall of each judge" src="data:image/png;base64,{data}"></p>'
    return head + table + groups + inj_html + plot
