"""PIQA item readers/writers and the COPA converters, checked against the raw files read independently."""

from __future__ import annotations

import csv
import json
from collections import Counter

import pyarrow as pa
import pytest

from transforms.piqa.formats import (
    read_items,
    read_parus,
    read_piqa,
    read_prompt_solution,
    read_xcopa,
    write_items,
    write_piqa,
    write_prompt_solution,
)
from transforms.piqa.schema import ITEM_SCHEMA, REQUIRED_COLUMNS, conform_items, validate_items


@pytest.fixture(scope="module")
def piqa_valid(shared_data):
    d = shared_data / "piqa_en"
    return read_piqa(d / "valid.jsonl", d / "valid-labels.lst")


def test_read_piqa_matches_raw_files(piqa_valid, shared_data):
    d = shared_data / "piqa_en"
    raw = [json.loads(x) for x in (d / "valid.jsonl").read_text(encoding="utf-8").splitlines()]
    labels = [int(x) for x in (d / "valid-labels.lst").read_text().split()]
    assert piqa_valid.num_rows == len(raw) == len(labels) == 1838
    assert piqa_valid.column("goal").to_pylist() == [r["goal"] for r in raw]
    assert piqa_valid.column("sol2").to_pylist()[17] == raw[17]["sol2"]
    assert piqa_valid.column("label").to_pylist() == labels
    assert piqa_valid.column("orig_line_no").to_pylist()[:3] == [0, 1, 2]
    assert set(piqa_valid.column("lang").to_pylist()) == {"en"}
    assert validate_items(piqa_valid) == []
    # the labelled JSONL variant gives the same labels
    labeled = read_items(d / "valid_labeled.jsonl")
    assert labeled.column("label").to_pylist() == labels
    assert labeled.schema.field("label").type == ITEM_SCHEMA.field("label").type


def test_piqa_round_trip_keeps_the_plain_format(piqa_valid, tmp_path):
    head = piqa_valid.slice(0, 25)
    write_piqa(head, tmp_path / "x.jsonl", tmp_path / "x-labels.lst")
    first = json.loads((tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert list(first) == ["goal", "sol1", "sol2"]
    assert (tmp_path / "x-labels.lst").read_text().split() == [str(x) for x in head.column("label").to_pylist()]
    back = read_items(tmp_path / "x.jsonl")  # finds x-labels.lst by itself
    for col in ("goal", "sol1", "sol2", "label"):
        assert back.column(col).to_pylist() == head.column(col).to_pylist()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_prompt_solution_round_trip_with_glosses(tmp_path, suffix):
    items = conform_items(pa.table({
        "id": ["j1", "j2"], "lang": ["ja", "ja"],
        "goal": ["お茶を入れるには", "窓を拭くには"], "sol1": ["急須に茶葉を入れる。", "新聞紙で拭く。"],
        "sol2": ["急須に砂糖を入れる。", "砂で拭く。"], "label": [0, 0],
        "goal_gloss": ["To make tea", "To wipe a window"], "sol1_gloss": ["put leaves in a teapot", "newspaper"],
        "sol2_gloss": ["put sugar in a teapot", "sand"]}))
    path = tmp_path / f"jpiqa{suffix}"
    write_prompt_solution(items, path)
    text = path.read_text(encoding="utf-8")
    assert "solution0" in text and "prompt_gloss" in text
    back = read_prompt_solution(path)
    for col in ("id", "lang", "goal", "sol1", "sol2", "label", "goal_gloss", "sol2_gloss"):
        assert back.column(col).to_pylist() == items.column(col).to_pylist()
    assert read_items(path).column("goal").to_pylist() == items.column("goal").to_pylist()


def test_prompt_solution_without_lang_is_detected(tmp_path):
    path = tmp_path / "ru.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", "solution0", "solution1", "label"])
        w.writerow(["Как открыть банку с огурцами?", "Постучать ложкой по крышке.", "Положить банку в морозилку.", "0"])
        w.writerow(["Как высушить мокрые ботинки?", "Набить их газетами.", "Набить их мокрым песком.", "0"])
    t = read_prompt_solution(path)
    assert t.column("lang").to_pylist() == ["ru", "ru"]
    assert t.column("label").to_pylist() == [0, 0]


def test_xcopa_ta_conversion(shared_data, tmp_path):
    src = shared_data / "xcopa_ta"
    raw = [json.loads(x) for x in (src / "data_ta_val.ta.jsonl").read_text(encoding="utf-8").splitlines()]
    t = read_xcopa(src, "val")
    assert t.num_rows == 100
    assert t.column("label").to_pylist() == [r["label"] for r in raw]
    assert t.column("sol1").to_pylist() == [r["choice1"] for r in raw]
    goals = t.column("goal").to_pylist()
    for goal, r in zip(goals, raw, strict=True):
        assert goal.startswith(r["premise"].strip())
        assert goal.endswith("காரணம் என்ன?" if r["question"] == "cause" else "நடந்தது?")
    assert set(t.column("lang").to_pylist()) == {"ta"}
    assert validate_items(t) == []
    assert read_xcopa(src, "test").num_rows == 500
    gmt = read_xcopa(src, "val", variant="data-gmt")
    assert set(gmt.column("lang").to_pylist()) == {"en"}
    assert gmt.column("goal").to_pylist()[0] == "The man opened the tap. What happened as a result?"
    # through Parquet and back
    write_items(t, tmp_path / "x.parquet")
    assert read_items(tmp_path / "x.parquet").column("id").to_pylist() == t.column("id").to_pylist()


def test_parus_labels_are_the_annotator_majority(shared_data):
    path = shared_data / "ru_russiansuperglue_humanbench" / "assign_PARus.tsv"
    votes: dict[tuple, list[str]] = {}
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split(";")
        for line in f:
            row = dict(zip(header, line.rstrip("\n").split(";"), strict=False))
            key = (row["INPUT:premise"], row["INPUT:sent1"], row["INPUT:sent2"])
            votes.setdefault(key, []).append(row["OUTPUT:variant"])
    t = read_parus(path.parent)
    assert t.num_rows == len(votes) == 500
    expected = {k: int(Counter(v).most_common(1)[0][0]) for k, v in votes.items()}
    got = {(g.split(". Что")[0] + ".", s1, s2): lab for g, s1, s2, lab in zip(
        t.column("goal").to_pylist(), t.column("sol1").to_pylist(), t.column("sol2").to_pylist(),
        t.column("label").to_pylist(), strict=True)}
    matched = [k for k in expected if k in got]
    assert len(matched) > 450  # premises without a final period are the rest
    assert all(got[k] == expected[k] for k in matched)
    assert Counter(t.column("label_votes").to_pylist()) == Counter(
        f"{Counter(v).most_common(1)[0][1]}/3" for v in votes.values())
    assert validate_items(t) == []


def test_validate_items_names_the_bad_rows():
    t = pa.table({"id": ["a", "b", "b", "d"], "goal": ["g", None, "g3", "  "], "sol1": ["x", "y", "z", "w"],
                  "sol2": ["x2", "y2", "z2", "w2"], "label": [0, 2, 1, -1]})
    problems = validate_items(t)
    text = "\n".join(problems)
    assert "missing required column(s) ['lang']" in text
    assert "2 row(s) with empty 'goal': id='b', id='d'" in text
    assert "2 row(s) with a label outside {0, 1}: id='b', id='d'" in text
    assert "1 row(s) repeat an earlier id: id='b'" in text
    assert validate_items(pa.table({c: pa.array([], pa.string()) for c in REQUIRED_COLUMNS})) == [
        "the table has no rows"]


def test_conform_rejects_unreadable_labels():
    with pytest.raises(ValueError, match="label"):
        conform_items(pa.table({"id": ["a"], "label": ["yes"]}))
    t = conform_items(pa.table({"id": ["a"], "label": ["1"], "is_cultural": ["true"]}))
    assert t.column("label").to_pylist() == [1] and t.column("is_cultural").to_pylist() == [True]
