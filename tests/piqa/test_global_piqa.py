"""The Global PIQA shape of a release: columns per recipe, TSV/JSONL one item per line, round trips, card."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from transforms.piqa.formats import read_items, read_piqa, read_xcopa
from transforms.piqa.global_piqa import (
    COLUMN_DOCS,
    CORE,
    global_piqa_table,
    read_global_piqa,
    write_global_piqa,
)
from transforms.release.writer import build_release

GATE = {"success": True, "suite": "test", "checks": [], "reasons": []}


@pytest.fixture(scope="module")
def tamil(shared_data):
    return read_xcopa(shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl")


@pytest.fixture(scope="module")
def piqa(shared_data):
    return read_piqa(shared_data / "piqa_en" / "valid.jsonl", shared_data / "piqa_en" / "valid-labels.lst").slice(0, 40)


def _put(table, name, values):
    i = table.schema.get_field_index(name)
    return table.set_column(i, name, values) if i >= 0 else table.append_column(name, values)


def _lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]  # the file ends with one newline


def test_tamil_items_round_trip_through_tsv_and_jsonl(tamil, tmp_path):
    info = write_global_piqa(tamil, tmp_path, "xcopa-ta.global_piqa", "ta-piqa")
    assert info["files"] == ["xcopa-ta.global_piqa.jsonl", "xcopa-ta.global_piqa.tsv"]
    assert info["rows"] == tamil.num_rows == 100
    tsv = _lines(tmp_path / "xcopa-ta.global_piqa.tsv")
    # XCOPA is translated COPA: every item is marked not cultural, so the column is written
    assert tsv[0].split("\t") == ["prompt", "solution0", "solution1", "label", "id", "lang", "is_cultural", "source"]
    assert len(tsv) == 101 and all(line.count("\t") == 7 for line in tsv)
    first = tsv[1].split("\t")
    assert first[:4] == [tamil.column("goal")[0].as_py(), tamil.column("sol1")[0].as_py(),
                         tamil.column("sol2")[0].as_py(), str(tamil.column("label")[0].as_py())]
    jsonl = [json.loads(x) for x in _lines(tmp_path / "xcopa-ta.global_piqa.jsonl")]
    assert len(jsonl) == 100 and list(jsonl[0])[:4] == list(CORE)
    for name in info["files"]:
        back = read_global_piqa(tmp_path / name)
        for col in ("id", "lang", "goal", "sol1", "sol2", "label", "source", "is_cultural"):
            assert back.column(col).to_pylist() == tamil.column(col).to_pylist(), (name, col)
    # the JSONL is also what the project's own reader takes for a prompt/solution file
    assert read_items(tmp_path / "xcopa-ta.global_piqa.jsonl").column("sol2").to_pylist() == \
        tamil.column("sol2").to_pylist()


def test_j_piqa_gets_the_appendix_columns(piqa):
    lines = piqa.column("orig_line_no").to_pylist()
    parts = ["translation" if i % 3 else "direct_generation" for i in range(piqa.num_rows)]
    items = _put(piqa, "source", pa.array(parts))
    for gloss, text in (("goal_gloss", "goal"), ("sol1_gloss", "sol1"), ("sol2_gloss", "sol2")):
        items = _put(items, gloss, piqa.column(text))
    out = global_piqa_table(items, "j-piqa")
    assert out.column_names == ["prompt", "solution0", "solution1", "label", "id", "lang", "prompt_gloss",
                                "solution0_gloss", "solution1_gloss", "source", "orig_line_no", "is_translation"]
    assert out.column("source").to_pylist()[:3] == ["piqa_original", "piqa_translation", "piqa_translation"]
    assert out.column("orig_line_no").to_pylist()[:3] == [-1, lines[1], lines[2]]
    assert out.column("is_translation").to_pylist()[:3] == [False, True, True]
    assert all(c in COLUMN_DOCS for c in out.column_names)


def test_pindic_taxonomy_and_locale_kept_and_empty_columns_left_out(piqa):
    n = piqa.num_rows
    items = piqa
    for col, value in (("domain", "Kitchen"), ("core_principle", "Heat transfer"),
                       ("key_properties_materials", "Clay"), ("action_type", "Cooking"), ("locale", "IN-KA")):
        items = _put(items, col, pa.array([value] * n))
    items = _put(items, "is_cultural", pa.nulls(n, pa.bool_()))  # unknown everywhere: not written
    out = global_piqa_table(items, "pindic")
    assert out.column_names[6:] == ["domain", "core_principle", "key_properties_materials", "action_type", "locale"]
    ko = _put(piqa, "is_cultural", pa.array([i % 2 == 0 for i in range(n)]))
    assert global_piqa_table(ko, "ko-piqa").column_names[6:] == ["is_cultural", "source"]


def test_tabs_and_line_breaks_keep_one_item_per_line(piqa, tmp_path):
    goals = piqa.column("goal").to_pylist()
    goals[0] = "first line\nsecond line\twith a tab"
    goals[1] = "windows\r\nline end"
    items = piqa.set_column(piqa.schema.get_field_index("goal"), "goal", pa.array(goals))
    info = write_global_piqa(items, tmp_path, "x")
    assert info["tsv_cells_changed"] == 2
    tsv = _lines(tmp_path / "x.tsv")
    assert len(tsv) == piqa.num_rows + 1
    assert tsv[1].split("\t")[0] == "first line second line with a tab"
    assert tsv[2].split("\t")[0] == "windows line end"
    assert read_global_piqa(tmp_path / "x.jsonl").column("goal").to_pylist()[:2] == goals[:2]


def test_not_a_global_piqa_file_is_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"goal": "g", "sol1": "a", "sol2": "b", "label": 0}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a Global PIQA file"):
        read_global_piqa(path)


def test_every_release_writes_the_shape_and_the_card_explains_it(tamil, tmp_path):
    out = tmp_path / "rel"
    result = build_release(tamil, GATE, out_dir=out, dataset="xcopa-ta", recipe="ta-piqa", version="1.0", audit=False)
    assert {"extras/formats/xcopa-ta.global_piqa.tsv", "extras/formats/xcopa-ta.global_piqa.jsonl"} <= set(result.files)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Global PIQA shape" in card and "licence forbids training" in card
    assert f"| `label` | {COLUMN_DOCS['label']} |" in card and "| `source` |" in card
    assert "`xcopa-ta.global_piqa.tsv`" in card
