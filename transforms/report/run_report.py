"""The run report: one self-contained HTML page from a RunManifest (inline SVG, no scripts, no
CDN), so it opens offline and can be attached to a ticket. It shows the funnel (rows left after
each stage, like Figure 1 of the Ko-PIQA paper), the drop reasons of every stage, and example rows
each stage kept and dropped, read back from the lake (examples.py, prompts.py)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from transforms.core.manifest import RunManifest

BAR_COLOURS = ("#2f6db5", "#c8553d", "#6a994e", "#8e6bb3", "#d4a017", "#3d9ac8", "#b5446e", "#7a7a7a")

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem}
.meta{color:#555;font-size:.9rem} table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.3rem .6rem;text-align:right} th{background:#f3f3f3}
td.l,th.l{text-align:left} .bad{color:#b00020;font-weight:600} .ok{color:#1b7a1b;font-weight:600}
pre{background:#f7f7f7;padding:.6rem;overflow-x:auto;font-size:.8rem}
"""


def _fmt(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def funnel_svg(funnel: list[tuple[str, int]], width: int = 900) -> str:
    """Horizontal bars: rows remaining after each stage, with the share of the input."""
    if not funnel:
        return "<p>No stages ran.</p>"
    top = max(rows for _, rows in funnel) or 1
    label_w, bar_h, gap = 170, 26, 8
    bar_w = width - label_w - 190
    height = len(funnel) * (bar_h + gap) + gap
    first = funnel[0][1] or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="rows after each stage">']
    for i, (name, rows) in enumerate(funnel):
        y = gap + i * (bar_h + gap)
        w = max(1.0, bar_w * rows / top) if rows else 0.0
        parts.append(f'<text x="{label_w - 8}" y="{y + bar_h * 0.68}" text-anchor="end" font-size="13">'
                     f'{escape(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{BAR_COLOURS[0]}" '
                     f'opacity="{1 - 0.5 * i / max(1, len(funnel) - 1):.2f}"/>')
        lost = funnel[i - 1][1] - rows if i else 0
        delta = (f' <tspan fill="#c8553d">−{_fmt(lost)}</tspan>' if lost > 0 else
                 f' <tspan fill="#1b7a1b">+{_fmt(-lost)}</tspan>' if lost < 0 else "")
        parts.append(f'<text x="{label_w + w + 6:.1f}" y="{y + bar_h * 0.68}" font-size="12">'
                     f'{_fmt(rows)} ({100 * rows / first:.1f}%){delta}</text>')
    parts.append("</svg>")
    return "".join(parts)


def reasons_svg(reasons: dict[str, int], width: int = 520) -> str:
    """A small bar chart of one stage's drop reasons, largest first."""
    if not reasons:
        return ""
    items = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    top = items[0][1] or 1
    label_w, bar_h, gap = 190, 16, 4
    bar_w = width - label_w - 70
    height = len(items) * (bar_h + gap) + gap
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    for i, (reason, n) in enumerate(items):
        y = gap + i * (bar_h + gap)
        w = max(1.0, bar_w * n / top)
        colour = BAR_COLOURS[1 + i % (len(BAR_COLOURS) - 1)]
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end" font-size="12">{escape(reason)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"/>'
                     f'<text x="{label_w + w + 4:.1f}" y="{y + 12}" font-size="11">{_fmt(n)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def chain_html(manifest: RunManifest, runs_dir: Path | None) -> str:
    """The runs this one descends from (crawl → review → release → evaluation), oldest first."""
    if not manifest.parents or runs_dir is None:
        return ""
    chain: list[str] = []
    seen, todo = {manifest.run_id}, list(manifest.parents)
    while todo and len(chain) < 20:
        run_id = todo.pop(0)
        if run_id in seen:
            continue
        seen.add(run_id)
        path = runs_dir / run_id / "manifest.json"
        if not path.exists():
            chain.append(f"<li><code>{escape(run_id)}</code> (not in this lake)</li>")
            continue
        parent = RunManifest.load(path)
        funnel = parent.funnel()
        rows = f"{_fmt(funnel[0][1])} → {_fmt(funnel[-1][1])} rows" if funnel else "no stages"
        report = runs_dir / run_id / "report.html"
        link = f' · <a href="../{escape(run_id)}/report.html">report</a>' if report.exists() else ""
        chain.append(f"<li><code>{escape(run_id)}</code> {escape(parent.job)} · {escape(parent.status)} · "
                     f"{rows}{link}</li>")
        todo.extend(parent.parents)
    here = manifest.funnel()
    rows = f"{_fmt(here[0][1])} → {_fmt(here[-1][1])} rows" if here else ""
    items = "".join(reversed(chain)) + f"<li><b>this run</b> <code>{escape(manifest.run_id)}</code> {rows}</li>"
    return f"<h2>Chain of runs</h2><ol>{items}</ol>"


def eval_html(table: list[dict[str, Any]]) -> str:
    """An evaluation run's accuracy table (transforms/flow/evaluate.py's paper rows): overall and cultural subset."""
    if not table:
        return "<h2>Evaluation</h2><p>No predictions.</p>"

    def pct(v: Any) -> str:
        return "n/a" if v is None else f"{100 * float(v):.1f}"

    rows = "".join(
        f"<tr><td class='l'>{escape(str(r['model']))}</td><td class='l'>{escape(str(r['method']))}</td>"
        f"<td class='l'>{escape(str(r['variant']))}</td><td>{_fmt(int(r['n']))}</td><td>{_fmt(int(r['scored']))}</td>"
        f"<td>{_fmt(int(r['omitted']))}</td><td>{pct(r['acc'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]</td>"
        f"<td>{pct(r['cultural_acc'])} (n={_fmt(int(r['cultural_n']))})</td>"
        f"<td>{pct(r['universal_acc'])} (n={_fmt(int(r['universal_n']))})</td></tr>" for r in table)
    return ("<h2>Evaluation</h2><p class='meta'>Accuracy in %, 95% Wilson interval; refusals, empty and unparsable "
            "replies are omitted from accuracy and counted.</p><table><tr><th class='l'>model</th><th class='l'>method"
            "</th><th class='l'>variant</th><th>items</th><th>scored</th><th>omitted</th><th>overall</th>"
            f"<th>cultural</th><th>universal</th></tr>{rows}</table>")


def requests_html(manifest: RunManifest) -> str:
    """Per stage and endpoint: questions, requests, retries by cause, failed by reason, tokens, latency."""
    rows = []
    stages = [(s.name, s.requests) for s in manifest.stages if s.requests]
    if manifest.extras.get("failed_stage_requests"):
        stages.append((f"{manifest.extras.get('failed_stage')} (failed)", manifest.extras["failed_stage_requests"]))
    for name, asked in stages:
        for key, r in asked.items():
            lat = r.get("latency_ms", {})
            ms = " / ".join("-" if lat.get(q) is None else f"{lat[q]:,.0f}" for q in ("p50", "p90", "p99"))
            causes = ", ".join(f"{c} {n}" for c, n in r.get("retries", {}).items()) or "-"
            failed = ", ".join(f"{c} {n}" for c, n in r.get("failed", {}).items()) or "-"
            rows.append(f"<tr><td class='l'>{escape(name)}</td><td class='l'>{escape(key)}</td>"
                        f"<td>{_fmt(r['questions'])}</td><td>{_fmt(r['requests'])}</td>"
                        f"<td>{_fmt(r.get('retries_total', 0))}</td><td class='l'>{escape(causes)}</td>"
                        f"<td class='l'>{escape(failed)}</td><td>{_fmt(r['prompt_tokens'])}</td>"
                        f"<td>{_fmt(r['completion_tokens'])}</td><td>{ms}</td></tr>")
    if not rows:
        return ""
    return ("<h2>Requests to endpoints</h2><p class='meta'>A question retried twice is three requests; a question "
            "failed when its retries ran out (its row rejected with the reason).</p><table><tr><th class='l'>stage"
            "</th><th class='l'>model @ endpoint</th><th>questions</th><th>requests</th><th>retries</th>"
            "<th class='l'>retries by cause</th><th class='l'>failed questions</th><th>prompt tokens</th>"
            "<th>completion tokens</th><th>latency ms p50 / p90 / p99</th></tr>" + "".join(rows) + "</table>")


def cpu_header(m: RunManifest) -> str:
    """The CPU column's header names what was measured (transforms/core/cpu_time.py): the driver and its local
    Ray processes, or on a cluster the driver only."""
    scopes = sorted({s.cpu_scope for s in m.stages if s.cpu_scope})
    return f"CPU-s ({escape('; '.join(scopes))})" if scopes else "CPU-s"


def cost_cells(s: Any, gpu: bool = False) -> str:
    """A stage's CPU-seconds and rows per CPU-second, the unit benchmarks/bench_crawl_cost.py prints; with `gpu`
    its GPU-seconds held and rows per GPU-second too (`piqaforge plan` reads these from the manifest)."""
    gpu_cells = ""
    if gpu:
        held, rate = s.gpu_seconds, s.rows_per_gpu_second
        gpu_cells = (f"<td>{'-' if held is None else f'{held:.2f}'}</td>"
                     f"<td>{'-' if rate is None else f'{rate:,.1f}'}</td>")
    if s.cpu_seconds is None:
        return "<td>-</td><td>-</td>" + gpu_cells
    rate = s.rows_per_cpu_second
    return f"<td>{s.cpu_seconds:.2f}</td><td>{'-' if rate is None else f'{rate:,.0f}'}</td>" + gpu_cells


def machine_line(m: RunManifest) -> str:
    """Where the rates were measured: the driver's machine (on a cluster the workers' are not recorded)."""
    if not m.machine:
        return ""
    gpus = ", ".join(m.machine.get("gpus") or []) or "no GPU"
    return (f"<p class='meta'>measured on the driver's machine: {escape(str(m.machine.get('cpu_model')))}, "
            f"{m.machine.get('logical_cpus')} logical CPUs, {escape(gpus)} (rows per CPU- or GPU-second feed "
            "<code>piqaforge plan</code>)</p>")


def render_report(manifest: RunManifest, runs_dir: Path | None = None) -> str:
    from transforms.core.manifest import conservation_errors

    # the manifest as recorded (its serialisation redacts secrets), never the in-memory one
    m = RunManifest.model_validate(manifest.model_dump(mode="json"))
    status_cls = "ok" if m.status == "succeeded" else "bad"
    errors = conservation_errors(m)
    rows = []
    gpu = any(s.gpu_seconds for s in m.stages)
    for s in m.stages:
        conserved = '<span class="ok">yes</span>' if s.conserved() else '<span class="bad">NO</span>'
        kind = escape(s.kind) + (f" <span class='meta'>(one pass with {escape(', '.join(n for n in s.fused_with if n != s.name))}"
                                 "; seconds shared out)</span>" if s.fused_with else "")
        rows.append(f"<tr><td>{s.index}</td><td class='l'>{escape(s.name)}</td><td class='l'>{kind}</td>"
                    f"<td>{_fmt(s.rows_in)}</td><td>{_fmt(s.rows_created)}</td>"
                    f"<td>{_fmt(s.rows_kept)}</td><td>{_fmt(s.dropped_total)}</td><td>{_fmt(s.rows_consumed)}</td>"
                    f"<td>{s.seconds:.1f}</td>{cost_cells(s, gpu)}"
                    f"<td>{conserved}</td><td>{'yes' if s.resumed else ''}</td></tr>")
    drops = []
    for s in m.stages:
        if not s.rows_dropped:
            continue
        lines = "".join(f"<tr><td class='l'>{escape(r)}</td><td>{_fmt(n)}</td>"
                        f"<td>{100 * n / max(1, s.rows_in + s.rows_created):.1f}%</td></tr>"
                        for r, n in sorted(s.rows_dropped.items(), key=lambda kv: (-kv[1], kv[0])))
        where = escape(s.outputs.get("rejected", ""))
        drops.append(f"<h3>{s.index:02d} {escape(s.name)}: {_fmt(s.dropped_total)} dropped of {_fmt(s.rows_in + s.rows_created)}</h3>"
                     f"<table><tr><th class='l'>reason</th><th>rows</th><th>of rows in + created</th></tr>{lines}</table>"
                     f"{reasons_svg(s.rows_dropped)}<p class='meta'>rejected rows: <code>{where}</code></p>")
    inputs = "".join(f"<li><code>{escape(str(i.get('path', '')))}</code> {_fmt(int(i.get('bytes', 0)))} bytes, "
                     f"sha256 {escape(str(i.get('sha256', ''))[:16])}…</li>" for i in m.inputs)
    outputs = "".join(f"<li>{escape(k)}: <code>{escape(v)}</code></li>" for k, v in m.outputs.items())
    conservation = ('<p class="ok">Every stage: rows in + created = kept + dropped + consumed (a consumed '
                    'row lives on in its children, listed in <code>lineage/</code>), and each stage reads what the '
                    'previous one kept.</p>' if not errors else
                    "<ul>" + "".join(f'<li class="bad">{escape(e)}</li>' for e in errors) + "</ul>")
    error = f"<h2>Error</h2><pre>{escape(m.error)}</pre>" if m.error else ""
    warned = [(s.name, w) for s in m.stages for w in s.warnings]
    warnings = ("<h2>Warnings</h2><p class='meta'>Recorded, not fatal: the rows went where the stage said.</p><ul>"
                + "".join(f'<li class="bad">{escape(n)}: {escape(w)}</li>' for n, w in warned) + "</ul>") if warned else ""
    judges = ""
    if runs_dir is not None:  # sections the run's recipe reports rendered (runs/<run id>/<name>.section.html)
        judges += "".join(p.read_text(encoding="utf-8") for p in sorted((runs_dir / m.run_id).glob("*.section.html")))
    waiting: dict[str, Any] = m.extras["review"] if isinstance(m.extras.get("review"), dict) else {}
    if m.status == "awaiting_review" and waiting.get("next"):
        error += (f"<h2>Waiting for review</h2><p>Review batch <code>{escape(str(waiting.get('batch')))}</code>. "
                  f"Next: {escape(str(waiting['next']))}</p>")
    from transforms.report.examples import EXAMPLES_CSS, render_examples

    examples = render_examples(m) if m.stages else ""
    evaluation = eval_html(m.extras.get("table") or []) if m.job == "evaluate" else ""
    git = m.code_version.get("git_sha", "unknown")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(m.run_id)}: run report</title>
<style>{CSS}{EXAMPLES_CSS}</style></head><body>
<h1>{escape(m.job)} — {escape(m.dataset)}</h1>
<p class="meta">run <code>{escape(m.run_id)}</code> · status <span class="{status_cls}">{escape(m.status)}</span>
 · started {escape(m.started_at)} · finished {escape(m.finished_at or '')} · code {escape(str(git))[:12]}
 {'(dirty)' if m.code_version.get('dirty') else ''}</p>
{error}
{chain_html(m, runs_dir)}
{evaluation}
<h2>Funnel: rows after each stage</h2>
{funnel_svg(m.funnel())}
<h2>Stages</h2>
{machine_line(m)}
<table><tr><th>#</th><th class='l'>stage</th><th class='l'>kind</th><th>rows in</th><th>created</th><th>kept</th>
<th>dropped</th><th>consumed</th><th>wall s</th><th>{cpu_header(m)}</th><th>rows / CPU-s</th>
{'<th>GPU-s held</th><th>rows / GPU-s</th>' if gpu else ''}<th>conserved</th><th>resumed</th></tr>{''.join(rows)}</table>
{conservation}
{warnings}
{requests_html(m)}
<h2>Drop reasons per stage</h2>
{''.join(drops) or '<p>No rows were dropped.</p>'}
{examples}
{judges}
<h2>Inputs</h2><ul>{inputs}</ul>
<h2>Outputs</h2><ul>{outputs}</ul>
</body></html>
"""


def write_report(manifest: RunManifest, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    runs_dir = path.parent.parent if path.parent.parent.name == "runs" else None
    path.write_text(render_report(manifest, runs_dir), encoding="utf-8")
    return path
