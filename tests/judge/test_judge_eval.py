"""`piqaforge judge-eval` and its run helper (transforms/recipes/ko_piqa/run_eval.py), which had no test (issue 24)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import SAMPLES

from jobs.cli import main
from transforms.core.manifest import RunManifest, StageRecord
from transforms.recipes.ko_piqa.run_eval import evaluate_run, member_figures
from transforms.recipes.ko_piqa.seeds import LabelledRow


def _kin(i: int, doc: int, physical: int, text: str = "질문") -> dict:
    return LabelledRow(id=f"k{i}", text=text, source="naver_kin", url=f"https://kin.naver.com/qna?docId={doc}",
                       physical=physical).model_dump()


def _write(path: Path, table: pa.Table) -> str:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "part-00000.parquet")
    return str(path)


def test_evaluate_run_measures_what_a_run_kept_against_labels(tmp_path):
    # labels: 4 even-docId KiN (2 physical), 2 odd (1 physical), 1 chit-chat negative
    rows = [_kin(1, 10, 1), _kin(2, 12, 1), _kin(3, 14, 0), _kin(4, 16, 0), _kin(5, 11, 1), _kin(6, 13, 0),
            LabelledRow(id="c1", text="안녕", source="3i4k", physical=0).model_dump()]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    # the run: the prefilter drops k4 and c1; the ensemble (e5-strict) drops k3 and k6; k2 never reached
    # the prefilter (an earlier stage dropped it); one unlabelled row is kept
    pre_kept = pa.table({"id": ["k1", "k3", "k5", "k6", "u1"], "prefilter_score": [0.9, 0.6, 0.8, 0.55, 0.7],
                         "source": ["naver_kin"] * 4 + ["3i4k"]})
    pre_rej = pa.table({"id": ["k4", "c1"], "prefilter_score": [0.2, 0.1], "source": ["naver_kin", "3i4k"]})
    ens_kept = pa.table({"id": ["k1", "k5", "u1"], "source": ["naver_kin", "naver_kin", "3i4k"],
                         "ens_e5_strict_verdict": [True, True, True]})
    ens_rej = pa.table({"id": ["k3", "k6"], "source": ["naver_kin", "naver_kin"],
                        "ens_e5_strict_verdict": [False, False]})
    stages = [StageRecord(index=i, name=name, rows_in=0, rows_kept=0, seconds=0.0,
                          outputs={"kept": _write(tmp_path / name / "kept", kept),
                                   "rejected": _write(tmp_path / name / "rejected", rej)})
              for i, (name, kept, rej) in enumerate([("prefilter", pre_kept, pre_rej), ("ensemble", ens_kept, ens_rej)])]
    manifest = RunManifest(run_id="r", job="ko-piqa", dataset="ko-piqa", stages=stages)
    out = evaluate_run(manifest, [str(labels)])
    assert out["kept_stage"] == "ensemble" and out["kept_rows"] == 3
    assert out["kept_by_source"] == {"3i4k": 1, "naver_kin": 2} and out["kept_from_negative_sources"] == 1
    even, odd = out["groups"]["naver_kin/even"], out["groups"]["naver_kin/odd"]
    assert even["recall"] == 0.5 and even["precision"] == 1.0 and even["not_reaching_prefilter"] == 1
    assert odd["recall"] == 1.0 and odd["precision"] == 1.0
    assert {e["id"]: e["dropped_by"] for e in out["examples"]["rejected"]} == {"k3": "ensemble", "k6": "ensemble",
                                                                                  "k4": "prefilter", "c1": "prefilter"}
    strict = out["members"]["e5_strict"]
    assert strict["asked"] == 5 and strict["said_yes"] == 3 and strict["labelled"]["recall"] == 1.0
    assert member_figures(pa.table({}), []) == {}


def test_judge_eval_cli_reports_flip_rate_beside_precision_and_recall(tmp_path, capsys):
    held = [json.loads(x) for x in SAMPLES.joinpath("ko_heldout_labels.jsonl").read_text("utf-8").splitlines()]
    short = [r for r in held if len(r["text"]) < 160]
    pick = [r for r in short if r["physical"]][:6] + [r for r in short if not r["physical"]][:6]
    labels = tmp_path / "few.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pick), encoding="utf-8")
    out = tmp_path / "judges"
    assert main(["judge-eval", "--labels", str(labels), "--no-llm", "--injection-rows", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "flip rate" in printed and "injection templates prefilter" in printed
    result = json.loads((out / "judges.json").read_text(encoding="utf-8"))
    pre = result["judges"]["prefilter"]
    assert result["rows"] == 12 and result["positives"] == 6 and 0 <= pre["precision"] <= 1 and 0 <= pre["recall"] <= 1
    templates = result["injection"]["templates"]
    assert templates["negatives"] == 4 and templates["templates"] >= 20
    for name in ("prefilter", "cascade"):
        flips = templates["judges"][name]
        assert flips["attacked"] > 400 and flips["by_kind"]["instruction"] == flips["by_kind"]["role"] == 0
        assert all(flips["by_position"][p] == 0 for p in ("end", "start", "inside"))
    html = (out / "judges.html").read_text(encoding="utf-8")
    assert "Injection templates" in html and "flip rate" in html


def test_the_report_section_has_a_members_and_a_groups_table_only_when_there_are_rows():
    from transforms.recipes.ko_piqa.judge_report import render_judges

    m = {"rows": 3, "positives": 1, "tp": 1, "fp": 0, "precision": 1.0, "recall": 1.0, "auc": 0.5, "pass_rate": 0.3}
    run = {"groups": {"naver_kin/odd": m}, "members": {"e5-strict": {"asked": 3, "said_yes": 1, "labelled": m}},
           "kept_rows": 3, "kept_stage": "ensemble", "kept_by_source": {"naver_kin": 3}}
    result = {"judges": {"prefilter": {**m, "kind": "linear", "cost": {}}},
              "by_group": {"naver_kin/odd": {"cascade": m, "prefilter": m}}}
    html = render_judges({"run": run, "judge_eval": result})
    assert ("<h3>Ensemble members on the rows they were asked about</h3><table><tr><th class='l'>member</th>"
            "<th>asked</th>") in html and "<td class='l'>e5-strict</td><td>3</td><td>1</td>" in html
    assert "<h3>Cascade by source (KiN even = seed labels, odd = held out)</h3>" in html
    bare = render_judges({"run": {**run, "members": {}}, "judge_eval": {**result, "by_group": {}}})
    assert "Ensemble members" not in bare and "Cascade by source" not in bare and "naver_kin/odd" in bare
