"""Where a row came from: its parent chain back to the source row or the request that made it.

`piqaforge lineage RUN_ID ROW_ID` walks it. A row keeps its id through filters; a creating stage
gives its children new ids, records the stage in `_born` and the parent in `parent_id` (for an
aggregate, its lineage table lists every member). A source row of a run that read other runs
(`RunSource`, the union of quota rounds, a join; recorded in the manifest's `parents`) continues in
every parent run that holds a row of that id. The trace follows *all* parents, depth first: an
aggregate's members each get their chain, and a union's row is found in the round that made it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from transforms.core import columns as C
from transforms.core.lake import Lake, parquet_files
from transforms.core.manifest import RunManifest, StageRecord
from transforms.core.writing import BORN

PROVENANCE = (C.PROMPT, C.MODEL, C.GEN_PARAMS)


@dataclass
class Hop:
    run_id: str
    stage: str
    kind: str
    row_id: str
    status: str  # where the row ended in this run: kept by the last stage, or dropped (reason)
    text: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    parents: list[str] = field(default_factory=list)
    depth: int = 0  # hops between this one and the traced row (siblings of an aggregate share a depth)
    review: dict[str, Any] = field(default_factory=dict)  # what reviewers said and changed, where the row was reviewed

    def line(self) -> str:
        bits = [f"{self.run_id} · {self.stage} ({self.kind})", f"id {self.row_id}", self.status]
        prov = self.provenance
        if prov.get(C.PROMPT):
            bits.append(f"prompt {prov[C.PROMPT]}")
        if prov.get(C.MODEL):
            bits.append(f"model {prov[C.MODEL]}")
        if prov.get(C.GEN_PARAMS):
            bits.append(f"params {prov[C.GEN_PARAMS]}")
        if self.parents:
            more = f" (+{len(self.parents) - 5} more)" if len(self.parents) > 5 else ""
            bits.append("parents " + ", ".join(self.parents[:5]) + more)
        return " | ".join(bits)


def find_rows(path: Path, column: str, value: str) -> pa.Table:
    """Rows of the Parquet files under `path` whose `column` equals `value` (pushed down per file)."""
    tables = []
    for f in parquet_files(path):
        schema = pq.read_schema(f)
        if column not in schema.names:
            continue
        t = pads.dataset(str(f), format="parquet").to_table(filter=pc.field(column) == value)
        if t.num_rows:
            tables.append(t)
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def _latest(manifest: RunManifest, row_id: str, before: int | None = None) -> tuple[StageRecord, dict, str] | None:
    """The last stage output (kept or rejected) holding `row_id`, searching back from `before`."""
    stages = [s for s in manifest.stages if before is None or s.index < before]
    for rec in reversed(stages):
        for zone in ("kept", "rejected"):
            where = rec.outputs.get(zone)
            if not where:
                continue
            rows = find_rows(Path(where), C.ID, row_id)
            if rows.num_rows:
                row = rows.slice(0, 1).to_pylist()[0]
                last = rec.index == manifest.stages[-1].index
                status = (f"dropped by {rec.name}: {row.get(C.DROP_REASON)}" if zone == "rejected"
                          else ("kept (in the run's output)" if last else f"kept by {rec.name}"))
                return rec, row, status
    return None


def _aggregate_parents(rec: StageRecord, row_id: str) -> list[str]:
    lineage = rec.outputs.get("lineage")
    if not lineage:
        return []
    parents = []
    for f in parquet_files(Path(lineage)):
        t = pq.read_table(f, columns=[C.PARENT_ID, "child_ids"])
        for pid, kids in zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True):
            if row_id in (kids or []):
                parents.append(pid)
    return parents


def row_text(row: dict[str, Any], chars: int = 160) -> str | None:
    """What the row is: an item's goal and solutions (the correct one marked) where it has them, else its text."""
    if row.get("goal"):
        sols = [row.get("sol1"), row.get("sol2")]
        label = row.get("label")
        shown = " / ".join(("✓ " if label == i else "") + str(s) for i, s in enumerate(sols) if s)
        return (f"{row['goal']} — {shown}" if shown else str(row["goal"]))[:chars]
    return str(row.get(C.TEXT) or "")[:chars] or None


def review_of(row: dict[str, Any]) -> dict[str, Any]:
    """The review columns a row carries (verdicts, edits, comments, annotators: pseudonymous ids as imported)."""
    return {k: row[k] for k in sorted(row) if k.startswith("review_") and row[k] not in (None, [], "")}


def _where_else(lake: Lake, manifest: RunManifest, row_id: str) -> str:
    """Where the row is in the runs this one read (dropped there, or kept and then not carried on)."""
    for parent in manifest.parents:
        try:
            found = _latest(_load(lake, parent), row_id)
        except FileNotFoundError:
            continue
        if found is not None:
            return f"; it is in parent run {parent!r}: {found[2]}"
    return ""


def trace(lake: Lake, run_id: str, row_id: str, max_hops: int = 256) -> list[Hop]:
    """The row's lineage, depth first from the row itself: one hop per stage that made a row of it,
    across runs, through every parent (aggregate members, every parent run holding the row id).

    Hops come in pre-order (a hop, then its first parent's whole chain, then the next parent's), each
    with its `depth`; a row reached twice (a diamond) is listed once. At most `max_hops` hops."""
    hops: list[Hop] = []
    manifests: dict[str, RunManifest] = {}
    seen: set[tuple[str, str, int | None]] = set()
    # (run, row id, search stages before this index, the stage that consumed it, depth)
    todo: list[tuple[str, str, int | None, str | None, int]] = [(run_id, row_id, None, None, 0)]
    while todo and len(hops) < max_hops:
        run, current, before, consumed_by, depth = todo.pop()
        if (run, current, before) in seen:
            continue
        seen.add((run, current, before))
        if run not in manifests:
            try:
                manifests[run] = _load(lake, run)
            except FileNotFoundError:
                if not hops:
                    raise
                continue
        manifest = manifests[run]
        found = _latest(manifest, current, before)
        if found is None:
            if not hops:
                raise KeyError(f"row {current!r} is in no stage output of run {run!r}"
                               + _where_else(lake, manifest, current))
            continue  # a parent run that does not hold this row (another round of a union)
        rec, row, status = found
        if consumed_by:
            status = f"consumed by {consumed_by}"
        born = row.get(BORN)
        by_name = {s.name: s for s in manifest.stages if before is None or s.index < before}
        maker = (by_name.get(born) if born else None) or manifest.stages[0]
        prov = {k: row.get(k) for k in PROVENANCE if row.get(k) is not None}
        if maker.kind == "aggregate":
            parents = _aggregate_parents(maker, current)
        elif maker.index == 0:
            parents = []
        else:
            parents = [row[C.PARENT_ID]] if row.get(C.PARENT_ID) else []
        hops.append(Hop(run, maker.name, maker.kind, current, status, text=row_text(row), provenance=prov,
                        parents=parents, depth=depth, review=review_of(row)))
        if parents:
            todo.extend((run, p, maker.index, maker.name, depth + 1) for p in reversed(parents))
        elif maker.index == 0:
            # a source row: a run that read other runs' outputs continues in each that holds the row
            todo.extend((p, current, None, None, depth + 1) for p in reversed(manifest.parents))
    return hops


def _load(lake: Lake, run_id: str) -> RunManifest:
    path = lake.manifest_path(run_id)
    if not path.exists():
        raise FileNotFoundError(f"no run {run_id!r} in lake {lake.root} (no {path})")
    return RunManifest.load(path)


def print_trace(hops: list[Hop], as_json: bool = False) -> str:
    if as_json:
        return json.dumps([h.__dict__ for h in hops], ensure_ascii=False, indent=2, default=str)
    lines = []
    for h in hops:
        depth = h.depth
        lines.append(("  " * depth) + ("└─ " if depth else "") + h.line())
        if h.text:
            lines.append(("  " * depth) + ("   " if depth else "") + f"  “{h.text}”")
        if h.review:
            lines.append(("  " * depth) + ("   " if depth else "") + "  review: " +
                         "; ".join(f"{k.removeprefix('review_')} {v}" for k, v in h.review.items())[:300])
    return "\n".join(lines)
