"""Labels under any name a recipe declares, label files with their sources, and held-out splits of every kind.

A recipe that names `judge.label: everyday` reads seeds labelled `everyday`; a file whose rows lack the
column is refused by the recipe check (file, line, the missing column, the columns the row has) before
anything runs; a fraction, column or pattern split sets its rows aside, the KiN parity split refuses them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transforms.judge.labels import (
    ColumnSplit,
    FractionSplit,
    LabelError,
    ParitySplit,
    PatternSplit,
    held_out_labels,
    labels_file_problems,
    load_labels,
)
from transforms.judge.linear import LinearJudge, checking_rows, training_rows

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def rows(n: int, label: str = "everyday", **extra: object) -> list[dict]:
    return [{"id": f"r{i}", "text": f"洗濯機の使い方 {i}", label: i % 2, "url": f"https://x.jp/q/{i}", **extra}
            for i in range(n)]


def test_any_label_name_is_read_and_a_missing_one_names_file_line_and_columns(tmp_path: Path) -> None:
    path = write(tmp_path / "seeds.jsonl", rows(4))
    got = load_labels(path, label="everyday")
    assert [r.value("everyday") for r in got] == [0, 1, 0, 1]
    with pytest.raises(LabelError) as err:
        load_labels(path, label="physical")
    assert f"{path}:1:" in str(err.value) and "'physical'" in str(err.value)
    assert "its columns: id, text, everyday, url" in str(err.value)


def test_a_label_must_be_zero_or_one(tmp_path: Path) -> None:
    path = write(tmp_path / "seeds.jsonl", rows(2) + [{"id": "x", "text": "t", "everyday": 2}])
    with pytest.raises(LabelError, match=r":3: .*'everyday' is 2, must be 0 or 1"):
        load_labels(path, label="everyday")


def test_label_files_with_their_sources_and_negative_sources(tmp_path: Path) -> None:
    seeds = write(tmp_path / "seeds.jsonl", rows(12))
    negatives = write(tmp_path / "chat.jsonl", [{"id": f"c{i}", "text": "こんにちは", "everyday": 0} for i in range(5)])
    judge = LinearJudge(labels=seeds, label="everyday", negative_sources=["chitchat"],
                        extra_labels=[{"path": negatives, "source": "chitchat"}])
    got = training_rows(judge)
    assert {r.source for r in got if not r.value("everyday")} == {"chitchat"}
    assert sum(r.value("everyday") for r in got) == 6 and len(got) == 11
    assert judge.labels_path == seeds


def test_fraction_split_is_fixed_by_seed_and_id_and_sets_rows_aside(tmp_path: Path) -> None:
    path = write(tmp_path / "seeds.jsonl", rows(400))
    split = FractionSplit(fraction=0.25, seed=3)
    train = load_labels(path, held_out=split, label="everyday")
    held = held_out_labels(path, split, label="everyday")
    assert len(train) + len(held) == 400 and 70 <= len(held) <= 130
    assert not {r.id for r in train} & {r.id for r in held}
    reversed_file = write(tmp_path / "reversed.jsonl", rows(400)[::-1])
    assert {r.id for r in held_out_labels(reversed_file, split, label="everyday")} == {r.id for r in held}
    assert {r.id for r in held_out_labels(path, FractionSplit(fraction=0.25, seed=4), label="everyday")} != \
        {r.id for r in held}


def test_column_and_pattern_splits(tmp_path: Path) -> None:
    data = rows(6)
    for r in data[:2]:
        r["split"] = "test"
    path = write(tmp_path / "seeds.jsonl", data)
    assert [r.id for r in held_out_labels(path, ColumnSplit(column="split", values=["test"]), label="everyday")] \
        == ["r0", "r1"]
    assert [r.id for r in held_out_labels(path, PatternSplit(pattern=r"/q/[45]$"), label="everyday")] == ["r4", "r5"]


def test_the_judge_reads_each_split_kind_from_its_keys(tmp_path: Path) -> None:
    seeds = write(tmp_path / "seeds.jsonl", rows(40))
    kinds = {"fraction": {"fraction": 0.2}, "column": {"column": "split"}, "pattern": {"pattern": "x"},
             "parity": {"url_id": r"q/(\d+)", "held_out": "odd"}}
    got = {k: type(LinearJudge(labels=seeds, label="everyday", held_out=v).held_out) for k, v in kinds.items()}
    assert got == {"fraction": FractionSplit, "column": ColumnSplit, "pattern": PatternSplit, "parity": ParitySplit}
    judge = LinearJudge(labels=seeds, label="everyday", held_out={"fraction": 0.2})
    assert len(training_rows(judge)) + len(checking_rows(judge)) == 40
    # the parity split refuses a training file holding its held-out rows (Ko-PIQA keeps them in a file of their own)
    with pytest.raises(LabelError, match="held-out set"):
        training_rows(LinearJudge(labels=seeds, label="everyday", held_out=kinds["parity"]))


def test_labels_file_problems_read_the_raw_judge_config(tmp_path: Path) -> None:
    seeds = write(tmp_path / "seeds.jsonl", rows(3, label="physical"))
    assert labels_file_problems({"labels": seeds, "label": "physical"}) == []
    (key, problem), = labels_file_problems({"labels": seeds, "label": "everyday"})
    assert key == "labels" and f"{seeds}:1:" in problem and "'everyday'" in problem and "physical" in problem
    missing = labels_file_problems({"labels": seeds, "label": "physical", "extra_labels": [str(tmp_path / "no.jsonl")]})
    assert missing[0][0] == "extra_labels.0" and "does not exist" in missing[0][1]


def test_the_recipe_check_refuses_a_labels_file_without_the_label_before_anything_runs() -> None:
    from transforms.flow.recipe import RecipeError, load_recipe

    with pytest.raises(RecipeError) as err:
        load_recipe("ko-piqa", {"runs.crawl.stages.supervised_prefilter.judge.label": "everyday"})
    text = str(err.value)
    assert "runs.crawl.stages.supervised_prefilter.judge.labels" in text and "ko_seed_labels.jsonl:1:" in text
    assert "'everyday'" in text and "physical" in text
    # a stage the params switch off is not checked
    load_recipe("ko-piqa", {"runs.crawl.stages.supervised_prefilter.judge.label": "everyday", "prefilter": "distilled"})


def test_wilson_intervals_are_wide_with_few_labels_and_stay_in_range() -> None:
    from transforms.judge.metrics import verdict_metrics, wilson

    low, high = wilson(9, 10)
    assert 0.55 < low < 0.6 and 0.98 < high < 0.99
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0 and wilson(0, 0) is None
    narrow = wilson(900, 1000)
    assert narrow[1] - narrow[0] < 0.04
    got = verdict_metrics([True, True, False, False], [True, False, True, False])
    assert got["recall_interval"] == wilson(1, 2) and got["precision_interval"] == wilson(1, 2)


def test_min_labels_refuses_training_and_says_how_many_more(tmp_path: Path) -> None:
    from transforms.judge.linear import train

    seeds = write(tmp_path / "seeds.jsonl", rows(30))
    with pytest.raises(LabelError, match="label 20 more rows"):
        train(LinearJudge(labels=seeds, label="everyday", min_labels=50))
    (key, problem), = labels_file_problems({"labels": seeds, "label": "everyday", "min_labels": 40,
                                            "held_out": {"fraction": 0.5, "seed": 1}})
    assert key == "min_labels" and "more rows" in problem


def test_min_labels_counts_imported_rows_the_split_would_have_held_out(tmp_path: Path) -> None:
    """Imported rows (`round` > 0) always train (`imported_rows: train`): the check before a run counts them, as the
    fit does; with `imported_rows: split` the split applies to them and the count falls."""
    from transforms.judge.labels import LabelledRow, read_rows

    base = ROOT / "lake" / "samples" / "ja_everyday_labels.jsonl"
    lines = base.read_text(encoding="utf-8").splitlines()
    split = FractionSplit(fraction=0.2, seed=0)
    extra = [json.loads(x) | {"id": f"imported-{i}", "round": 1} for i, x in enumerate(lines[:60])]
    picked = [r for _, r in read_rows(str(write(tmp_path / "extra.jsonl", extra)), "everyday")]
    would = sum(split.holds_out(r) for r in picked if isinstance(r, LabelledRow))
    assert would > 0  # the rows below include some the split would hold out
    labels = write(tmp_path / "labels.jsonl", [json.loads(x) for x in lines] + extra)
    kept = sum(not split.holds_out(r) for _, r in read_rows(str(base), "everyday"))
    judge = {"labels": labels, "label": "everyday", "held_out": {"fraction": 0.2, "seed": 0},
             "min_labels": kept + len(extra)}
    assert labels_file_problems(judge) == []
    (key, problem), = labels_file_problems(judge | {"imported_rows": "split"})
    assert key == "min_labels" and f"hold {kept + len(extra) - would} rows to train on" in problem
