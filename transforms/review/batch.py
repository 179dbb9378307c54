"""Review batches: `<lake>/review/<batch>/` holds what was sent to annotators and what came back.

    batch.json            the batch record (BatchRecord): items, fingerprint, parent run, rule, annotators
    items.parquet         the exported rows, as they were (edits are applied to these on import)
    tasks.json + labeling_config.xml   Label Studio tasks and the labeling interface   (--to labelstudio)
    review.csv            one row per item x annotator slot, to fill in a spreadsheet  (--to csv)
    README.md             what to fill: the verdict values, the columns, the exact import command

Exporting marks the parent run's manifest `awaiting_review`.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from transforms.core.lake import Lake, read_table
from transforms.core.manifest import RunManifest
from transforms.review.consensus import ConsensusRule
from transforms.review.vocabulary import EDIT_FIELDS, VERDICTS, ReviewError  # noqa: F401 (re-exported)

# The verdicts an annotator can give a PIQA item (stored value → what the annotator reads).
SHOWN = ("goal", "sol1", "sol2")
CSV_COLUMNS = ["judgment_id", "item_id", "annotator", "goal", "sol1", "sol2", "verdict",
               "goal_edit", "sol1_edit", "sol2_edit", "comment"]


class BatchRecord(BaseModel):
    batch: str = Field(..., description="Batch name: the folder under <lake>/review/.")
    created_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    parent_run: str | None = Field(None, description="Run whose curated items were exported.")
    parent_batch: str | None = Field(None, description="Batch whose disagreement queue this batch re-exports.")
    parent_review_run: str | None = Field(None, description="For a requeued batch: the review run of the batch it "
                                          "came from; the import's run has it as parent (adjudication round).")
    dataset: str = ""
    recipe: str = ""
    format: Literal["labelstudio", "csv"] = "labelstudio"
    annotators: list[str] = Field(default_factory=list, description="Annotator names (or slots ann_1..ann_N).")
    named_annotators: bool = Field(False, description="True when `annotators` are real names: judgments by "
                                   "anyone else are rejected. Slots accept any name, up to N per item.")
    rule: ConsensusRule = Field(default_factory=ConsensusRule)
    automatic: bool = Field(False, description="Filled by LLM annotators (review=auto), not people.")
    n_items: int = 0
    item_ids: list[str] = Field(default_factory=list)
    fingerprint: str = Field("", description="sha256 of the exported rows (id, goal, sol1, sol2, label).")
    verdicts: list[str] = Field(default_factory=lambda: list(VERDICTS))
    files: dict[str, str] = Field(default_factory=dict)
    labelstudio: dict[str, Any] = Field(default_factory=dict, description="url and project id after push.")
    imports: list[dict[str, Any]] = Field(default_factory=list, description="One entry per import.")

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "batch.json.tmp"
        tmp.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(folder / "batch.json")


def batch_dir(lake: Lake, batch: str) -> Path:
    return lake.root / "review" / batch


def load_batch(lake: Lake, batch: str) -> tuple[BatchRecord, pa.Table]:
    folder = batch_dir(lake, batch)
    if not (folder / "batch.json").exists():
        known = sorted(p.name for p in (lake.root / "review").glob("*") if (p / "batch.json").exists())
        raise ReviewError(f"no review batch {batch!r} under {lake.root / 'review'}; batches: {known}")
    record = BatchRecord.model_validate_json((folder / "batch.json").read_text(encoding="utf-8"))
    items = pq.read_table(folder / "items.parquet")
    if fingerprint(items) != record.fingerprint:
        raise ReviewError(f"{folder / 'items.parquet'} no longer matches the batch's fingerprint: the exported "
                          "rows were changed after export")
    return record, items


def fingerprint(items: pa.Table) -> str:
    """sha256 over the exported rows in order, as canonical JSON lines of the reviewed fields."""
    cols = [c for c in ("id", *SHOWN, "label") if c in items.schema.names]
    h = hashlib.sha256()
    for row in items.select(cols).to_pylist():
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


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


def import_command(record: BatchRecord, lake_root: Path) -> str:
    return f"piqaforge review import {record.batch} --from FILLED --lake {lake_root}"


def write_readme(folder: Path, record: BatchRecord, lake_root: Path, *, about: str = "", then: str = "",
                 translated: bool = False) -> None:
    """The batch's README.md: what to fill, the verdict values a reviewer may write, the import command.
    `about` (who made the batch) and `then` (what comes after the import) are the recipe's lines."""
    rule = record.rule.rule + (f" ({record.rule.k} of {len(record.annotators)})" if record.rule.rule == "k_of_n" else "")
    if record.format == "csv":
        fill = ("Fill `review.csv` (UTF-8; one row per item and annotator slot). Write one verdict value from the "
                "table below in `verdict`, exactly as written; for `needs_edit` write the corrected text in "
                "`goal_edit`, `sol1_edit`, `sol2_edit`; `comment` is free. Leave `judgment_id`, `item_id` and the "
                "item's text as they are; `annotator` may be replaced by the reviewer's name. Several reviewers "
                "may each fill a copy: import all of them at once.")
        filled = "FILLED: the filled review.csv (or the copies, one per reviewer)"
    else:
        fill = ("Import `tasks.json` into Label Studio with `labeling_config.xml` (or `piqaforge review push "
                f"{record.batch}`), judge every task, and export the annotations as JSON (or `piqaforge review "
                f"pull {record.batch}`, which imports them itself).")
        filled = "FILLED: Label Studio's JSON export"
    source = ("\n\nTranslated or recast items show what they were made from: `source_goal`, `source_sol1`, "
              "`source_sol2` (the source's text, in the item's order) and `source_label` (which of the source's "
              "solutions is correct). Judge the item itself; the source tells you what it should say.") \
        if translated and record.format == "csv" else ""
    verdicts = "\n".join(f"| `{v}` | {meaning} |" for v, meaning in VERDICTS.items())
    text = (f"# Review batch {record.batch}\n\n"
            + (f"{about}\n\n" if about else "")
            + f"{record.n_items} items, {len(record.annotators)} annotator(s) per item "
            f"({', '.join(record.annotators)}), consensus {rule}.\n\n## What to fill\n\n{fill}{source}\n\n"
            f"## Verdicts\n\n| verdict | meaning |\n|---|---|\n{verdicts}\n\n## Import\n\n"
            f"```bash\n{import_command(record, lake_root)}\n```\n\n{filled}. `--dry-run` checks the files "
            "and shows what the import would do without writing anything.\n"
            + (f"\nThen: {then}\n" if then else ""))
    (folder / "README.md").write_text(text, encoding="utf-8")


def judgment_id(batch: str, item_id: str, annotator: str) -> str:
    return f"{batch}/{item_id}/{annotator}"


def spreadsheet_safe(value: object) -> object:
    """A cell a spreadsheet shows as text: one starting with = + - @ (or a tab / carriage return) gets
    Excel's text marker ', so crawled or generated text cannot run as a formula on the reviewer's
    machine; the import strips the marker again (transforms/io/input_files.py)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


EARLIER = ("earlier_verdicts", "earlier_comments")  # a requeued batch shows the first round beside each item

# Where a translated or recast item keeps the text it was made from, in order of preference: the English
# glosses (zh-piqa, J-PIQA), PIndicQA's English source, the item a J-PIQA lexical variant was made from.
SOURCE_TEXT: tuple[tuple[str, str, str], ...] = (("goal_gloss", "sol1_gloss", "sol2_gloss"),
                                                 ("en_goal", "en_sol1", "en_sol2"),
                                                 ("base_goal", "base_sol1", "base_sol2"))
SOURCE = ("source_goal", "source_sol1", "source_sol2", "source_label")  # review.csv, beside the item


def source_columns(items: pa.Table) -> dict[str, list[str | None]]:
    """Per item, the text it was translated or recast from and which of that text's solutions is correct
    ("sol1"/"sol2": a translation keeps the source's order and label); {} for a batch of original items.
    A reviewer of a translation judges the item against its source: same meaning, same answer."""
    names = items.column_names
    found = [t for t in SOURCE_TEXT if all(c in names for c in t)]
    if not found:
        return {}
    cols = {c: items.column(c).to_pylist() for t in found for c in t}
    labels = items.column("label").to_pylist() if "label" in names else [None] * items.num_rows
    out: dict[str, list[str | None]] = {c: [] for c in SOURCE}
    for i in range(items.num_rows):
        triple = next((t for t in found if cols[t[0]][i] or cols[t[1]][i]), None)
        texts = [cols[c][i] for c in triple] if triple else [None, None, None]
        label = labels[i] if triple else None
        for name, value in zip(SOURCE, [*texts, None if label is None else f"sol{int(label) + 1}"], strict=True):
            out[name].append(value)
    return out


def write_review_csv(items: pa.Table, record: BatchRecord, path: Path) -> None:
    """One row per item x annotator; UTF-8 with a BOM (Excel then reads Korean and Tamil text right)."""
    source = source_columns(items)
    extra = [c for c in EARLIER if c in items.column_names]
    rows = items.select(["id", *SHOWN, *extra]).to_pylist()
    for name, values in source.items():
        for row, value in zip(rows, values, strict=True):
            row[name] = value
    extra = [*source, *extra]
    at = CSV_COLUMNS.index("verdict")
    columns = [*CSV_COLUMNS[:at], *extra, *CSV_COLUMNS[at:]]
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in rows:
            for ann in record.annotators:
                writer.writerow({k: spreadsheet_safe(v) for k, v in {
                    "judgment_id": judgment_id(record.batch, str(row["id"]), ann), "item_id": row["id"],
                    "annotator": ann, **{k: row[k] for k in [*SHOWN, *extra]}}.items()})


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
