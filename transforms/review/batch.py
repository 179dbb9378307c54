"""Review batches: `<lake>/review/<batch>/` holds what was sent to annotators and what came back.

    batch.json            the batch record (BatchRecord): items, fingerprint, parent run, rule, annotators
    items.parquet         the exported rows, as they were (edits are applied to these on import)
    tasks.json + labeling_config.xml   Label Studio tasks and the labeling interface   (--to labelstudio)
    review.csv            one row per item x annotator slot, to fill in a spreadsheet  (--to csv)
    README.md             what to fill: the verdict values, the columns, the exact import command

Exporting marks the parent run's manifest `awaiting_review`. The record is review/batch_record.py, the
CSV and README review/batch_files.py (both re-exported here for one release); here: exporting a run's
items, or a batch's disagreement queue, as a batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.core.lake import Lake, read_table
from transforms.core.manifest import RunManifest
from transforms.review.batch_files import (  # noqa: F401 (re-exported)
    CSV_COLUMNS,
    EARLIER,
    SOURCE,
    SOURCE_TEXT,
    import_command,
    source_columns,
    spreadsheet_safe,
    write_readme,
    write_review_csv,
)
from transforms.review.batch_record import (  # noqa: F401 (re-exported)
    SHOWN,
    BatchRecord,
    batch_dir,
    fingerprint,
    judgment_id,
    load_batch,
)
from transforms.review.consensus import ConsensusRule
from transforms.review.vocabulary import EDIT_FIELDS, VERDICTS, ReviewError  # noqa: F401 (re-exported)


def annotator_names(spec: str | int | list[str]) -> tuple[list[str], bool]:
    """`2` → slots ann_1, ann_2; `"ana,bo"` → those names."""
    if isinstance(spec, list):
        return spec, True
    text = str(spec).strip()
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise ReviewError("--annotators must be at least 1")
        return [f"ann_{i + 1}" for i in range(n)], False
    names = [s.strip() for s in text.split(",") if s.strip()]
    if len(set(names)) != len(names):
        raise ReviewError(f"annotator names repeat: {names}")
    return names, True


def curated_items(lake: Lake, run_id: str) -> tuple[RunManifest, pa.Table]:
    path = lake.manifest_path(run_id)
    if not path.exists():
        raise ReviewError(f"run {run_id!r} has no manifest at {path}")
    manifest = RunManifest.load(path)
    curated = Path(manifest.outputs.get("curated") or lake.zone("curated", manifest.dataset, run_id))
    table = read_table(curated)
    if table.num_rows == 0:
        raise ReviewError(f"run {run_id!r} has no curated rows at {curated}")
    return manifest, table


def check_items(items: pa.Table) -> None:
    missing = [c for c in ("id", *SHOWN) if c not in items.schema.names]
    if missing:
        raise ReviewError(f"items to review need columns {missing} (a PIQA item: id, goal, sol1, sol2); "
                          f"the table has {items.schema.names}")
    ids = items.column("id").to_pylist()
    if len(set(ids)) != len(ids) or None in ids:
        raise ReviewError("items to review need unique, non-null ids")


def write_batch(lake: Lake, items: pa.Table, record: BatchRecord) -> Path:
    """Write items.parquet, the tasks or the CSV, and batch.json; returns the batch folder."""
    from transforms.review.labelstudio import label_config_xml, tasks_for

    check_items(items)
    folder = batch_dir(lake, record.batch)
    if (folder / "batch.json").exists():
        raise ReviewError(f"review batch {record.batch!r} already exists at {folder}; name another with --batch")
    folder.mkdir(parents=True, exist_ok=True)
    items = items.drop_columns([c for c in ("drop_reason", "drop_stage", "_status") if c in items.schema.names])
    pq.write_table(items, folder / "items.parquet")
    record.n_items = items.num_rows
    record.item_ids = [str(v) for v in items.column("id").to_pylist()]
    record.fingerprint = fingerprint(items)
    record.files = {"items": "items.parquet"}
    if record.format == "labelstudio":
        (folder / "labeling_config.xml").write_text(label_config_xml(), encoding="utf-8")
        tasks = tasks_for(items, record.batch)
        (folder / "tasks.json").write_text(json.dumps(tasks, ensure_ascii=False, indent=1), encoding="utf-8")
        record.files.update({"tasks": "tasks.json", "labeling_config": "labeling_config.xml"})
    else:
        write_review_csv(items, record, folder / "review.csv")
        record.files["csv"] = "review.csv"
    write_readme(folder, record, lake.root, translated=bool(source_columns(items)))
    record.write(folder)
    return folder


def export_run(lake: Lake, run_id: str, *, to: Literal["labelstudio", "csv"] = "labelstudio",
               annotators: str | int | list[str] = 2, batch: str | None = None,
               rule: ConsensusRule | None = None, limit: int | None = None) -> BatchRecord:
    """Export a run's curated items as a review batch and mark the run `awaiting_review`."""
    manifest, items = curated_items(lake, run_id)
    if limit is not None:
        items = items.slice(0, limit)
    names, named = annotator_names(annotators)
    rule = rule or ConsensusRule(rule="unanimous")
    rule.check(len(names))
    record = BatchRecord(batch=batch or f"review-{run_id}", parent_run=run_id, dataset=manifest.dataset,
                         recipe=str(manifest.config.get("recipe") or manifest.dataset), format=to,
                         annotators=names, named_annotators=named, rule=rule)
    write_batch(lake, items, record)
    manifest.status = "awaiting_review"
    manifest.extras.setdefault("review_batches", []).append(record.batch)
    manifest.write(lake.manifest_path(run_id))
    return record


def requeue(lake: Lake, batch: str, *, to: Literal["labelstudio", "csv"] = "labelstudio",
            annotators: str | int | list[str] | None = None, name: str | None = None) -> BatchRecord:
    """Export a batch's disagreement queue (written by the last import) as a new batch."""
    record, items = load_batch(lake, batch)
    queue_path = batch_dir(lake, batch) / "queue.parquet"
    if not queue_path.exists():
        raise ReviewError(f"batch {batch!r} has no disagreement queue yet: import its judgments first")
    queue = pq.read_table(queue_path)
    queue_ids = set(queue.column("id").to_pylist())
    if not queue_ids:
        raise ReviewError(f"batch {batch!r}'s disagreement queue is empty")
    mask = pa.array([v in queue_ids for v in items.column("id").to_pylist()])
    items = items.filter(mask)
    earlier = _earlier_round(queue)
    for col in EARLIER:
        values = [earlier.get(str(i), {}).get(col) for i in items.column("id").to_pylist()]
        items = items.drop_columns([col]) if col in items.column_names else items
        items = items.append_column(col, pa.array(values, pa.string()))
    live = [i for i in record.imports if not i.get("superseded_by")]
    names, named = annotator_names(annotators) if annotators is not None else (record.annotators,
                                                                                 record.named_annotators)
    new = BatchRecord(batch=name or f"{batch}-requeue", parent_run=record.parent_run, parent_batch=batch,
                      parent_review_run=str(live[-1]["run_id"]) if live else None,
                      dataset=record.dataset, recipe=record.recipe, format=to, annotators=names,
                      named_annotators=named, rule=record.rule)
    write_batch(lake, items, new)
    return new


def _earlier_round(queue: pa.Table) -> dict[str, dict[str, str | None]]:
    """Per queued item: the first round's verdicts and comments as one line each ("kim: sol1; lee: sol2")."""
    out: dict[str, dict[str, str | None]] = {}
    cols = queue.column_names
    for row in queue.to_pylist():
        anns = row.get("review_annotators") or [] if "review_annotators" in cols else []
        labels = row.get("review_labels") or [] if "review_labels" in cols else []
        comments = row.get("review_comments") or [] if "review_comments" in cols else []
        verdicts = "; ".join(f"{a}: {v}" for a, v in zip(anns, labels, strict=False) if v)
        said = "; ".join(f"{a}: {c}" for a, c in zip(anns, comments, strict=False) if c)
        out[str(row["id"])] = {"earlier_verdicts": verdicts or None, "earlier_comments": said or None}
    return out
