"""Review batches, judgment import, consensus and the review run, on small tables built here and on
real PIQA dev items with their real per-annotator judgments (../shared/data/annot_piqa_qualtrics_en)."""

from __future__ import annotations

import csv
import hashlib
import json
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.cli import main
from transforms.core.lake import Lake, count_rows, read_table
from transforms.core.manifest import RunManifest
from transforms.review.batch import VERDICTS, ReviewError, export_run, load_batch, requeue
from transforms.review.consensus import ConsensusRule, apply_review
from transforms.review.importing import (
    ReviewImportSource,
    import_files,
    import_judgments,
    read_judgment_files,
    validate_judgments,
)

ITEMS = pa.table({
    "id": ["q1", "q2", "q3", "q4", "q5"], "lang": ["ko"] * 5,
    "goal": ["밥을 짓는다", "빨래를 말린다", "못을 박는다", "국을 끓인다", "우산을 접는다"],
    "sol1": ["쌀을 씻고 물을 붓는다", "젖은 채로 둔다", "망치로 친다", "물에 재료를 넣고 끓인다", "살을 모아 접는다"],
    "sol2": ["쌀을 씻지 않고 기름을 붓는다", "햇볕에 넌다", "손으로 누른다", "재료를 얼린다", "살을 부러뜨린다"],
    "label": [0, 1, 0, 0, 0],
})


def make_run(lake: Lake, table: pa.Table, run_id: str = "ko-piqa-run1", dataset: str = "ko-piqa") -> str:
    out = lake.zone("curated", dataset, run_id)
    out.mkdir(parents=True)
    pq.write_table(table, out / "part-00000.parquet")
    RunManifest(run_id=run_id, job="ko-piqa", dataset=dataset, status="succeeded",
                config={"recipe": "ko-piqa"}, outputs={"curated": str(out)}).write(lake.manifest_path(run_id))
    return run_id


@pytest.fixture
def lake(tmp_path) -> Lake:
    return Lake(tmp_path / "lake").create()


def judgments(rows: list[tuple]) -> pa.Table:
    """(item, annotator, verdict[, {field: edit}]) → the long format the import reads."""
    cols: dict[str, list] = {c: [] for c in ("judgment_id", "item_id", "annotator", "label", "goal_edit",
                                             "sol1_edit", "sol2_edit", "comment", "origin")}
    for r in rows:
        edits = r[3] if len(r) > 3 else {}
        for c, v in (("judgment_id", None), ("item_id", r[0]), ("annotator", r[1]), ("label", r[2]),
                     ("comment", None), ("origin", "test")):
            cols[c].append(v)
        for f in ("goal", "sol1", "sol2"):
            cols[f"{f}_edit"].append(edits.get(f))
    t = pa.table({c: pa.array(v, pa.string()) for c, v in cols.items()})
    return t.append_column("skipped", pa.array([False] * t.num_rows))


# -- export ----------------------------------------------------------------------------------------
def test_export_csv_writes_batch_record_and_marks_the_run(lake):
    run = make_run(lake, ITEMS)
    record = export_run(lake, run, to="csv", annotators=2, batch="b1")
    folder = lake.root / "review" / "b1"
    with open(folder / "review.csv", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5 * 2 and {r["annotator"] for r in rows} == {"ann_1", "ann_2"}
    assert rows[0]["goal"] == "밥을 짓는다" and rows[0]["verdict"] == ""
    saved = json.loads((folder / "batch.json").read_text())
    assert saved["parent_run"] == run and saved["item_ids"] == ["q1", "q2", "q3", "q4", "q5"]
    assert saved["recipe"] == "ko-piqa" and saved["automatic"] is False
    # the fingerprint, recomputed here from the curated rows
    h = hashlib.sha256()
    for row in ITEMS.select(["id", "goal", "sol1", "sol2", "label"]).to_pylist():
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    assert saved["fingerprint"] == record.fingerprint == h.hexdigest()
    assert RunManifest.load(lake.manifest_path(run)).status == "awaiting_review"
    with pytest.raises(ReviewError, match="already exists"):
        export_run(lake, run, to="csv", batch="b1")


def test_export_labelstudio_tasks_config_and_prelabels(lake):
    items = ITEMS.append_column("prelabel", pa.array(["sol1", None, "unsafe", "bogus", "sol2"]))
    run = make_run(lake, items)
    export_run(lake, run, to="labelstudio", annotators="kim,lee", batch="ls")
    folder = lake.root / "review" / "ls"
    tasks = json.loads((folder / "tasks.json").read_text())
    assert [t["data"]["item_id"] for t in tasks] == ["q1", "q2", "q3", "q4", "q5"]
    preds = {t["data"]["item_id"]: t["predictions"][0]["result"][0]["value"]["choices"] for t in tasks if "predictions" in t}
    assert preds == {"q1": ["sol1"], "q3": ["unsafe"], "q5": ["sol2"]}  # no prediction for null or unknown
    root = ET.fromstring((folder / "labeling_config.xml").read_text())
    assert [c.get("alias") for c in root.iter("Choice")] == list(VERDICTS)
    assert {t.get("name") for t in root.iter("TextArea")} == {"goal_edit", "sol1_edit", "sol2_edit", "comment"}
    assert {t.get("value") for t in root.iter("Text")} == {"$goal", "$sol1", "$sol2"}


def test_export_refuses_items_without_piqa_columns(lake):
    run = make_run(lake, ITEMS.drop_columns(["sol2"]))
    with pytest.raises(ReviewError, match=r"need columns \['sol2'\]"):
        export_run(lake, run, to="csv")


def test_tampered_items_are_refused(lake):
    export_run(lake, make_run(lake, ITEMS), to="csv", batch="b")
    path = lake.root / "review" / "b" / "items.parquet"
    t = pq.read_table(path)
    pq.write_table(t.set_column(2, "goal", pa.array(["x"] * 5)), path)
    with pytest.raises(ReviewError, match="fingerprint"):
        load_batch(lake, "b")


# -- consensus (pure) -------------------------------------------------------------------------------
def test_unanimous_two_of_two_with_edits_and_reasons():
    j = judgments([
        ("q1", "a", "sol1"), ("q1", "b", "sol1"),                                    # kept
        ("q2", "a", "sol2", {"sol2": "햇볕이 드는 곳에 넌다"}), ("q2", "b", "sol2"),       # kept, edit applied
        ("q3", "a", "sol1"), ("q3", "b", "unsafe"),                                  # no consensus
        ("q4", "a", "not_physical"), ("q4", "b", "not_physical"),                    # rejected by annotators
        ("q5", "a", "sol1"),                                                         # one of two: not reviewed
    ])
    reviewed, queue, stats = apply_review(ITEMS, j, ConsensusRule(rule="unanimous"), 2, "b")
    by_id = {r["id"]: r for r in reviewed.to_pylist()}
    assert [by_id[i]["drop_reason"] for i in ("q1", "q2", "q3", "q4", "q5")] == [
        None, None, "no_consensus", "rejected_by_annotators:not_physical", "not_reviewed"]
    assert by_id["q2"]["sol2"] == "햇볕이 드는 곳에 넌다"
    assert json.loads(by_id["q2"]["review_edits"]) == [
        {"field": "sol2", "before": "햇볕에 넌다", "after": "햇볕이 드는 곳에 넌다", "annotators": ["a"]}]
    assert by_id["q3"]["review_annotators"] == ["a", "b"] and by_id["q3"]["review_labels"] == ["sol1", "unsafe"]
    assert queue.column("id").to_pylist() == ["q3"]
    assert stats["kept"] == 2 and stats["dropped"] == {"no_consensus": 1, "rejected_by_annotators:not_physical": 1,
                                                       "not_reviewed": 1}
    assert reviewed.num_rows == ITEMS.num_rows  # every exported row comes back, kept or with a reason


def test_k_of_n_and_majority():
    j = judgments([("q1", "a", "sol1"), ("q1", "b", "sol1"), ("q1", "c", "sol2"),
                   ("q2", "a", "sol2"), ("q2", "b", "sol1"), ("q2", "c", "both_wrong"),
                   ("q3", "a", "sol1")])
    two_of_three = apply_review(ITEMS, j, ConsensusRule(rule="k_of_n", k=2), 3)[0].to_pylist()
    assert [r["drop_reason"] for r in two_of_three[:3]] == [None, "no_consensus", "not_reviewed"]
    assert two_of_three[0]["review_agreement"] == pytest.approx(2 / 3)
    majority = apply_review(ITEMS, j, ConsensusRule(rule="majority"), 3)[0].to_pylist()
    # q3: one verdict is a majority of the verdicts received (min_judgments=1)
    assert [r["drop_reason"] for r in majority[:3]] == [None, "no_consensus", None]
    strict = apply_review(ITEMS, j, ConsensusRule(rule="majority", min_judgments=2), 3)[0].to_pylist()
    assert strict[2]["drop_reason"] == "not_reviewed"
    with pytest.raises(ValueError, match="k_of_n needs"):
        apply_review(ITEMS, j, ConsensusRule(rule="k_of_n", k=4), 3)


def test_relabel_conflicting_edits_and_needs_edit_without_text():
    j = judgments([("q1", "a", "sol2"), ("q1", "b", "sol2"),                             # contradicts label 0
                   ("q2", "a", "sol2", {"goal": "빨래를 빨리 말린다"}), ("q2", "b", "sol2", {"goal": "빨래를 말리려면"}),
                   ("q3", "a", "needs_edit"), ("q3", "b", "needs_edit"),
                   ("q4", "a", "needs_edit", {"sol2": "재료를 냉동실에 넣는다"}), ("q4", "b", "needs_edit")])
    rows = {r["id"]: r for r in apply_review(ITEMS, j, ConsensusRule(), 2)[0].to_pylist()}
    assert rows["q1"]["label"] == 1 and json.loads(rows["q1"]["review_edits"]) == [
        {"field": "label", "before": 0, "after": 1, "annotators": []}]
    assert rows["q2"]["drop_reason"] == "no_consensus" and "different edits of goal" in rows["q2"]["review_note"]
    assert rows["q2"]["goal"] == "빨래를 말린다"  # not applied
    assert rows["q3"]["drop_reason"] == "rejected_by_annotators:needs_edit"
    assert rows["q4"]["drop_reason"] is None and rows["q4"]["sol2"] == "재료를 냉동실에 넣는다" and rows["q4"]["label"] == 0
    no_relabel = apply_review(ITEMS, j, ConsensusRule(relabel=False), 2)[0].to_pylist()
    assert no_relabel[0]["drop_reason"] == "rejected_by_annotators:label_disputed" and no_relabel[0]["label"] == 0


# -- validation: every judgment valid or rejected with a reason -------------------------------------
def test_bad_judgments_are_rejected_with_reasons(lake):
    export_run(lake, make_run(lake, ITEMS), to="csv", annotators="kim,lee", batch="b")
    record, _ = load_batch(lake, "b")
    j = judgments([("q1", "kim", "sol1"), ("q1", "kim", "sol2"),          # duplicate
                   ("q9", "kim", "sol1"),                                 # never exported
                   ("q2", "kim", "maybe"),                                # unknown label
                   ("q2", None, "sol2"), ("q3", " ", "sol1"),             # no annotator
                   ("q3", "park", "sol1"),                                # not one of the batch's annotators
                   ("q4", "lee", ""),                                     # blank slot
                   ("q5", "lee", "Solution 2 is correct"), ("q5", "kim", "SOL2")])  # full text / case
    valid, rejected = validate_judgments(j, record)
    assert valid.num_rows + rejected.num_rows == j.num_rows
    assert sorted(valid.column("label").to_pylist()) == ["sol1", "sol2", "sol2"]
    assert rejected.column("reject_reason").to_pylist() == [
        "duplicate_judgment", "not_exported", "unknown_label:maybe", "missing_annotator", "missing_annotator",
        "unknown_annotator:park", "no_verdict"]


def test_too_many_annotators_on_a_slot_batch(lake):
    export_run(lake, make_run(lake, ITEMS), to="csv", annotators=2, batch="b")
    record, _ = load_batch(lake, "b")
    valid, rejected = validate_judgments(judgments([("q1", "x", "sol1"), ("q1", "y", "sol1"), ("q1", "z", "sol2")]),
                                         record)
    assert valid.column("annotator").to_pylist() == ["x", "y"]
    assert rejected.column("reject_reason").to_pylist() == ["too_many_annotators"]


# -- files: a filled CSV and a Label Studio JSON export ---------------------------------------------
def test_filled_csv_round_trip_and_requeue(lake, tmp_path):
    run = make_run(lake, ITEMS)
    export_run(lake, run, to="csv", annotators=2, batch="b")
    with open(lake.root / "review" / "b" / "review.csv", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    verdicts = {"q1": ("sol1", "sol1"), "q2": ("sol2", "sol2"), "q3": ("sol1", "both_wrong"), "q4": ("unsafe", "unsafe"),
                "q5": ("sol1", "")}
    for r in rows:
        r["verdict"] = verdicts[r["item_id"]][int(r["annotator"][-1]) - 1]
        if r["item_id"] == "q1" and r["annotator"] == "ann_2":
            r["sol1_edit"] = "쌀을 씻고 알맞게 물을 붓는다"
    rows.append({**rows[0], "judgment_id": "b/q1/ann_7", "annotator": "ann_7"})   # a slot never exported
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    result, manifest = import_files(lake, "b", [filled], n_boot=50)
    st = result.stats
    assert st["judgments"] == 11 and st["judgments_valid"] == 9
    assert st["judgments_rejected"] == {"no_verdict": 1, "not_exported": 1}
    assert st["kept"] == 2 and st["dropped"] == {"no_consensus": 1, "rejected_by_annotators:unsafe": 1,
                                                 "not_reviewed": 1}
    # the review run: parent, conservation, curated rows with the edit applied
    assert manifest.parents == [run] and manifest.stages[0].conserved()
    assert manifest.outputs["curated"] == str(lake.zone("curated", "ko-piqa", manifest.run_id))
    curated = read_table(lake.zone("curated", "ko-piqa", manifest.run_id))
    assert curated.num_rows == 2 == count_rows(lake.zone("curated", "ko-piqa", manifest.run_id))
    assert dict(zip(curated.column("id").to_pylist(), curated.column("sol1").to_pylist(), strict=True))["q1"] == \
        "쌀을 씻고 알맞게 물을 붓는다"
    agreement = manifest.extras["review"]["agreement"]
    assert agreement["items"] == 5 and agreement["items_with_one_rating"] == 1  # q5: one verdict, one blank
    # the disagreement queue goes out again as a new batch
    new = requeue(lake, "b", to="labelstudio", name="b-again")
    assert new.item_ids == ["q3"] and new.parent_batch == "b" and new.parent_run == run


LS_EXPORT = [  # the shape of a Label Studio 1.x JSON export (tasks with annotations)
    {"id": 11, "data": {"item_id": "q1", "goal": "...", "sol1": "...", "sol2": "..."},
     "annotations": [
         {"id": 101, "completed_by": 2, "was_cancelled": False,
          "result": [{"from_name": "verdict", "to_name": "goal", "type": "choices", "value": {"choices": ["sol1"]}}]},
         {"id": 102, "completed_by": {"id": 3, "email": "lee@example.com"}, "was_cancelled": False,
          "result": [{"from_name": "verdict", "to_name": "goal", "type": "choices", "value": {"choices": ["needs_edit"]}},
                     {"from_name": "sol1_edit", "to_name": "sol1", "type": "textarea",
                      "value": {"text": ["쌀을 씻은 뒤 물을 붓는다"]}}]}]},
    {"id": 12, "data": {"item_id": "q2"},
     "annotations": [{"id": 103, "completed_by": 2, "was_cancelled": True, "result": []}]},
    {"id": 13, "data": {"item_id": "zz"},
     "annotations": [{"id": 104, "completed_by": 2, "result": [
         {"from_name": "verdict", "type": "choices", "value": {"choices": ["sol1"]}}]}]},
]


def test_labelstudio_export_file_imports(lake, tmp_path):
    export_run(lake, make_run(lake, ITEMS), to="labelstudio", annotators=2, batch="b")
    path = tmp_path / "project-1-at-2026.json"
    path.write_text(json.dumps(LS_EXPORT, ensure_ascii=False))
    long = read_judgment_files([path], users={2: "kim@example.com"})
    assert long.column("annotator").to_pylist() == ["kim@example.com", "lee@example.com", "kim@example.com",
                                                    "kim@example.com"]
    assert long.column("sol1_edit").to_pylist()[1] == "쌀을 씻은 뒤 물을 붓는다"
    result = import_judgments(lake, "b", long, n_boot=0)
    assert result.stats["judgments_rejected"] == {"not_exported": 1, "skipped_by_annotator": 1}
    assert result.reviewed.to_pylist()[0]["drop_reason"] == "no_consensus"


# -- real judgments: PIQA dev re-annotated by three of six annotators -------------------------------
@pytest.fixture(scope="module")
def piqa_real(shared_data):
    base = shared_data / "annot_piqa_qualtrics_en"
    items = [json.loads(line) for line in (base / "piqa_items.jsonl").open(encoding="utf-8")]
    anns = [json.loads(line) for line in (base / "piqa_annotations.jsonl").open(encoding="utf-8")]
    table = pa.table({"id": [d["item_key"] for d in items], "lang": ["en"] * len(items),
                      "goal": [d["goal"] for d in items], "sol1": [d["sol1"] for d in items],
                      "sol2": [d["sol2"] for d in items], "label": [d["gold_label"] for d in items]})
    return table, anns


@pytest.mark.parametrize("rule", ["unanimous", "majority"])
def test_real_piqa_judgments_through_the_import(lake, tmp_path, piqa_real, rule, capsys):
    table, anns = piqa_real
    run = make_run(lake, table, run_id="piqa-dev", dataset="piqa-dev")
    assert main(["review", "export", run, "--to", "csv", "--annotators", "3", "--batch", "dev",
                 "--rule", rule, "--lake", str(lake.root)]) == 0
    path = tmp_path / "judgments.jsonl"
    path.write_text("".join(json.dumps({"item_id": a["item_id"], "annotator": a["annotator"],
                                        "verdict": ["sol1", "sol2"][a["label"]]}) + "\n" for a in anns))
    result, manifest = import_files(lake, "dev", [path], n_boot=20)
    # independently: per item, the three labels
    per_item = defaultdict(list)
    for a in anns:
        per_item[a["item_id"]].append(a["label"])
    gold = dict(zip(table.column("id").to_pylist(), table.column("label").to_pylist(), strict=True))
    if rule == "unanimous":
        expect_kept = {i for i, labs in per_item.items() if len(set(labs)) == 1}
    else:
        expect_kept = set(per_item)
    kept = {r["id"]: r for r in result.reviewed.to_pylist() if r["drop_reason"] is None}
    assert set(kept) == expect_kept
    assert len(expect_kept) == (583 if rule == "unanimous" else 720)  # 81% unanimous, as the MANIFEST says
    for i, row in kept.items():
        majority = Counter(per_item[i]).most_common(1)[0][0]
        assert row["label"] == majority
        assert (row["review_edits"] is not None) == (majority != gold[i])
    assert result.stats["labels_changed"] == sum(Counter(per_item[i]).most_common(1)[0][0] != gold[i]
                                                 for i in expect_kept)
    assert round(result.stats["agreement"]["fleiss_kappa"]["value"], 2) == 0.75
    assert manifest.parents == [run] and manifest.stages[0].rows_kept == len(expect_kept)


def test_import_source_stage_yields_the_reviewed_rows(lake, tmp_path):
    export_run(lake, make_run(lake, ITEMS), to="csv", annotators=2, batch="b")
    path = tmp_path / "j.jsonl"
    path.write_text("".join(json.dumps({"item_id": i, "annotator": a, "verdict": v}) + "\n"
                            for i, a, v in [("q1", "x", "sol1"), ("q1", "y", "sol1"), ("q2", "x", "sol2"),
                                            ("q2", "y", "sol1"), ("q9", "x", "sol1")]))
    source = ReviewImportSource(lake=str(lake.root), batch="b", files=[str(path)], n_boot=0)
    rows = source.rows()
    assert rows.num_rows == 5 and rows.column("drop_reason").to_pylist() == [
        None, "no_consensus", "not_reviewed", "not_reviewed", "not_reviewed"]
    assert source.stats["judgments_rejected"] == {"not_exported": 1}
    assert (lake.root / "review" / "b" / "rejected_judgments.parquet").exists()
    assert {f["path"] for f in source.fingerprints()} >= {str(path)}
    from transforms.core.creating import is_creating

    assert is_creating(source)


def test_review_modules_import_light():
    import subprocess
    import sys

    mods = ["transforms.review.agreement", "transforms.review.judgments", "transforms.review.batch",
            "transforms.review.consensus", "transforms.review.importing", "transforms.review.labelstudio",
            "transforms.review.auto", "jobs.review", "jobs.cli"]
    heavy = ["sklearn", "statsmodels", "scipy", "krippendorff", "label_studio_sdk", "torch", "transformers", "ray"]
    code = (f"import importlib, sys\nfor m in {mods!r}: importlib.import_module(m)\n"
            f"print(sorted(h for h in {heavy!r} if h in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_cli_errors_are_one_line(lake, capsys):
    from tests.netutil import free_ports

    export_run(lake, make_run(lake, ITEMS), to="labelstudio", batch="b")
    (port,) = free_ports(1)
    assert main(["review", "push", "b", "--url", f"http://127.0.0.1:{port}", "--api-key", "k",
                 "--lake", str(lake.root)]) == 1
    assert "cannot reach Label Studio at" in capsys.readouterr().err
    assert main(["review", "import", "nope", "--from", "x.csv", "--lake", str(lake.root)]) == 1
    assert "no review batch 'nope'" in capsys.readouterr().err
    assert main(["review", "pull", "b", "--api-key", "k", "--lake", str(lake.root)]) == 1
    assert "never pushed" in capsys.readouterr().err


def test_import_runs_on_the_runner_as_a_child_run(lake, tmp_path, ray_local):
    """The lead's runner runs ReviewImportSource as a source stage; the run names its parent."""
    from transforms.core.runner import run_pipeline

    run = make_run(lake, ITEMS)
    export_run(lake, run, to="csv", annotators=2, batch="b")
    path = tmp_path / "j.jsonl"
    path.write_text("".join(json.dumps({"item_id": i, "annotator": a, "verdict": v}) + "\n"
                            for i, a, v in [("q1", "x", "sol1"), ("q1", "y", "sol1"), ("q2", "x", "sol2"),
                                            ("q2", "y", "unsafe"), ("q3", "x", "both_wrong"), ("q3", "y", "both_wrong")]))
    source = ReviewImportSource(lake=str(lake.root), batch="b", files=[str(path)], n_boot=0)
    manifest = run_pipeline(job="review-import", dataset="ko-piqa", source=source, stages=[], lake=lake,
                            config={}, parents=[run])
    stage = manifest.stages[0]
    assert manifest.parents == [run] and stage.kind == "source" and stage.conserved()
    assert (stage.rows_created, stage.rows_kept) == (5, 1)
    assert stage.rows_dropped == {"no_consensus": 1, "rejected_by_annotators:both_wrong": 1, "not_reviewed": 2}
    assert read_table(lake.zone("curated", "ko-piqa", manifest.run_id)).column("id").to_pylist() == ["q1"]
