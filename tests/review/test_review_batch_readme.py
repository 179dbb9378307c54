"""What a reviewer is handed (issue 35 §6): the batch README lists the verdict values and the exact import
command, and review.csv shows a translated item's source text and label beside it. The README's own
command, with the filled file in place of FILLED, is what imports the batch."""

from __future__ import annotations

import csv
import re
import shlex

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.review.batch import VERDICTS, export_run

# Two zh-piqa-style items: the translation, and the English it was made from in the *_gloss columns.
TRANSLATED = pa.table({
    "id": ["t1", "t2"], "lang": ["th", "th"],
    "goal": ["ทำให้น้ำเย็น", "เปิดขวด"], "sol1": ["ใส่น้ำแข็ง", "ใช้ค้อน"], "sol2": ["ใส่เกลือ", "ใช้ที่เปิดขวด"],
    "label": [0, 1],
    "goal_gloss": ["Cool water", "Open a bottle"], "sol1_gloss": ["Add ice", "Use a hammer"],
    "sol2_gloss": ["Add salt", "Use a bottle opener"],
})
ORIGINAL = TRANSLATED.drop_columns(["goal_gloss", "sol1_gloss", "sol2_gloss"])


def make_run(lake: Lake, table: pa.Table, run_id: str = "th-items") -> str:
    out = lake.zone("curated", "th-piqa", run_id)
    out.mkdir(parents=True)
    pq.write_table(table, out / "part-00000.parquet")
    RunManifest(run_id=run_id, job="th-piqa", dataset="th-piqa", status="succeeded", config={"recipe": "th-piqa"},
                outputs={"curated": str(out)}).write(lake.manifest_path(run_id))
    return run_id


def read_csv(path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def readme_import_command(readme: str) -> list[str]:
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("piqaforge review import ")]
    return shlex.split(line)


@pytest.fixture
def lake(tmp_path) -> Lake:
    return Lake(tmp_path / "lake").create()


def test_readme_lists_every_verdict_and_the_import_command(lake):
    export_run(lake, make_run(lake, ORIGINAL), to="csv", annotators=2, batch="b")
    readme = (lake.root / "review" / "b" / "README.md").read_text("utf-8")
    table = dict(re.findall(r"^\| `([a-z_0-9]+)` \| (.+) \|$", readme, re.M))
    assert table == VERDICTS                                        # every value a reviewer may write, no other
    assert readme_import_command(readme) == ["piqaforge", "review", "import", "b", "--from", "FILLED", "--lake",
                                             str(lake.root)]
    assert "see its README" not in readme and "review.csv" in readme
    assert "source_goal" not in readme                              # original items: no source to show
    assert "source_goal" not in read_csv(lake.root / "review" / "b" / "review.csv")[0]


def test_labelstudio_batch_readme_says_where_the_tasks_are(lake):
    export_run(lake, make_run(lake, ORIGINAL), to="labelstudio", annotators=2, batch="ls")
    readme = (lake.root / "review" / "ls" / "README.md").read_text("utf-8")
    assert "tasks.json" in readme and "labeling_config.xml" in readme and "review.csv" not in readme
    assert readme_import_command(readme)[:4] == ["piqaforge", "review", "import", "ls"]


def test_translated_items_carry_source_text_and_label_and_the_readme_command_imports(lake, tmp_path, ray_local):
    from jobs.cli import main

    run = make_run(lake, TRANSLATED)
    export_run(lake, run, to="csv", annotators=2, batch="tb")
    folder = lake.root / "review" / "tb"
    rows = read_csv(folder / "review.csv")
    header = list(rows[0])
    # beside the item, before what the reviewer fills
    assert header.index("sol2") < header.index("source_goal") < header.index("source_label") < header.index("verdict")
    by_item = {r["item_id"]: r for r in rows}
    assert [by_item["t1"][c] for c in ("source_goal", "source_sol1", "source_sol2", "source_label")] == \
        ["Cool water", "Add ice", "Add salt", "sol1"]
    assert [by_item["t2"][c] for c in ("source_goal", "source_sol1", "source_sol2", "source_label")] == \
        ["Open a bottle", "Use a hammer", "Use a bottle opener", "sol2"]
    readme = (folder / "README.md").read_text("utf-8")
    assert "source_label" in readme and "source_goal" in readme

    # a reviewer fills the verdicts as the README says and runs its command with the filled file
    for r in rows:
        r["verdict"] = r["source_label"] if r["item_id"] == "t1" else "both_wrong"
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(rows)
    argv = [str(filled) if a == "FILLED" else a for a in readme_import_command(readme)]
    assert main(argv[1:]) == 0
    record = __import__("json").loads((folder / "batch.json").read_text("utf-8"))
    (imported,) = record["imports"]
    review = RunManifest.load(lake.manifest_path(imported["run_id"]))
    assert review.parents == [run] and review.extras["review"]["judgments_valid"] == 4
    assert imported["kept"] == 1 and review.stages[0].rows_dropped == {"rejected_by_annotators:both_wrong": 1}
