"""Writers' files are human-authored: one line cut in the middle refuses them whole (issue 32 §4)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from jobs.cli import main
from transforms.io.common import RefusedInputError
from transforms.io.writers_intake import WriterColumns, WritersIntake

SAMPLE = Path(__file__).resolve().parents[1] / "lake" / "samples" / "ta_items"
COLUMNS = WriterColumns(id="item_no", source="source", keep=["xcopa_id"])


@pytest.fixture
def one_cut_file(tmp_path) -> Path:
    """The first 20 records of the bundled writer_a.csv (clean), its 5th record's line cut in the middle."""
    folder = tmp_path / "writers"
    folder.mkdir()
    lines = (SAMPLE / "writer_a.csv").read_text("utf-8").splitlines(keepends=True)[:21]
    (folder / "writer_b.csv").write_text("".join(lines), "utf-8")
    assert WritersIntake(path=str(folder / "writer_b.csv"), columns=COLUMNS).malformed_lines() == []
    lines[5] = lines[5][: len(lines[5]) // 2].replace('"', "") + "\n"
    (folder / "writer_b.csv").write_text("".join(lines), "utf-8")
    shutil.copy(SAMPLE / "writer_d.xlsx", folder / "writer_d.xlsx")
    return folder


def test_a_cut_line_refuses_the_files_whole_naming_file_and_line(one_cut_file):
    stage = WritersIntake(path=str(one_cut_file), columns=COLUMNS)
    with pytest.raises(RefusedInputError, match=r"1 malformed line\(s\).*writer_b\.csv:6: expected \d+ fields"):
        stage.rows()
    with pytest.raises(RefusedInputError):
        stage.fingerprints()  # what the runner asks first, before any output


def test_allow_malformed_keeps_the_rest_and_counts_what_was_set_aside(one_cut_file, caplog):
    table = WritersIntake(path=str(one_cut_file), columns=COLUMNS, allow_malformed=True).rows()
    reasons = table.column("drop_reason").to_pylist()
    assert reasons.count("malformed_row") == 1
    bad = table.filter(pc.equal(table.column("drop_reason"), "malformed_row")).to_pylist()[0]
    assert (bad["source_file"], bad["source_row"]) == ("writer_b.csv", 6)
    assert "1 malformed line(s) set aside" in caplog.text


def test_a_recipe_run_on_a_cut_file_exits_2_and_writes_no_items(one_cut_file, tmp_path, capsys):
    lake = tmp_path / "lake"
    code = main(["run", "ta-piqa", "--lake", str(lake), "--run-id", "cut", "--set", f"input={one_cut_file}",
                 "--set", "records={}", "--set", "allow_malformed=false"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "writer_b.csv:6" in err and "allow_malformed" in err
    assert not list(lake.glob("curated/**/*.parquet"))  # nothing written
