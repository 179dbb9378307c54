"""The judge's learning curve over labelling rounds (transforms/judge/rounds.py), on real rows: crawl-filter's
400 bundled `everyday` labels (no round: round 0) and two imported rounds of 20 crawl rows each from the bundled
Japanese crawl, labelled by their source (JCommonsenseQA 1, JSQuAD 0) as the sample's own rule says.

Asserted: the curve's point for round k is exactly what refitting on the labels of rounds <= k alone gives (the
same threshold, out-of-fold and held-out figures), the last is the run's own fit, and the run report's section
shows them; a file with one round gets no curve and says how to add rounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from transforms.flow.recipe import load_recipe
from transforms.judge.gate import SupervisedPrefilter
from transforms.judge.labels import LabelledRow
from transforms.judge.linear import LinearJudge, train
from transforms.judge.rounds import judge_figures, judge_section, round_figures

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "lake" / "samples"


def _recipe_judge() -> LinearJudge:
    entry = next(e for e in load_recipe("crawl-filter").runs[0].stages if e.stage == "supervised_prefilter")
    return LinearJudge.model_validate(entry.fields["judge"])


def _lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory) -> tuple[LinearJudge, Path, Path, str]:
    judge = _recipe_judge()
    tmp = tmp_path_factory.mktemp("rounds")
    crawl = [json.loads(x) for x in (SAMPLES / "ja_crawl_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    # crawl rows the recipe's split does not hold out, so the held-out set stays the bundled file's 66 rows
    trainable = [r for r in crawl[:600] if not judge.held_out.holds_out(LabelledRow(id=r["id"], text=r["text"]))]
    everyday = [r for r in trainable if r["source"] == "jcommonsenseqa"]
    wiki = [r for r in trainable if r["source"] == "jsquad"]
    picked = everyday[:20] + wiki[:20]
    imported = [{"id": r["id"], "text": r["text"], "source": r["source"], "url": r["url"],
                 "everyday": int(r["source"] == "jcommonsenseqa"), "annotator": "test",
                 "labelled_at": "2026-11-30T00:00:00+00:00", "round": 1 + i % 2, "batch": f"b{1 + i % 2}"}
                for i, r in enumerate(picked)]
    base = (SAMPLES / "ja_everyday_labels.jsonl").read_text(encoding="utf-8")
    labels = tmp / "labels.jsonl"
    labels.write_text(base + _lines(imported), encoding="utf-8")
    first = tmp / "rounds-0-1.jsonl"
    first.write_text(base + _lines([r for r in imported if r["round"] == 1]), encoding="utf-8")
    return judge, labels, first, str(tmp / "cache")


def test_each_round_of_the_curve_is_the_fit_on_the_labels_up_to_it(two_rounds, tmp_path: Path) -> None:
    judge, labels, first, cache = two_rounds
    stage = SupervisedPrefilter(judge=judge.model_copy(update={"labels": str(labels)}), embed_cache_dir=cache,
                                output_dir=str(tmp_path / "prefilter"))
    fitted = stage.fit()
    curve = fitted.cv["label_rounds"]
    assert [(p["round"], p["labels"]) for p in curve] == [(0, 334), (1, 354), (2, 374)]
    alone = [train(judge, cache), train(judge.model_copy(update={"labels": str(first)}), cache)]
    assert curve[0] == round_figures(0, alone[0].cv)  # the bundled 400 rows alone, as a run on them reports
    assert curve[1] == round_figures(1, alone[1].cv)  # the bundled rows and round 1's
    assert curve[2] == round_figures(2, fitted.cv)  # the run's own fit
    assert {p["held_out_rows"] for p in curve} == {66}  # every round is measured on the same held-out rows
    assert curve[0]["cv_precision"] != curve[2]["cv_precision"] or curve[0]["cv_recall"] != curve[2]["cv_recall"]

    stage.decide(fitted, np.array(fitted.oof_scores))  # writes report.json as a run does
    figures = judge_figures(None, None, str(tmp_path / "prefilter"))
    assert figures is not None and figures["label_rounds"] == json.loads(json.dumps(curve))
    html = judge_section(figures)
    assert "Learning curve" in html and "<svg" in html
    for p in curve:
        assert f"<tr><td>{p['round']}</td><td>{p['labels']}</td><td>{p['cv_precision']:.3f}" in html
        assert f"{p['held_out_recall']:.3f}" in html


def test_one_round_gets_no_curve_and_the_section_says_how_to_add_rounds(two_rounds, tmp_path: Path) -> None:
    judge, _, _, cache = two_rounds
    stage = SupervisedPrefilter(judge=judge, embed_cache_dir=cache, output_dir=str(tmp_path / "prefilter"))
    fitted = stage.fit()
    assert fitted.cv["label_rounds"] == []
    stage.decide(fitted, np.array(fitted.oof_scores))
    html = judge_section(judge_figures(None, None, str(tmp_path / "prefilter")) or {})
    assert "piqaforge label export" in html and "Learning curve" not in html
    assert judge_figures(None, None, str(tmp_path / "nowhere")) is None
