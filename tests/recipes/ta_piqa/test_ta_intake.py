"""Writer-file intake on the bundled Tamil writer files (lake/samples/ta_items, built from XCOPA-ta by
scripts/build_ta_items.py): every deliberately damaged row is rejected with its reason at its row,
every other row is accepted, writers get feedback files, and the build is reproducible."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transforms.io.common import ColumnMappingError
from transforms.io.writers_intake import (
    WriterColumns,
    WritersIntake,
    text_problems,
    unmojibake,
)
from transforms.text import textcheck as tc

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "lake" / "samples"

ITEMS = SAMPLES / "ta_items"
MAPPING = WriterColumns(id="item_no", source="source", keep=["xcopa_id"])
# (writer, file, row as a spreadsheet shows it, reason): what build_ta_items.py damaged on purpose
EXPECTED_REJECTS = {
    ("writer_a", "writer_a.csv", 31, "malformed_row"), ("writer_a", "writer_a.csv", 61, "empty_field"),
    ("writer_a", "writer_a.csv", 91, "bad_label"), ("writer_b", "writer_b.tsv", 31, "mojibake"),
    ("writer_b", "writer_b.tsv", 61, "not_in_script"), ("writer_b", "writer_b.tsv", 91, "invalid_utf8"),
    ("writer_c", "writer_c.jsonl", 30, "identical_solutions"), ("writer_c", "writer_c.jsonl", 60, "stray_bom"),
    ("writer_c", "writer_c.jsonl", 90, "malformed_row"), ("writer_d", "writer_d.xlsx", 31, "bad_label"),
    ("writer_d", "writer_d.xlsx", 61, "empty_field"), ("writer_d", "writer_d.xlsx", 91, "duplicate_id"),
}


@pytest.fixture(scope="module")
def intake(tmp_path_factory):
    feedback = tmp_path_factory.mktemp("feedback")
    table = WritersIntake(path=str(ITEMS), allow_malformed=True, columns=MAPPING, feedback_dir=str(feedback)).rows()
    return table, feedback


def test_every_record_is_a_row_and_only_the_damaged_ones_are_rejected(intake):
    table, _ = intake
    # independent count of the records in the four files (data lines, JSON lines, sheet rows)
    lines = sum(1 for f in ("writer_a.csv", "writer_b.tsv") for line in (ITEMS / f).read_bytes().splitlines()[1:]
                if line.strip())
    lines += sum(1 for line in (ITEMS / "writer_c.jsonl").read_bytes().splitlines() if line.strip())
    import openpyxl

    wb = openpyxl.load_workbook(ITEMS / "writer_d.xlsx", read_only=True)
    lines += sum(1 for _ in wb.worksheets[0].iter_rows(min_row=2))
    wb.close()
    assert table.num_rows == lines == 609
    rejected = {(r["writer_id"], r["source_file"], r["source_row"], r["drop_reason"])
                for r in table.to_pylist() if r["drop_reason"]}
    assert rejected == EXPECTED_REJECTS


def test_accepted_rows_are_clean_items(intake):
    table, _ = intake
    kept = table.filter(pc.is_null(table.column("drop_reason")))
    assert kept.num_rows == 597
    assert set(kept.column("label").to_pylist()) == {0, 1}
    assert len(set(kept.column("id").to_pylist())) == kept.num_rows
    for col in ("goal", "sol1", "sol2"):
        assert all(tc.script_share(t, "ta") >= 0.8 for t in kept.column(col).to_pylist())
    # writer ids: from the column in three files, from the file name for the XLSX (it has no writer column)
    counts = {w.as_py(): c.as_py() for w, c in zip(*pc.value_counts(table.column("writer_id")).flatten(), strict=True)}
    assert counts == {"writer_a": 150, "writer_b": 150, "writer_c": 150, "writer_d": 159}


def test_mojibake_row_says_what_it_should_read(intake, shared_data):
    table, _ = intake
    row = next(r for r in table.to_pylist() if r["drop_reason"] == "mojibake")
    original = [json.loads(x) for x in (shared_data / "xcopa_ta" / "data_ta_test.ta.jsonl").open(encoding="utf-8")]
    assert any(o["premise"][:40] in row["drop_detail"] for o in original)


def test_feedback_files_tell_each_writer_which_row_and_why(intake):
    table, feedback = intake
    summary = json.loads((feedback / "summary.json").read_text("utf-8"))
    assert {w: s["rejected"] for w, s in summary.items()} == {"writer_a": 3, "writer_b": 3, "writer_c": 3,
                                                              "writer_d": 3}
    with open(feedback / "writer_b.csv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["row"], r["reason"]) for r in rows] == [("31", "mojibake"), ("61", "not_in_script"),
                                                       ("91", "invalid_utf8")]
    assert (feedback / "writer_a.csv").read_bytes().startswith(b"\xef\xbb\xbf")  # spreadsheets read Tamil right
    with open(feedback / "writer_a.csv", encoding="utf-8-sig", newline="") as f:
        notes = [r for r in csv.DictReader(f) if r["reason"] == "file_note"]
    assert notes and "byte-order mark" in notes[0]["detail"]  # writer_a.csv was saved with a BOM


def test_encoding_checks_unit():
    tamil = "அந்த மனிதன் குழாயைத் திறந்தான்"
    broken = tamil.encode("utf-8").decode("latin-1")
    assert unmojibake(broken) == tamil
    assert unmojibake(tamil) is None and unmojibake("café au lait") is None and unmojibake("plain") is None
    assert text_problems("goal", "\ufeff" + tamil, "ta", 0.8)[0][0] == "stray_bom"
    assert text_problems("goal", tamil + "\ufffd", "ta", 0.8)[0][0] == "replacement_char"
    assert text_problems("goal", "The man opened the tap", "ta", 0.8)[0][0] == "not_in_script"
    # a Tamil sentence with one English loanword passes the script check
    assert text_problems("goal", "அவன் TV பார்த்தான் நேற்று இரவு முழுவதும்", "ta", 0.8) == []


def test_wrong_mapping_fails_fast_and_a_bad_file_alone_is_rejected(tmp_path):
    bad = WriterColumns(goal="prompt")
    with pytest.raises(ColumnMappingError, match="prompt"):
        WritersIntake(path=str(ITEMS), allow_malformed=True, columns=bad).rows()
    (tmp_path / "w1.csv").write_text("goal,sol1,sol2,label\nஅவன் கதவைத் திறந்தான்,கதவு திறந்தது,கதவு மூடியது,0\n",
                                     encoding="utf-8")
    (tmp_path / "w2.csv").write_text("question,a,b,answer\nx,y,z,0\n", encoding="utf-8")
    out = WritersIntake(path=str(tmp_path), columns=WriterColumns(writer=None)).rows()
    assert out.column("drop_reason").to_pylist() == [None, "missing_column"]
    assert out.column("writer_id").to_pylist() == ["w1", "w2"]
    # a per-file mapping fixes w2
    fixed = WritersIntake(path=str(tmp_path), columns=WriterColumns(writer=None), file_columns={
        "w2.csv": WriterColumns(goal="question", sol1="a", sol2="b", label="answer", writer=None)}).rows()
    assert fixed.column("drop_reason").to_pylist()[1] == "not_in_script"  # now read; 'x' is not Tamil


def test_utf16_file_is_read_and_noted(tmp_path):
    text = "goal\tsol1\tsol2\tlabel\nஅவன் கதவைத் திறந்தான்\tகதவு திறந்தது\tகதவு மூடியது\t1\n"
    (tmp_path / "w.tsv").write_bytes(text.encode("utf-16"))
    out = WritersIntake(path=str(tmp_path), columns=WriterColumns(writer=None),
                        feedback_dir=str(tmp_path / "fb")).rows()
    assert out.column("drop_reason").to_pylist() == [None] and out.column("label").to_pylist() == [1]
    assert "UTF-16" in (tmp_path / "fb" / "w.csv").read_text("utf-8-sig")


def test_source_stage_contract():
    stage = WritersIntake(path=str(ITEMS), allow_malformed=True, columns=MAPPING)
    assert stage.creates and len(stage.fingerprints()) == 4
    assert isinstance(stage.rows(), pa.Table)


def test_build_is_reproducible(tmp_path, shared_data):
    out = tmp_path / "ta_items"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_ta_items.py"), "--data",
                    str(shared_data / "xcopa_ta"), "--out", str(out)], check=True, capture_output=True)
    for f in sorted(ITEMS.glob("writer_*")):
        assert hashlib.sha256((out / f.name).read_bytes()).hexdigest() == hashlib.sha256(f.read_bytes()).hexdigest()
