"""What a finished ko-piqa run kept, measured against labels: the figures of the run report.

The rows the cascade kept are those the ensemble stage kept (the annotation sample after it only
draws from them). Labelled rows are matched by id; a labelled row that an earlier stage dropped (a
near-duplicate, say) counts as not kept. Groups: KiN questions by docId parity (even = the seed
labels the prefilter was trained on, odd = the held-out set), and every kept row by source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.lake import read_table
from transforms.judge.metrics import judge_metrics
from transforms.recipes.ko_piqa.seeds import kin_parity, load_labels

NEGATIVE_SOURCES = ("3i4k", "chatbot_songys")


class JudgesReport(BaseModel):
    """Which labels a ko-piqa run is measured against in its report (docs/judges.md)."""

    model_config = ConfigDict(extra="forbid")

    labels: list[str] = Field(default_factory=lambda: ["lake/samples/ko_seed_labels.jsonl",
                                                       "lake/samples/ko_heldout_labels.jsonl"],
                              description="Labelled JSONL files; missing files are skipped; [] turns this off.")
    judge_eval: str | None = Field("lake/judges/judges.json", description="A `piqaforge judge-eval` result to "
                                   "show beside the run's own figures, when the file exists.")


def _stage_rows(manifest: Any, name: str) -> tuple[pa.Table, pa.Table]:
    for record in manifest.stages:
        if record.name == name:
            return read_table(Path(record.outputs["kept"])), read_table(Path(record.outputs["rejected"]))
    return pa.table({}), pa.table({})


def _column(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


# The prefilter stages' names in a run manifest ("prefilter": manifests written before 2026-11-28).
PREFILTERS = ("supervised_prefilter", "distilled_prefilter", "prefilter")


def evaluate_run(manifest: Any, label_paths: list[str], examples: int = 20) -> dict[str, Any]:
    prefilter = next((s.name for s in manifest.stages if s.name in PREFILTERS), "supervised_prefilter")
    last = "ensemble" if any(s.name == "ensemble" for s in manifest.stages) else prefilter
    kept_table, _ = _stage_rows(manifest, last)
    pre_kept, pre_rejected = _stage_rows(manifest, prefilter)
    ens_kept, ens_rejected = _stage_rows(manifest, "ensemble")
    kept = {str(i) for i in _column(kept_table, C.ID)}
    score: dict[str, float] = {}
    for t in (pre_kept, pre_rejected):
        score.update({str(i): s for i, s in zip(_column(t, C.ID), _column(t, "prefilter_score"), strict=True)})
    where: dict[str, str] = {str(i): "ensemble" for i in _column(ens_rejected, C.ID)}
    where.update({str(i): "prefilter" for i in _column(pre_rejected, C.ID)})

    rows = [r for p in label_paths for r in load_labels(p, allow_held_out=True)]
    groups: dict[str, Any] = {}
    for g in ("naver_kin/even", "naver_kin/odd"):
        sel = [r for r in rows if f"naver_kin/{kin_parity(r.url)}" == g]
        if sel:
            y = np.array([bool(r.value("physical")) for r in sel])
            v = np.array([r.id in kept for r in sel])
            s = np.array([score.get(r.id, np.nan) for r in sel], dtype=float)
            groups[g] = judge_metrics(y, v, s) | {"not_reaching_prefilter": int(np.isnan(s).sum())}
    members = member_figures(pa.concat_tables([ens_kept, ens_rejected], promote_options="default")
                             if ens_kept.num_rows or ens_rejected.num_rows else pa.table({}), rows)
    sources = [str(x) for x in _column(kept_table, "source")]
    by_source = {s: sources.count(s) for s in sorted(set(sources))}
    from_negatives = sum(by_source.get(s, 0) for s in NEGATIVE_SOURCES)
    labelled = {r.id: r for r in rows}
    kept_ex = sorted((r for r in rows if r.id in kept), key=lambda r: -score.get(r.id, 0.0))[:examples]
    rejected_ex = sorted((r for r in rows if r.id not in kept and r.id in score),
                         key=lambda r: -score.get(r.id, 0.0))[:examples]

    def example(r: Any) -> dict[str, Any]:
        return {"id": r.id, "physical": r.value("physical"), "parity": kin_parity(r.url), "score": score.get(r.id),
                "dropped_by": where.get(r.id), "text": " ".join(r.text.split())[:90]}

    return {"labels": [str(p) for p in label_paths], "kept_stage": last, "kept_rows": len(kept),
            "kept_by_source": by_source, "kept_from_negative_sources": from_negatives,
            "kept_share_from_negative_sources": from_negatives / len(kept) if kept else None,
            "labelled_rows_matched": sum(1 for i in labelled if i in score or i in kept),
            "groups": groups, "members": members, "examples": {"kept": [example(r) for r in kept_ex],
                                           "rejected": [example(r) for r in rejected_ex]}}


def member_figures(ens: pa.Table, rows: list[Any]) -> dict[str, Any]:
    """Each ensemble member on the rows it was asked about (they all passed the prefilter): how many
    it passed, and on the labelled ones its precision and recall (a "no" on a positive is recall lost)."""
    label = {r.id: bool(r.value("physical")) for r in rows}
    ids = [str(i) for i in _column(ens, C.ID)]
    out = {}
    for name in ens.column_names:
        if not (name.startswith("ens_") and name.endswith("_verdict")):
            continue
        verdicts = _column(ens, name)
        asked = [(i, bool(v)) for i, v in zip(ids, verdicts, strict=True) if v is not None]
        lab = [(label[i], v) for i, v in asked if i in label]
        y = np.array([a for a, _ in lab], dtype=bool)
        v = np.array([b for _, b in lab], dtype=bool)
        out[name[4:-8]] = {"asked": len(asked), "said_yes": sum(b for _, b in asked),
                           "labelled": judge_metrics(y, v) if lab else None}
    return out
