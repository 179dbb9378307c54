"""Finished runs as text: the funnel table, the judges' figures, what `piqaforge run` prints at its end
(`run_summary`), and what `piqaforge runs` and `piqaforge show RUN_ID` print from the lake's manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transforms.core.liveness import effective_status
from transforms.core.manifest import RunManifest


def count_text(x: int | float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


def funnel_table(manifest: RunManifest) -> str:
    rows = [("stage", "kind", "in", "created", "kept", "dropped", "consumed", "s")]
    for s in manifest.stages:
        rows.append((s.name, s.kind, count_text(s.rows_in), count_text(s.rows_created), count_text(s.rows_kept),
                     count_text(s.dropped_total), count_text(s.rows_consumed), f"{s.seconds:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]], left: int = 1, indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) if i < left else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]


def _f(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.3f}"
    return count_text(x) if isinstance(x, int) else str(x)


def judges_lines(judges: dict[str, Any]) -> list[str]:
    """The judges' figures against the labels (manifest extras `judges`, docs/judges.md), as text."""
    out: list[str] = []
    run = judges.get("run") or {}
    if run:
        out.append(f"kept rows against the labels: {_f(run.get('kept_rows'))} kept after {run.get('kept_stage')}; "
                   f"from 3i4k/chatbot {_f(run.get('kept_from_negative_sources'))} "
                   f"({_f(run.get('kept_share_from_negative_sources'))})")
        rows: list[tuple[str, ...]] = [("group", "rows", "physical", "kept", "precision", "recall", "AUC")]
        for group, m in (run.get("groups") or {}).items():
            kept = (m.get("tp") or 0) + (m.get("fp") or 0)
            rows.append((group, _f(m.get("rows")), _f(m.get("positives")), _f(kept), _f(m.get("precision")),
                         _f(m.get("recall")), _f(m.get("auc"))))
        out += _table(rows) if len(rows) > 1 else []
    ev = judges.get("judge_eval") or {}
    if ev.get("judges"):
        out.append(f"judge-eval on {_f(ev.get('rows'))} labelled rows ({_f(ev.get('positives'))} physical):")
        table: list[tuple[str, ...]] = [("judge", "kind", "precision", "recall", "AUC", "pass rate")]
        for name, j in ev["judges"].items():
            table.append((name, str(j.get("kind", "")), _f(j.get("precision")), _f(j.get("recall")), _f(j.get("auc")),
                          _f(j.get("pass_rate"))))
        out += _table(table, left=2)
    return out


def run_summary(manifest: RunManifest, report: Path | None = None) -> str:
    """What `piqaforge run` prints at the end: the funnel, the outputs, the report, the judges' figures."""
    out = [f"run {manifest.run_id}  {manifest.status}", "", funnel_table(manifest), ""]
    out += [f"{k:<10} {v}" for k, v in manifest.outputs.items()]
    if report is not None and report.exists():
        out.append(f"{'report':<10} {report}")
    from transforms.core.manifest import recorded_figures

    figures = manifest.extras.get("judges") or recorded_figures(report.parent if report else None, "judges")
    if figures:
        out += ["", *judges_lines(figures)]
    waiting: dict[str, Any] = manifest.extras["review"] if isinstance(manifest.extras.get("review"), dict) else {}
    if manifest.status == "awaiting_review" and waiting.get("next"):
        out += ["", f"review batch {waiting.get('batch')}: {waiting['next']}"]
    return "\n".join(out)


def listed_status(manifest: RunManifest, run_dir: Path | None) -> str:
    """The status `runs` and `show` print: `interrupted` for a running run whose driver is gone, `superseded`
    for a finished review import that a later import of the same batch replaced (`review import --replace`)."""
    status = effective_status(manifest.status, manifest.extras.get("driver"), run_dir) if run_dir \
        else manifest.status
    return "superseded" if status == "succeeded" and manifest.extras.get("superseded_by") else status


def show_run(manifest: RunManifest, report: Path | None = None) -> str:
    status = listed_status(manifest, report.parent if report else None)
    out = [f"run {manifest.run_id}  job {manifest.job}  status {status}",
           f"started {manifest.started_at}  finished {manifest.finished_at or '-'}"]
    if manifest.extras.get("superseded_by"):
        out.append(f"superseded by {manifest.extras['superseded_by']}")
    if manifest.parents:
        out.append("parents " + ", ".join(manifest.parents))
    if manifest.error:
        out.append(f"error {manifest.error}")
    out += ["", funnel_table(manifest), ""]
    for s in manifest.stages:
        if s.rows_dropped:
            by_count = sorted(s.rows_dropped.items(), key=lambda kv: -kv[1])
            reasons = ", ".join(f"{r} {count_text(n)}" for r, n in by_count)
            out.append(f"dropped by {s.name}: {reasons}")
    out += [""] + [f"{k:<10} {v}" for k, v in manifest.outputs.items()]
    if report is not None and report.exists():
        out.append(f"{'report':<10} {report}")
    waiting: dict[str, Any] = manifest.extras["review"] if isinstance(manifest.extras.get("review"), dict) else {}
    if manifest.status == "awaiting_review" and waiting.get("next"):
        out.append(f"{'next':<10} {waiting['next']}")
    return "\n".join(out)


def list_runs(runs_dir: Path) -> str:
    rows = [("run", "job", "status", "started", "in → kept", "parents")]
    manifests = []
    for path in sorted(runs_dir.glob("*/manifest.json")):
        try:
            manifests.append(RunManifest.load(path))
        except (OSError, ValueError):
            continue
    for m in sorted(manifests, key=lambda m: m.started_at):
        funnel = m.funnel()
        flow = f"{count_text(funnel[0][1])} → {count_text(funnel[-1][1])}" if funnel else "-"
        status = listed_status(m, runs_dir / m.run_id)  # a dead driver: interrupted; a replaced import: superseded
        rows.append((m.run_id, m.job, status, m.started_at[:19], flow, ",".join(m.parents) or "-"))
    if len(rows) == 1:
        return f"no runs in {runs_dir}"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
