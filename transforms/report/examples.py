"""Example rows for the run report: what each stage kept and dropped, and what a creating stage made.

Everything is read back from the lake after the run, and cheaply, so a 3M-row run costs the same as
a small one: a seeded pick of at most two files per zone and one row group of each (the seed is the
run id and the stage name, so a report rebuilt later shows the same rows). Text is cut and every
value is HTML-escaped. The columns shown are the row's id and text, then the stage's own: the
columns it declares it writes and those its output has that its input did not (scores, verdicts).
LLM stages' prompts and replies are in prompts.py.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.core import columns as C
from transforms.core.lake import parquet_files
from transforms.core.manifest import RunManifest, StageRecord
from transforms.report.sampling import CELL_CHARS, N_ROWS, cell, pick, sample_zone, seeded  # noqa: F401 (re-exported)

LEAD = (C.ID, C.TEXT, "goal", "sol1", "sol2", "label")
HIDDEN = {C.STATUS, C.DROP_STAGE, "_part", "_row", "_born", "_role", "_src"}
MAX_OWN = 6
PARENT_SEARCH_FILES = 64  # a parent is looked up in at most this many of the input's files

EXAMPLES_CSS = """
table.ex td{text-align:left;vertical-align:top} table.ex td:first-child{white-space:nowrap} table.ex td.t{max-width:420px;white-space:pre-wrap;word-break:break-word}
details{margin:.4rem 0} summary{cursor:pointer;font-weight:600} .kid{margin-left:2rem}
pre.msg{white-space:pre-wrap;word-break:break-word;max-height:18rem}
"""


def own_columns(rec: StageRecord, schema: pa.Schema, before: pa.Schema | None) -> list[str]:
    """The stage's own columns: those it declares it writes, then those its input did not have."""
    declared = [c for c in rec.config.get("writes", []) if c in schema.names]
    new = [c for c in schema.names if before is not None and c not in before.names]
    if before is None and rec.kind == "source":
        new = list(schema.names)
    out = []
    for c in [*declared, *new]:
        if c not in out and c not in LEAD and c not in HIDDEN and c != C.DROP_REASON:
            out.append(c)
    return out[:MAX_OWN]


def zone_schema(path: Path | None) -> pa.Schema | None:
    files = parquet_files(path) if path else []
    return pq.read_schema(files[0]) if files else None


def rows_table(table: pa.Table, columns: list[str], caption: str = "") -> str:
    cols = [c for c in columns if c in table.schema.names]
    head = "".join(f"<th class='l'>{escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td class='t'>{cell(table.column(c)[i].as_py())}</td>" for c in cols) + "</tr>"
                   for i in range(table.num_rows))
    cap = f"<caption class='l meta'>{escape(caption)}</caption>" if caption else ""
    return f"<table class='ex'>{cap}<tr>{head}</tr>{body}</table>"


def stage_examples(manifest: RunManifest, rec: StageRecord) -> str:
    """A stage's kept and dropped rows (and, for a creating stage, parents with their children)."""
    prev = manifest.stages[rec.index - 1] if rec.index > 0 else None
    kept_dir = Path(rec.outputs["kept"]) if rec.outputs.get("kept") else None
    rejected_dir = Path(rec.outputs["rejected"]) if rec.outputs.get("rejected") else None
    before = zone_schema(Path(prev.outputs["kept"])) if prev and prev.outputs.get("kept") else None
    kept = pick(sample_zone(kept_dir, seeded(manifest.run_id, rec.name, "kept")), seeded(manifest.run_id, rec.name))
    dropped = pick(sample_zone(rejected_dir, seeded(manifest.run_id, rec.name, "rejected")),
                   seeded(manifest.run_id, rec.name), by=C.DROP_REASON)
    parts = []
    for label, table, total, extra in (("kept", kept, rec.rows_kept, []),
                                       ("dropped", dropped, rec.dropped_total, [C.DROP_REASON])):
        if label == "kept" and rec.fused_with and kept_dir is None:  # transforms/core/fusion.py
            nxt = rec.fused_with[rec.fused_with.index(rec.name) + 1] if rec.name in rec.fused_with[:-1] else "the next"
            parts.append(f"<p class='meta'>kept: {total:,} rows, handed to {escape(nxt)} in the same pass (fused with "
                         f"{escape(', '.join(n for n in rec.fused_with if n != rec.name))}): no file holds them "
                         "alone.</p>")
            continue
        if not table.num_rows:
            parts.append(f"<p class='meta'>{label}: no rows to show ({total:,} {label}).</p>")
            continue
        columns = [c for c in LEAD if c in table.schema.names] + extra + own_columns(rec, table.schema, before)
        parts.append(rows_table(table, columns, f"{table.num_rows} of {total:,} rows {label}, sampled"))
    if rec.outputs.get("lineage"):
        parts.append(lineage_examples(manifest, rec, prev, before))
    return "".join(parts)


def _find_by_id(path: Path | None, ids: set[str], max_files: int = PARENT_SEARCH_FILES) -> pa.Table:
    """Rows with these ids, searching at most `max_files` files (id filter pushed down per file)."""
    found: list[pa.Table] = []
    left = set(ids)
    for f in (parquet_files(path) if path else [])[:max_files]:
        if not left:
            break
        t = pq.read_table(f, filters=[(C.ID, "in", sorted(left))]) if C.ID in pq.read_schema(f).names else None
        if t is not None and t.num_rows:
            found.append(t)
            left -= set(t.column(C.ID).to_pylist())
    return pa.concat_tables(found, promote_options="permissive") if found else pa.table({})


def lineage_examples(manifest: RunManifest, rec: StageRecord, prev: StageRecord | None,
                     before: pa.Schema | None, n_parents: int = 3, n_children: int = 4) -> str:
    """A few consumed parents and their children: the children come from the kept and rejected
    files written with the same name as the lineage file (one block of one partition)."""
    rng = seeded(manifest.run_id, rec.name, "lineage")
    files = parquet_files(Path(rec.outputs["lineage"]))
    if not files:
        return "<p class='meta'>No parent was consumed, so there is no lineage to show.</p>"
    f = rng.choice(files)
    lineage = pq.read_table(f)
    lineage = lineage.filter(pc.greater(lineage.column("n_children"), 0))
    lineage = pick(lineage, rng, n_parents)
    children: list[pa.Table] = []
    for zone in ("kept", "rejected"):
        if not rec.outputs.get(zone):
            continue
        sibling = Path(rec.outputs[zone]) / f.relative_to(Path(rec.outputs["lineage"]))
        if sibling.exists():
            t = pq.read_table(sibling)
            children.append(t.append_column("status", pa.array([zone] * t.num_rows, pa.string())))
    kids = pa.concat_tables(children, promote_options="permissive") if children else pa.table({})
    parent_ids = [str(p) for p in lineage.column(C.PARENT_ID).to_pylist()]
    parents = _find_by_id(Path(prev.outputs["kept"]) if prev and prev.outputs.get("kept") else None,
                          set(parent_ids))
    by_id = {str(r[C.ID]): r for r in parents.to_pylist()} if parents.num_rows else {}
    kid_rows = {str(r[C.ID]): r for r in kids.to_pylist()} if kids.num_rows else {}
    kid_cols = [c for c in LEAD if c in kids.schema.names] + ["status", C.DROP_REASON] + \
        (own_columns(rec, kids.schema, before) if kids.num_rows else [])
    out = [f"<h4>Parents and their children (from <code>{escape(f.name)}</code>)</h4>"]
    for pid, n, child_ids in zip(parent_ids, lineage.column("n_children").to_pylist(),
                                 lineage.column("child_ids").to_pylist(), strict=True):
        parent = by_id.get(pid)
        text = (cell(next((parent[c] for c in (C.TEXT, "goal") if parent.get(c)), None), 300) if parent
                else '<span class="meta">(not found in the first files of the input)</span>')
        rows = [kid_rows[c] for c in (child_ids or [])[:n_children] if c in kid_rows]
        table = pa.Table.from_pylist(rows) if rows else pa.table({})
        more = f" (showing {len(rows)})" if n > len(rows) else ""
        out.append(f"<p><b>parent</b> <code>{escape(pid)}</code>: {text} → {n} children{more}</p>"
                   + (f"<div class='kid'>{rows_table(table, kid_cols)}</div>" if rows else ""))
    return "".join(out)


def render_examples(manifest: RunManifest) -> str:
    """The report's section: one block per stage; a stage whose files cannot be read says why."""
    from transforms.report.prompts import llm_examples

    blocks = []
    for rec in manifest.stages:
        body = ""
        # Rows and prompts are read separately: one that cannot be read does not hide the other.
        for part, what in ((stage_examples, "examples"), (llm_examples, "prompts and replies")):
            try:
                body += part(manifest, rec)
            except Exception as err:  # a report must still be written; it says what it could not read
                body += (f"<p class='bad'>{what} could not be read: {escape(type(err).__name__)}: "
                         f"{escape(str(err))}</p>")
        summary = (f"{rec.index:02d} {escape(rec.name)} ({escape(rec.kind)}): {rec.rows_kept:,} kept, "
                   f"{rec.dropped_total:,} dropped")
        blocks.append(f"<details open class='stage-examples' data-stage='{escape(rec.name)}'>"
                      f"<summary>{summary}</summary>{body}</details>")
    intro = ("<p class='meta'>A seeded sample of each stage's output, read back from the lake (at most two "
             "files and one row group each); text is cut to a few lines.</p>")
    return f"<section id='examples'><h2>Examples: what each stage kept and dropped</h2>{intro}{''.join(blocks)}</section>"
