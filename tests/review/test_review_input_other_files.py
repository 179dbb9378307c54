"""Issue 24: the other human input files (Tamil writers' intake, seed labels, lexicons) read as a whole:
encodings read right, a truncated file or a duplicated id named with file and line."""

from __future__ import annotations

import json

import pytest
import yaml

from transforms.io.writers_intake import WriterColumns, read_writer_file
from transforms.judge.labels import LabelError, load_labels
from transforms.llm.cultural import load_lexicon

GOOD = {"goal": "தண்ணீர் கொதிக்க", "sol1": "அடுப்பில் வை", "sol2": "குளிரில் வை", "label": "0"}


def _csv(rows: list[dict[str, str]], sep: str = ",") -> str:
    head = sep.join(rows[0])
    return "\n".join([head, *[sep.join(f'"{v}"' for v in r.values()) for r in rows]]) + "\n"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-8-sig"])
def test_writer_files_in_utf16_or_with_a_bom_are_read(tmp_path, encoding):
    path = tmp_path / "writer_x.tsv"
    path.write_bytes(_csv([GOOD, GOOD | {"goal": "கதவு திற"}], "\t").encode(encoding))
    records, notes, ok = read_writer_file(path, WriterColumns())
    assert ok and len(records) == 2 and not any(r["problems"] for r in records)
    assert records[0]["values"]["goal"] == GOOD["goal"]


def test_a_writer_file_cut_inside_a_quote_names_the_row(tmp_path):
    path = tmp_path / "writer_y.csv"
    text = _csv([GOOD, GOOD, GOOD | {"sol2": "குளிரில், இரவில் வை"}])
    path.write_text(text[: text.rindex("இரவில்")], encoding="utf-8")
    records, _, _ = read_writer_file(path, WriterColumns())
    assert [p for r in records for p in r["problems"]] == [
        ("malformed_row", "writer_y.csv:4: a quoted field is not closed at the end of the file (the file looks cut short)")]


def _label(i: int, **kw) -> str:
    return json.dumps({"id": f"s{i}", "text": "물을 끓이는 법", "source": "naver_kin", "physical": 1} | kw,
                      ensure_ascii=False)


def test_seed_labels_read_utf16_bom_and_crlf(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_bytes(("\r\n".join(_label(i) for i in range(3)) + "\r\n\r\n").encode("utf-16"))
    assert [r.id for r in load_labels(path)] == ["s0", "s1", "s2"]


@pytest.mark.parametrize("lines,where,what", [
    ([_label(0), _label(1), _label(0)], ":3:", "labelled twice (first at line 1)"),
    ([_label(0), _label(1)[:25]], ":2:", "not a labelled row"),
    ([_label(0), _label(1, physical=2)], ":2:", "not a labelled row"),
])
def test_seed_label_errors_name_file_and_line(tmp_path, lines, where, what):
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(LabelError) as err:
        load_labels(path)
    assert f"{path}{where}" in str(err.value) and what in str(err.value) and "\n" not in str(err.value)


def test_a_lexicon_with_an_empty_term_or_a_bad_shape_fails_naming_the_file(tmp_path):
    folder = tmp_path / "classify_cultural"
    folder.mkdir()
    good = {"id": "lex", "version": "1", "language": "xx", "categories": {"food": ["김치"]}}
    (folder / "lexicon_xx.yaml").write_text(yaml.safe_dump(good, allow_unicode=True), encoding="utf-16")
    assert load_lexicon("xx", str(tmp_path)).match("김치찌개") == ["김치"]
    (folder / "lexicon_yy.yaml").write_text(yaml.safe_dump(good | {"categories": {"food": ["김치", " "]}}),
                                            encoding="utf-8")
    with pytest.raises(ValueError, match="lexicon_yy.yaml: category 'food' has no terms or an empty term"):
        load_lexicon("yy", str(tmp_path))
    (folder / "lexicon_zz.yaml").write_text("id: lex\ncategories: [", encoding="utf-8")
    with pytest.raises(ValueError, match="lexicon_zz.yaml: not a cultural lexicon"):
        load_lexicon("zz", str(tmp_path))
