"""Write a gated release: `<lake>/release/<dataset>/<version>/`, a Hub dataset repository as it stands.

    README.md                  the dataset card: YAML metadata (transforms/release/hub.py), then the prose
    data/<lang>/test-00000-of-00001.parquet   the benchmark columns + the provenance the card declares
    lm_eval/                   lm-evaluation-harness tasks over the configs (no absolute path)
    extras/                    side files, never data: expectations.json, stats.json, audit.json,
                               report.html, plots/*.png, run.json, the recipe's files, and
                               formats/ (PIQA JSONL + labels, the prompt/solution CSV, Global PIQA TSV/JSONL)
    RELEASED                   only when every expectation passed, with the sha256 of every other file

The full items table (every column the runs added) stays in the lake: the release run's curated output.
A failed gate still writes everything (so the report can be read) but no RELEASED marker; a version
that was released is never overwritten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from transforms.core import columns as C
from transforms.core.manifest import RunManifest
from transforms.piqa.formats import write_piqa, write_prompt_solution
from transforms.piqa.global_piqa import card_section as global_piqa_card_section
from transforms.piqa.global_piqa import write_global_piqa
from transforms.release.card import card_markdown, item_stats, public_stats, render_plots, report_html
from transforms.release.licences import SourceSpec

RELEASED = "RELEASED"
EXTRAS = "extras"
RUN_FILE = "run.json"  # in extras/: the run that wrote the release; an evaluation of it names that run as its parent
DROP_COLUMNS = (*C.BOOKKEEPING, C.DUPLICATE_OF)


class HubSettings(BaseModel):
    """What the card's metadata and prose need beyond the items (flow/release.py fills it)."""

    licence: str = Field("other", description="The release's licence, a Hub licence id.")
    sources: list[SourceSpec] = Field(default_factory=list, description="The sources the items were made from.")
    notes: list[str] = Field(default_factory=list, description="The recipe's prose about its sources.")
    columns: list[str] | None = Field(None, description="Provenance columns the card declares (None: the defaults).")
    repo_id: str | None = Field(None, description="The Hub dataset id it will be published as (lm-eval tasks).")
    pretty_name: str | None = None
    people: Literal["expert-generated", "crowdsourced"] = Field(
        "expert-generated", description="annotations_creators when people reviewed the items.")
    agreement: dict[str, Any] | None = Field(None, description="The review's agreement figures "
                                             "(transforms.piqa.item_checks.agreement_figures).")
    added_by: dict[str, list[str]] = Field(default_factory=dict, description="Column -> the recipe's stages that "
                                           "declare it in `release_columns` (the card's column table).")


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
    if folder.name in ("data", EXTRAS) or folder.parent.name == "data":  # a file inside a release folder
        folder = folder.parent if folder.name in ("data", EXTRAS) else folder.parent.parent
    if (folder / EXTRAS / RUN_FILE).exists() and len(folder.parents) > 2 and folder.parents[1].name == "release":
        run_id = json.loads((folder / EXTRAS / RUN_FILE).read_text(encoding="utf-8")).get("run_id")
        manifest = folder.parents[2] / "runs" / str(run_id) / "manifest.json"
        return RunManifest.load(manifest) if run_id and manifest.exists() else None
    if "curated" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("curated")
    if len(parts) < i + 3:
        return None
    manifest = Path(*parts[:i]) / "runs" / parts[i + 2] / "manifest.json"
    return RunManifest.load(manifest) if manifest.exists() else None


AUDIT_OFF = "release.audit: false"


def run_audit(table: pa.Table, bound: float) -> tuple[dict[str, Any], str]:
    """The artifact audit (transforms/eval/audit.py). An audit that cannot run (a missing extra, a bad bound,
    an error) does not pass silently: its result records the error and `audit_refusals` refuses the release
    with it. A recipe that means to publish without the audit says so (`audit: false`)."""
    try:
        from transforms.eval.audit import audit_markdown, audit_release

        audit = audit_release(table, bound=bound)
    except Exception as err:  # any failure: the release is refused with this reason, never published unaudited
        error = f"{type(err).__name__}: {err}"
        return {"error": error}, f"### Artifact audit\n\ncould not run: {error}\n"
    return audit, audit_markdown(audit)


def release_table(table: pa.Table) -> pa.Table:
    return table.drop_columns([c for c in DROP_COLUMNS if c in table.column_names])


def build_release(table: pa.Table, gate: dict[str, Any], *, out_dir: str | Path, dataset: str, recipe: str,
                  version: str, manifest: RunManifest | None = None, audit: bool = True,
                  audit_bound: float = 0.6, run_id: str | None = None,
                  sections: list[str] | None = None, extra_files: dict[str, str] | None = None,
                  hub: HubSettings | None = None) -> ReleaseResult:
    """Write the release files for `table` given the gate's result dict (`GateResult.model_dump()`);
    `run_id` (the release run) is recorded in `extras/run.json`."""
    from transforms.release import hub as H
    from transforms.release import hub_card
    from transforms.release.licences import licence_conflicts

    hub = hub or HubSettings()
    out = Path(out_dir)
    if (out / RELEASED).exists():
        raise ReleaseError(f"{out} was already released; choose another --version")
    if out.exists():
        shutil.rmtree(out)
    extras = out / EXTRAS
    (extras / "plots").mkdir(parents=True)
    table = release_table(table)
    files: list[str] = []
    reasons: list[str] = []
    can_export = all(c in table.column_names for c in ("id", "lang", "goal", "sol1", "sol2", "label")) \
        and not any(r.startswith("types") or r.startswith("column_exists") for r in gate.get("reasons", []))
    extra_sections: list[str] = list(sections or [])
    configs: dict[str, pa.Table] = {}
    published = table
    if can_export:
        published = H.data_table(table, hub.columns)
        configs = H.split_configs(published)
        for config, part in configs.items():
            path = out / H.data_path(config)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, path)
            files.append(H.data_path(config))
            reasons += H.undeclared_columns(pq.read_schema(path).empty_table(), hub.columns)
        formats = extras / "formats"
        write_piqa(published, formats / f"{dataset}.jsonl", formats / f"{dataset}-labels.lst")
        write_prompt_solution(published, formats / f"{dataset}.csv")
        global_piqa = write_global_piqa(published, formats, f"{dataset}.global_piqa", recipe)
        files += [f"{EXTRAS}/formats/{n}" for n in (f"{dataset}.jsonl", f"{dataset}-labels.lst", f"{dataset}.csv",
                                                      *global_piqa["files"])]
        extra_sections.append(global_piqa_card_section(global_piqa).replace(
            "## Global PIQA shape", "## Global PIQA shape and other formats (extras/formats/)"))
        from transforms.eval.lm_eval_export import export_release_tasks

        lm_eval = export_release_tasks(out / "lm_eval", dataset, version, {c: t.num_rows for c, t in configs.items()},
                                       data_files={c: H.data_path(c) for c in configs}, repo_id=hub.repo_id)
        files += [f"lm_eval/{f}" for f in lm_eval["files"]]
    for name, text in (extra_files or {}).items():  # the recipe's own files, before the card lists them
        (extras / name).write_text(text, "utf-8")
        files.append(f"{EXTRAS}/{name}")
    stats = item_stats(table, manifest.funnel() if manifest else None)
    plots = render_plots(stats)
    for name, data in plots.items():
        (extras / "plots" / f"{name}.png").write_bytes(data)
    audit_result: dict[str, Any] | None = None
    audit_md: str | None = None
    if audit and can_export:
        audit_result, audit_md = run_audit(table, audit_bound)
    elif not audit:
        audit_md = f"### Artifact audit\n\nnot run: switched off by the recipe (`{AUDIT_OFF}`).\n"
    (extras / "expectations.json").write_text(json.dumps(gate, indent=2, ensure_ascii=False, default=str), "utf-8")
    if audit_result is not None:
        (extras / "audit.json").write_text(json.dumps(audit_result, indent=2, default=str), "utf-8")
    (extras / "stats.json").write_text(json.dumps(public_stats(stats), indent=2, ensure_ascii=False), "utf-8")
    (extras / "report.html").write_text(report_html(f"{dataset} {version}", stats, gate, plots, audit_result), "utf-8")
    files += [f"{EXTRAS}/{n}" for n in ("expectations.json", *(["audit.json"] if audit_result else []),
                                          "stats.json", "report.html")]
    files.append("README.md")
    conflicts = licence_conflicts(hub.licence, hub.sources)
    if can_export:
        reasons += conflicts
    review = stats.get("review")
    prose = [hub_card.review_section(review, hub.agreement),
             hub_card.sources_section(hub.licence, hub.sources, hub.notes, conflicts)]
    if configs:
        prose.insert(0, hub_card.usage_section(dataset, {c: t.num_rows for c, t in configs.items()}, hub.repo_id,
                                               lm_eval["groups"], lm_eval["hub_groups"]))
        prose.append(hub_card.columns_section(list(published.column_names), hub.added_by))
    prose.append(hub_card.citation_section(hub.pretty_name or dataset, version, hub.repo_id, hub.sources))
    reasons = list(gate.get("reasons", [])) + audit_refusals(audit_result) + reasons
    released = bool(gate.get("success")) and not reasons
    verdict = {**gate, "success": released, "reasons": reasons}  # the card says what was decided, refusals too
    body = card_markdown(stats, title=dataset, recipe=recipe, version=version, gate=verdict, audit_md=audit_md,
                         files=files, plots=list(plots), sections=extra_sections, plots_dir=f"{EXTRAS}/plots",
                         lead=prose)
    head = ""
    if configs:
        meta = H.card_metadata(configs, licence=hub.licence, pretty_name=hub.pretty_name or dataset, review=review,
                               source_ids=[s.hub_id or s.name for s in hub.sources], people=hub.people)
        head = H.front_matter(meta)
    (out / "README.md").write_text(head + body, "utf-8")
    if run_id:
        (extras / RUN_FILE).write_text(json.dumps({"run_id": run_id}) + "\n", "utf-8")
    if released and configs:  # what a user will load: the card's figures and the rows' agreement, recomputed
        from transforms.release.recheck import recheck_release

        recheck = recheck_release(out)
        if recheck:
            reasons += recheck
            released = False
            verdict = {**gate, "success": False, "reasons": reasons}
            body = card_markdown(stats, title=dataset, recipe=recipe, version=version, gate=verdict,
                                 audit_md=audit_md, files=files, plots=list(plots), sections=extra_sections,
                                 plots_dir=f"{EXTRAS}/plots", lead=prose)
            (out / "README.md").write_text(head + body, "utf-8")
    if released:
        stamp = dt.datetime.now(dt.UTC).isoformat()
        (out / RELEASED).write_text(json.dumps({"released_at": stamp, "items": table.num_rows,
                                                "suite": gate.get("suite"), "files": checksums(out)},
                                               indent=1) + "\n", "utf-8")
    return ReleaseResult(path=str(out), released=released, reasons=reasons, files=files, audit=audit_result)


def checksums(folder: Path) -> dict[str, str]:
    """sha256 of every file of a release folder but the marker, by path relative to it."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != RELEASED):
        out[path.relative_to(folder).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def audit_refusals(audit: dict[str, Any] | None) -> list[str]:
    """A flagged artifact audit refuses the release: a solution-only or goal-only baseline above the bound
    means the items can be answered without reading them as a whole. An audit that could not run refuses it
    too, with its reason: a check that did not run is not a check that passed."""
    if audit and audit.get("error"):
        return [f"artifact audit could not run: {audit['error']} (fix it, or switch the audit off explicitly "
                f"with `{AUDIT_OFF}` in the recipe)"]
    if not audit or not audit.get("flagged"):
        return []
    out = []
    for name in audit.get("flags", []):
        b = audit["baselines"][name]
        ci = f" (95% CI {b['ci_low']:.2f}-{b['ci_high']:.2f})" if b.get("ci_low") is not None else ""
        out.append(f"artifact audit: the {name} baseline answers {b['acc']:.2f}{ci} of {audit['n']} items, "
                   f"above the bound {audit['bound']:.2f}")
    return out
