"""The end of a PIndicQA run: the measured figures into the manifest, the report, and the release."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from transforms.cluster.kmeans import elbow_svg
from transforms.core.lake import parquet_files, read_table
from transforms.core.manifest import RunManifest
from transforms.recipes.pindic.taxonomy import CATEGORIES, COLUMN


def _stage_rows(manifest: RunManifest, name: str) -> list[dict[str, Any]]:
    rec = next((s for s in manifest.stages if s.name == name), None)
    if rec is None or not parquet_files(Path(rec.outputs["kept"])):
        return []
    return read_table(Path(rec.outputs["kept"])).to_pylist()


def generated_coverage(rows: list[dict[str, Any]], classes: dict[str, int]) -> dict[str, Any]:
    used = {c: sorted({str(r[COLUMN[c]]) for r in rows if r.get(COLUMN[c])}) for c in CATEGORIES}
    return {"items": len(rows), "classes_used": {c: len(v) for c, v in used.items()},
            "coverage": {c: round(len(used[c]) / classes[c], 4) if classes.get(c) else None for c in CATEGORIES},
            "combinations": len({tuple(str(r.get(COLUMN[c])) for c in CATEGORIES) for r in rows}),
            "fell_back": sum(bool(r.get("combo_fallback")) for r in rows)}


def _count(rows: list[dict[str, Any]], col: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[str(r.get(col))] = out.get(str(r.get(col)), 0) + 1
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def section(f: dict[str, Any]) -> str:
    """The PIndicQA part of the run report: elbows, labels before/after, coverage, rounds, quality."""
    cl = f.get("clustering", {})
    elbows = "".join(elbow_svg(v["ks"], v["inertia"], v["chosen_k"], c) for c, v in cl.items())
    labels = [{"category": c, "labels before": v["labels_before"], "clusters after": v["clusters_after"]}
              for c, v in cl.items()]
    combos = f.get("combinations", {})
    cov = f.get("generated_coverage", {})
    tax = f.get("taxonomy", {})
    parts = [
        "<h2>PIndicQA</h2>",
        f"<p class='meta'>taxonomy <code>{escape(str(tax.get('path')))}</code> · status "
        f"<b>{escape(str(tax.get('status')))}</b> · classes {escape(json.dumps(tax.get('classes')))}</p>",
        "<h3>Open labels before / after clustering</h3>", _table(labels),
        "<h3>Elbow curves (inertia by k, chosen k in red)</h3>", f"<div>{elbows}</div>",
        "<h3>Taxonomy coverage</h3>",
        f"<p>pool: {escape(json.dumps(combos.get('taxonomy_coverage_pool')))}; non-empty combinations "
        f"{combos.get('non_empty_combinations')} of {combos.get('possible_combinations')}</p>",
        f"<p>generated: {escape(json.dumps(cov.get('coverage')))}; combinations {cov.get('combinations')}, "
        f"served by the nearest non-empty combination: {cov.get('fell_back')}</p>",
        "<h3>Generation rounds per locale</h3>", _table(f.get("rounds_table", [])),
        "<h3>Diversity of generated goals</h3>", _table([f.get("diversity_generated_goals", {})]),
        "<h3>Correction per language (chrF of MT vs correction, edit rate)</h3>",
        _table([{"lang": k, **v} for k, v in (f.get("correction") or {}).items()]),
        "<h3>Translation engine vs human references</h3>",
        f"<pre>{escape(json.dumps(_short_quality(f.get('translation_reference_chrf', {})), indent=1))}</pre>",
    ]
    if "release" in f:
        parts.append(f"<h3>Release</h3><pre>{escape(json.dumps(f['release'], indent=1, default=str))}</pre>")
    return "".join(parts)


def _short_quality(q: dict[str, Any]) -> dict[str, Any]:
    pairs = q.get("pairs") or {}
    return {p: {k: v.get(k) for k in ("n", "chrf", "bleu", "model", "failed")} for p, v in pairs.items()} or q
