"""The held-out split: generic in transforms/judge/labels.py, Ko-PIQA's KiN split in its recipe's folder.

A labels file's held-out rows are refused for training by a `ParitySplit` (a number in the row's URL, one
parity held out); Ko-PIQA's is KiN's odd docIds, and every linear judge of the ko-piqa recipe carries it, so
no judge it trains can see the held-out set. The old import paths under transforms/judge/ re-export the
moved code for one release.
"""

from __future__ import annotations

import importlib
import json

import pytest
from conftest import ROOT, SAMPLES
from jobutil import ko_piqa_judges

from transforms.flow.recipe import load_recipe
from transforms.judge.labels import LabelError, ParitySplit, load_labels
from transforms.judge.linear import LinearJudge, training_rows
from transforms.recipes.ko_piqa.seeds import KIN_SPLIT, kin_parity


def _rows(tmp_path, urls):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": "t", "url": u, "physical": i % 2}) + "\n"
                            for i, u in enumerate(urls)), encoding="utf-8")
    return path


def test_a_parity_split_refuses_its_held_out_side_and_nothing_else(tmp_path):
    path = _rows(tmp_path, ["https://x.org/a?id=4", "https://x.org/a?id=7", None, "https://x.org/b"])
    split = ParitySplit(url_id=r"id=(\d+)", held_out="even")
    assert [split.parity(u) for u in ("?id=4", "?id=7", None, "b")] == ["even", "odd", None, None]
    with pytest.raises(LabelError, match=r"labels.jsonl:1: r0 has an even id in its URL .* held-out set"):
        load_labels(path, held_out=split)
    with pytest.raises(LabelError, match="r1 has an odd id"):
        load_labels(path, held_out=ParitySplit(url_id=r"id=(\d+)", held_out="odd"))
    assert [r.id for r in load_labels(path)] == ["r0", "r1", "r2", "r3"]  # no split: every row


def test_kin_split_is_the_odd_docids_and_every_ko_piqa_linear_judge_carries_it():
    assert kin_parity("https://kin.naver.com/qna/detail.naver?d1id=8&docId=4421") == "odd"
    assert kin_parity("https://kin.naver.com/qna/detail.naver?docId=4420") == "even"
    assert kin_parity("https://example.org/?docId=") is None and kin_parity(None) is None
    judges = ko_piqa_judges()
    specs = [judges["prefilter"]["judge"]] + [c["judge"] for c in judges["ensemble"]["classifiers"]
                                              if c.get("kind") == "linear"]
    assert len(specs) == 3
    for spec in specs:
        judge = LinearJudge.model_validate(spec | {"labels": str(ROOT / spec["labels"]), "extra_labels": []})
        assert judge.held_out == KIN_SPLIT
        with pytest.raises(LabelError, match="held-out set; it must not be used for training"):
            training_rows(judge.model_copy(update={"extra_labels": [str(SAMPLES / "ko_heldout_labels.jsonl")]}))


def test_judge_does_not_import_a_recipe_and_the_recipe_hook_names_the_recipe_module():
    # transforms/judge/ is generic: Ko-PIQA's split, evaluation, report and defence live in its recipe folder only
    for old in ("seeds", "evaluate", "run_eval", "report", "defence"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"transforms.judge.{old}")
    assert importlib.import_module("transforms.recipes.ko_piqa.defence").ROOT == ROOT
    report = next(r for r in load_recipe("ko-piqa").run("crawl").reports if r.name == "judges")
    module, attr = report.html.split(":")
    assert module.startswith("transforms.recipes.ko_piqa.") and callable(getattr(importlib.import_module(module), attr))
