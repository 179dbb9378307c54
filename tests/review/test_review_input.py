"""Human input files checked as a whole before import (issue 24): every case from a file written here.

A filled review CSV is made the way a reviewer makes it (the exported review.csv, verdicts typed in) and
then damaged the way spreadsheets and people damage it; each damaged file must either import correctly
or fail with one line naming the file, the line and the problem, leaving the lake as it was.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from pathlib import Path

import pytest
from test_review import ITEMS, make_run

from jobs.cli import main
from transforms.core.lake import Lake
from transforms.io.input_files import InputFileError
from transforms.review.batch import ReviewError, export_run, load_batch
from transforms.review.importing import check_import, import_files

VERDICTS = {"q1": "sol1", "q2": "sol2", "q3": "sol1", "q4": "sol1", "q5": "sol1"}


@pytest.fixture
def lake(tmp_path) -> Lake:
    lake = Lake(tmp_path / "lake").create()
    export_run(lake, make_run(lake, ITEMS), to="csv", annotators="kim,lee", batch="b")
    return lake


def exported_rows(lake: Lake, batch: str = "b") -> list[dict[str, str]]:
    raw = (lake.root / "review" / batch / "review.csv").read_bytes()
    assert raw.startswith(codecs.BOM_UTF8)  # Excel reads Korean text right only with the BOM
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))


def filled(lake: Lake, annotator: str | None = None) -> list[dict[str, str]]:
    rows = [r for r in exported_rows(lake) if annotator in (None, r["annotator"])]
    for r in rows:
        r["verdict"] = VERDICTS[r["item_id"]]
    return rows


def write_csv(path: Path, rows: list[dict[str, str]], *, encoding: str = "utf-8", sep: str = ",",
              newline: str = "\n", header: list[str] | None = None) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=sep, lineterminator=newline)
    cols = list(rows[0])
    w.writerow(header or cols)
    for r in rows:
        w.writerow([r[c] for c in cols])
    path.write_bytes(buf.getvalue().encode(encoding))
    return path


def lake_files(lake: Lake) -> dict[str, int]:
    return {str(p.relative_to(lake.root)): p.stat().st_size for p in lake.root.rglob("*") if p.is_file()}


def fails(lake: Lake, files: list[Path], *words: str, **kw) -> str:
    before = lake_files(lake)
    with pytest.raises((InputFileError, ReviewError)) as err:
        import_files(lake, "b", files, n_boot=0, **kw)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert lake_files(lake) == before  # atomic: nothing written
    return message


def test_a_filled_csv_imports_with_counts_per_file(lake, tmp_path):
    path = write_csv(tmp_path / "kim.csv", filled(lake, "kim"))
    path2 = write_csv(tmp_path / "lee.csv", filled(lake, "lee"))
    result, manifest = import_files(lake, "b", [path, path2], n_boot=0)
    assert result.stats["kept"] == 5
    assert result.stats["files"][str(path)]["valid"] == 5 and result.stats["files"][str(path2)]["valid"] == 5


@pytest.mark.parametrize("encoding,sep,newline", [("utf-16", "\t", "\r\n"), ("utf-8-sig", ",", "\r\n"),
                                                  ("utf-16-le", "\t", "\n"), ("utf-8", ";", "\r\n")])
def test_utf16_bom_and_windows_line_ends_read_right(lake, tmp_path, encoding, sep, newline):
    path = write_csv(tmp_path / "f.csv", filled(lake), encoding=encoding, sep=sep, newline=newline)
    result, _ = import_files(lake, "b", [path], n_boot=0)
    assert result.stats["judgments_valid"] == 10 and result.stats["kept"] == 5


def test_an_undecodable_file_is_named(lake, tmp_path):
    path = tmp_path / "latin1.csv"
    write_csv(path, filled(lake), encoding="utf-8")
    path.write_bytes(path.read_bytes().decode("utf-8").encode("cp949", errors="replace"))
    fails(lake, [path], str(path), "not UTF-8")


@pytest.mark.parametrize("new_name", ["answer", "평가"])
def test_a_renamed_verdict_column_is_named(lake, tmp_path, new_name):
    rows = filled(lake)
    header = [new_name if c == "verdict" else c for c in rows[0]]
    path = write_csv(tmp_path / "f.csv", rows, header=header)
    fails(lake, [path], str(path), "'label' or 'verdict'", new_name)


def test_header_case_and_order_do_not_matter(lake, tmp_path):
    rows = [{"Verdict": r["verdict"], " Annotator ": r["annotator"], "ITEM_ID": r["item_id"]} for r in filled(lake)]
    path = write_csv(tmp_path / "f.csv", rows)
    assert import_files(lake, "b", [path], n_boot=0)[0].stats["kept"] == 5


def test_a_renamed_item_column_is_named_not_called_not_exported(lake, tmp_path):
    rows = filled(lake)
    path = write_csv(tmp_path / "f.csv", rows, header=["judgment_id", "item", *list(rows[0])[2:]])
    fails(lake, [path], str(path), "'item_id'", "columns:")


def test_an_annotator_column_pasted_from_another_file_fails(lake, tmp_path):
    rows = filled(lake, "lee")
    for r in rows:
        r["annotator"] = "kim"
    path = write_csv(tmp_path / "lee.csv", rows)
    fails(lake, [path], f"{path}:2", "names annotator 'lee'", "says 'kim'")


def test_a_file_of_another_batch_fails(lake, tmp_path):
    export_run(lake, make_run(lake, ITEMS, run_id="other-run"), to="csv", annotators="kim,lee", batch="other")
    rows = [r | {"verdict": "sol1"} for r in exported_rows(lake, "other")]
    path = write_csv(tmp_path / "other.csv", rows)
    fails(lake, [path], str(path), "belongs to batch 'other'")


def test_a_file_cut_inside_a_quoted_field_fails_with_its_line(lake, tmp_path):
    rows = filled(lake)
    rows[3]["comment"] = "헷갈림, 두 번 읽음"  # a comma: the field is quoted
    path = write_csv(tmp_path / "f.csv", rows)
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.index("헷갈림") + 2], encoding="utf-8")
    fails(lake, [path], str(path), "cut short")


def test_a_file_cut_at_a_line_boundary_fails_unless_partial_is_allowed(lake, tmp_path):
    path = write_csv(tmp_path / "f.csv", filled(lake)[:7])  # q1..q3 for both, q4 for kim only
    message = fails(lake, [path], str(path), "cut short", "'lee' lacks 2 (first 'q4')", "'kim' lacks 1 (first 'q5')")
    assert "allow-partial" in message
    result, _ = import_files(lake, "b", [path], n_boot=0, allow_partial=True)
    assert result.stats["judgments_valid"] == 7


def test_trailing_blank_rows_are_not_judgments(lake, tmp_path):
    path = write_csv(tmp_path / "f.csv", filled(lake), newline="\r\n")
    path.write_bytes(path.read_bytes() + b",,,,,,,,,,\r\n\r\n,,,,,,,,,,\r\n")
    result, _ = import_files(lake, "b", [path], n_boot=0)
    assert result.stats["judgments"] == 10 and result.stats["judgments_rejected"] == {}


def test_excel_formats_are_undone_and_formulas_refused(lake, tmp_path):
    rows = filled(lake)
    rows[0]["verdict"] = '="sol1"'          # Excel's way to keep text as text
    rows[1]["verdict"] = "'sol1"            # the text marker
    path = write_csv(tmp_path / "f.csv", rows)
    assert import_files(lake, "b", [path], n_boot=0)[0].stats["judgments_valid"] == 10
    rows[2]["comment"] = "=HYPERLINK(\"http://x\")"
    path = write_csv(tmp_path / "g.csv", rows)
    fails(lake, [path], f"{path}:4", "formula", replace=True)


def test_numbers_a_spreadsheet_reformatted_map_back_to_the_batch_ids(tmp_path):
    lake = Lake(tmp_path / "lake2").create()
    items = ITEMS.set_column(0, "id", [["1234", "2000", "3", "4", "5"]])
    export_run(lake, make_run(lake, items), to="csv", annotators="kim", batch="b")
    rows = [r | {"verdict": "sol1", "item_id": {"1234": "1,234", "2000": "2000.0"}.get(r["item_id"], r["item_id"]),
                 "judgment_id": ""} for r in exported_rows(lake)]
    path = write_csv(tmp_path / "f.csv", rows)
    result, _ = import_files(lake, "b", [path], n_boot=0)
    assert result.stats["judgments_valid"] == 5


def test_a_file_with_no_valid_judgment_fails_and_names_why(lake, tmp_path):
    rows = filled(lake)
    for r in rows:
        r["verdict"] = "maybe"
    path = write_csv(tmp_path / "f.csv", rows)
    fails(lake, [path], str(path), "no valid judgment", "unknown_label:maybe", f"{path}:2")


def test_unknown_labels_and_items_are_rejected_with_their_line(lake, tmp_path):
    rows = filled(lake)
    rows[4]["verdict"] = "Solution 3"
    rows.append(rows[0] | {"judgment_id": "", "item_id": "q99"})
    path = write_csv(tmp_path / "f.csv", rows)
    result, _ = import_files(lake, "b", [path], n_boot=0)
    f = result.stats["files"][str(path)]
    assert f["rejected"] == {"unknown_label:Solution 3": 1, "not_exported": 1}
    assert f["first"]["unknown_label:Solution 3"] == f"{path}:6" and f["first"]["not_exported"] == f"{path}:12"


def test_the_same_annotator_twice_on_an_item_is_rejected(lake, tmp_path):
    kim, lee = filled(lake, "kim"), filled(lake, "lee")
    first = write_csv(tmp_path / "a.csv", kim + lee[:4])
    second = write_csv(tmp_path / "b.csv", [lee[4], kim[0]])
    result, _ = import_files(lake, "b", [first, second], n_boot=0, allow_partial=True)
    assert result.stats["judgments_rejected"] == {"duplicate_judgment": 1}
    assert result.stats["files"][str(second)]["first"]["duplicate_judgment"] == f"{second}:3"
    # a file that only repeats judgments already given imports nothing
    again = write_csv(tmp_path / "c.csv", kim)
    fails(lake, [first, again], str(again), "no valid judgment", "duplicate_judgment", replace=True,
          allow_partial=True)


def test_a_truncated_json_export_fails_with_its_line(lake, tmp_path):
    tasks = [{"id": 1, "data": {"item_id": "q1"}, "annotations": [
        {"id": 9, "completed_by": {"email": "kim"}, "result": [{"from_name": "verdict", "value": {"choices": ["sol1"]}}]}]}]
    path = tmp_path / "export.json"
    text = json.dumps(tasks, indent=1)
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    fails(lake, [path], str(path), "not valid JSON", "cut short")


def test_reimport_needs_replace_and_supersedes_the_first(lake, tmp_path, capsys):
    path = write_csv(tmp_path / "f.csv", filled(lake))
    _, first = import_files(lake, "b", [path], n_boot=0)
    fails(lake, [path], "imported already", first.run_id, "--replace")
    _, second = import_files(lake, "b", [path], n_boot=0, replace=True)
    record, _ = load_batch(lake, "b")
    assert record.imports[0]["superseded_by"] == second.run_id
    assert record.imports[1]["supersedes"] == [first.run_id]
    old = json.loads(lake.manifest_path(first.run_id).read_text(encoding="utf-8"))
    assert old["extras"]["superseded_by"] == second.run_id
    # `piqaforge runs` and `show` list the replaced import as superseded, the one that replaced it as succeeded
    assert main(["runs", "--lake", str(lake.root)]) == 0
    listed = {line.split()[0]: line.split()[2] for line in capsys.readouterr().out.splitlines()[1:]}
    assert listed[first.run_id] == "superseded" and listed[second.run_id] == "succeeded"
    assert main(["show", first.run_id, "--lake", str(lake.root)]) == 0
    shown = capsys.readouterr().out
    assert "status superseded" in shown and f"superseded by {second.run_id}" in shown


def test_dry_run_writes_nothing(lake, tmp_path, capsys):
    path = write_csv(tmp_path / "f.csv", filled(lake))
    before = lake_files(lake)
    assert main(["review", "import", "b", "--from", str(path), "--dry-run", "--lake", str(lake.root)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: 10 judgment(s), 10 valid" in out and "dry run: nothing written" in out
    assert lake_files(lake) == before
    assert check_import(lake, "b", [path], n_boot=0).stats["kept"] == 5


def test_cli_import_errors_are_one_line_and_non_zero(lake, tmp_path, capsys):
    rows = filled(lake)
    path = write_csv(tmp_path / "f.csv", rows, header=[("Answer" if c == "verdict" else c) for c in rows[0]])
    assert main(["review", "import", "b", "--from", str(path), "--lake", str(lake.root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and "verdict" in err


def test_exported_cells_cannot_inject_a_formula(tmp_path):
    lake = Lake(tmp_path / "lake3").create()
    items = ITEMS.set_column(ITEMS.column_names.index("goal"), "goal",
                             [["=1+1", "+SUM(A1)", "-2", "@cmd", "보통 문장"]])
    export_run(lake, make_run(lake, items), to="csv", annotators="kim", batch="b")
    goals = [r["goal"] for r in exported_rows(lake)]
    assert goals == ["'=1+1", "'+SUM(A1)", "'-2", "'@cmd", "보통 문장"]


def test_agreement_normalises_verdicts_like_the_import(lake, tmp_path, capsys):
    rows = filled(lake)
    spell = {"sol1": ["sol1", "SOL1", "Solution 1 is correct"], "sol2": ["Sol2", "Solution 2 is correct", "SOL2"]}
    for i, r in enumerate(rows):
        r["verdict"] = spell[r["verdict"]][i % 3]
    path = write_csv(tmp_path / "f.csv", rows, encoding="utf-16", sep="\t")
    assert main(["review", "agreement", str(path), "--json", "--boot", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["percent_agreement"]["value"] == 1.0
    assert main(["review", "agreement", str(path), "--json", "--boot", "0", "--raw-labels"]) == 0
    assert json.loads(capsys.readouterr().out)["percent_agreement"]["value"] < 0.5


def test_requeue_shows_the_first_round_and_its_import_is_a_child_of_the_first_review_run(lake, tmp_path):
    from transforms.review.batch import requeue

    rows = filled(lake)
    for r in rows:
        if r["item_id"] == "q3" and r["annotator"] == "lee":
            r["verdict"], r["comment"] = "sol2", "둘 다 될 것 같음"
    _, first = import_files(lake, "b", [write_csv(tmp_path / "f.csv", rows)], n_boot=0)
    new = requeue(lake, "b", to="csv", name="b-adjudicate", annotators="park")
    assert new.item_ids == ["q3"] and new.parent_review_run == first.run_id and new.parent_batch == "b"
    shown = exported_rows(lake, "b-adjudicate")
    assert shown[0]["earlier_verdicts"] == "kim: sol1; lee: sol2"
    assert shown[0]["earlier_comments"] == "lee: 둘 다 될 것 같음"
    shown[0]["verdict"] = "sol1"
    path = write_csv(tmp_path / "adj.csv", shown)

    result, second = import_files(lake, "b-adjudicate", [path], n_boot=0)
    assert result.stats["kept"] == 1 and second.parents == [first.run_id]


def test_the_cli_import_starts_no_ray_and_prints_no_ray_line(lake, tmp_path):
    """docs/review.md: `review import` writes its run without starting Ray, so Ray says nothing, on the console
    or in the run's ray.log (issue 32 §4: its start-up WARNING/INFO lines reached the console)."""
    import re
    import subprocess
    import sys

    path = write_csv(tmp_path / "f.csv", filled(lake))
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "review", "import", "b", "--from", str(path),
                           "--lake", str(lake.root)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert "imported 10 judgment(s) into batch b" in proc.stdout
    ray_lines = [line for line in proc.stderr.splitlines() if re.search(r"\bray\b|\.py:\d+ -- ", line, re.I)]
    assert ray_lines == [], ray_lines
    (run_dir,) = [p for p in (lake.root / "runs").iterdir() if p.name.startswith("review-")]
    ray_log = run_dir / "logs" / "ray.log"
    assert not ray_log.exists() or ray_log.read_text(encoding="utf-8") == ""
