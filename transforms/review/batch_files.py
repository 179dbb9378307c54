"""What annotators get in a batch folder besides the tasks: `review.csv` (one row per item x annotator
slot, the source text of translated items beside it, cells a spreadsheet cannot run as formulas) and
`README.md` (what to fill, the verdict values, the exact import command)."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa

from transforms.review.batch_record import SHOWN, BatchRecord, judgment_id
from transforms.review.vocabulary import VERDICTS

CSV_COLUMNS = ["judgment_id", "item_id", "annotator", "goal", "sol1", "sol2", "verdict",
               "goal_edit", "sol1_edit", "sol2_edit", "comment"]

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
