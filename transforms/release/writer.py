"""Write a gated release: `<lake>/release/<dataset>/<version>/`.

    items.parquet             the items in the common schema (bookkeeping columns removed)
    <dataset>.jsonl + <dataset>-labels.lst   PIQA's own format
    <dataset>.csv             the prompt/solution0/solution1/label form (J-PIQA, Russian PIQA)
    <dataset>.global_piqa.tsv/.jsonl   the Global PIQA shape + the recipe's columns (global_piqa.py)
    README.md                 the dataset card; report.html the same, self-contained, with plots
    expectations.json         every check of the gate; audit.json when the artifact audit ran
    plots/*.png
    RELEASED                  only when every expectation passed

A failed gate still writes everything (so the report can be read) but no RELEASED marker; a
version that was released is never overwritten.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, Field

from transforms.core import columns as C
from transforms.core.manifest import RunManifest
from transforms.piqa.formats import write_items, write_piqa, write_prompt_solution
from transforms.piqa.global_piqa import card_section as global_piqa_card_section
from transforms.piqa.global_piqa import write_global_piqa
from transforms.release.card import card_markdown, item_stats, public_stats, render_plots, report_html

RELEASED = "RELEASED"
RUN_FILE = "run.json"  # the run that wrote the release: an evaluation of it names that run as its parent
DROP_COLUMNS = (*C.BOOKKEEPING, C.DUPLICATE_OF)


class ReleaseError(RuntimeError):
    """The release cannot be written (e.g. the version was already released)."""


class ReleaseResult(BaseModel):
    path: str
    released: bool
    reasons: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    audit: dict[str, Any] | None = None


def find_manifest(input_path: str | Path) -> RunManifest | None:
    """The run manifest behind `<lake>/curated/<dataset>/<run_id>[/...]` or a release folder
    `<lake>/release/<dataset>/<version>[/items.parquet]`, when the input came from a run."""
    path = Path(input_path).resolve()
    parts = path.parts
    folder = path if path.is_dir() else path.parent
    if (folder / RUN_FILE).exists() and len(folder.parents) > 2 and folder.parents[1].name == "release":
        run_id = json.loads((folder / RUN_FILE).read_text(encoding="utf-8")).get("run_id")
        manifest = folder.parents[2] / "runs" / str(run_id) / "manifest.json"
        return RunManifest.load(manifest) if run_id and manifest.exists() else None
    if "curated" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("curated")
    if len(parts) < i + 3:
        return None
    manifest = Path(*parts[:i]) / "runs" / parts[i + 2] / "manifest.json"
    return RunManifest.load(manifest) if manifest.exists() else None


def run_audit(table: pa.Table, bound: float) -> tuple[dict[str, Any] | None, str | None]:
    """The artifact audit (transforms/eval/audit.py) when it is installed; (None, None) otherwise."""
    try:
        from transforms.eval.audit import audit_markdown, audit_release
    except ImportError:
        return None, None
    try:
        audit = audit_release(table, bound=bound)
    except Exception as err:  # the audit informs the report; it must not take the release down
        return {"error": f"{type(err).__name__}: {err}"}, f"### Artifact audit\n\ncould not run: {err}\n"
    return audit, audit_markdown(audit)


def release_table(table: pa.Table) -> pa.Table:
    return table.drop_columns([c for c in DROP_COLUMNS if c in table.column_names])


def build_release(table: pa.Table, gate: dict[str, Any], *, out_dir: str | Path, dataset: str, recipe: str,
                  version: str, manifest: RunManifest | None = None, audit: bool = True,
                  audit_bound: float = 0.6, run_id: str | None = None,
                  sections: list[str] | None = None, extra_files: dict[str, str] | None = None) -> ReleaseResult:
    """Write the release files for `table` given the gate's result dict (`GateResult.model_dump()`);
    `run_id` (the release run) is recorded in `run.json`."""
    out = Path(out_dir)
    if (out / RELEASED).exists():
        raise ReleaseError(f"{out} was already released; choose another --version")
    if out.exists():
        shutil.rmtree(out)
    (out / "plots").mkdir(parents=True)
    table = release_table(table)
    files: list[str] = []

    def wrote(name: str) -> None:
        files.append(name)

    can_export = all(c in table.column_names for c in ("goal", "sol1", "sol2", "label"))
    extra_sections: list[str] = list(sections or [])
    write_items(table, out / "items.parquet")
    wrote("items.parquet")
    if can_export:
        write_piqa(table, out / f"{dataset}.jsonl", out / f"{dataset}-labels.lst")
        wrote(f"{dataset}.jsonl")
        wrote(f"{dataset}-labels.lst")
        write_prompt_solution(table, out / f"{dataset}.csv")
        wrote(f"{dataset}.csv")
        global_piqa = write_global_piqa(table, out, f"{dataset}.global_piqa", recipe)
        for name in global_piqa["files"]:
            wrote(name)
        extra_sections.append(global_piqa_card_section(global_piqa))
    for name, text in (extra_files or {}).items():  # the recipe's own files, before the card lists them
        (out / name).write_text(text, "utf-8")
        wrote(name)
    stats = item_stats(table, manifest.funnel() if manifest else None)
    plots = render_plots(stats)
    for name, data in plots.items():
        (out / "plots" / f"{name}.png").write_bytes(data)
    audit_result, audit_md = run_audit(table, audit_bound) if audit and can_export else (None, None)
    (out / "expectations.json").write_text(json.dumps(gate, indent=2, ensure_ascii=False, default=str), "utf-8")
    wrote("expectations.json")
    if audit_result is not None:
        (out / "audit.json").write_text(json.dumps(audit_result, indent=2, default=str), "utf-8")
        wrote("audit.json")
    title = f"{dataset}"
    (out / "stats.json").write_text(json.dumps(public_stats(stats), indent=2, ensure_ascii=False), "utf-8")
    wrote("stats.json")
    wrote("report.html")
    wrote("README.md")
    (out / "report.html").write_text(report_html(f"{title} {version}", stats, gate, plots, audit_result), "utf-8")
    (out / "README.md").write_text(card_markdown(stats, title=title, recipe=recipe, version=version, gate=gate,
                                                 audit_md=audit_md, files=files, plots=list(plots),
                                                 sections=extra_sections), "utf-8")
    if run_id:
        (out / RUN_FILE).write_text(json.dumps({"run_id": run_id}) + "\n", "utf-8")
    reasons = list(gate.get("reasons", [])) + audit_refusals(audit_result)
    if gate.get("success") and not reasons:
        stamp = dt.datetime.now(dt.UTC).isoformat()
        (out / RELEASED).write_text(json.dumps({"released_at": stamp, "items": table.num_rows,
                                                "suite": gate.get("suite")}) + "\n", "utf-8")
    return ReleaseResult(path=str(out), released=bool(gate.get("success")) and not reasons, reasons=reasons,
                         files=files, audit=audit_result)


def audit_refusals(audit: dict[str, Any] | None) -> list[str]:
    """A flagged artifact audit refuses the release: a solution-only or goal-only baseline above the bound
    means the items can be answered without reading them as a whole."""
    if not audit or not audit.get("flagged"):
        return []
    out = []
    for name in audit.get("flags", []):
        b = audit["baselines"][name]
        ci = f" (95% CI {b['ci_low']:.2f}-{b['ci_high']:.2f})" if b.get("ci_low") is not None else ""
        out.append(f"artifact audit: the {name} baseline answers {b['acc']:.2f}{ci} of {audit['n']} items, "
                   f"above the bound {audit['bound']:.2f}")
    return out
