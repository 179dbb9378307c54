"""The judge's learning curve over labelling rounds (transforms/judge/rounds.py), on real rows: crawl-filter's
400 bundled `everyday` labels (no round: round 0) and two imported rounds of 20 crawl rows each from the bundled
Japanese crawl, labelled by their source (JCommonsenseQA 1, JSQuAD 0) as the sample's own rule says.

Asserted: the curve's point for round k is exactly what refitting on the labels of rounds <= k alone gives (the
same threshold, out-of-fold and held-out figures), the last is the run's own fit, and the run report's section
shows them; the imported rows include some the recipe's split (`held_out: {fraction: 0.2, seed: 0}`, a hash of
the id) would have held out, and every round is still measured on the bundled file's own held-out rows; a second
run reads the curve's points from the disk cache instead of refitting, and a new round refits only itself; a file
with one round gets no curve and says how to add rounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from transforms.flow.recipe import load_recipe
from transforms.judge import rounds
from transforms.judge.gate import SupervisedPrefilter
from transforms.judge.labels import LabelledRow
from transforms.judge.linear import LinearJudge, train
from transforms.judge.rounds import (
    curve_cache_dir,
    judge_figures,
    judge_section,
    learning_curve,
    round_figures,
)

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
    everyday = [r for r in crawl[:600] if r["source"] == "jcommonsenseqa"]
    wiki = [r for r in crawl[:600] if r["source"] == "jsquad"]
    picked = everyday[:20] + wiki[:20]
    # rows the split's hash holds out are imported too: imported rows train, the held-out set does not move
    assert sum(judge.held_out.holds_out(LabelledRow(id=r["id"], text=r["text"])) for r in picked) >= 4
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


def test_imported_rows_train_and_the_held_out_rows_stay_the_bundled_files(two_rounds) -> None:
    from transforms.judge.linear import checking_rows, training_rows

    judge, labels, _, _ = two_rounds
    config = judge.model_copy(update={"labels": str(labels)})
    bundled = judge.model_copy(update={"labels": str(SAMPLES / "ja_everyday_labels.jsonl")})
    assert [r.id for r in checking_rows(config)] == [r.id for r in checking_rows(bundled)]  # 66, fixed
    assert len(training_rows(config)) == len(training_rows(bundled)) + 40  # every imported row trains
    old = config.model_copy(update={"imported_rows": "split"})  # the split hashing every row, as it was
    moved = len(checking_rows(old)) - len(checking_rows(config))
    assert moved >= 4 and len(training_rows(old)) == len(training_rows(config)) - moved


@pytest.mark.slow  # seven fits of the judge: ~15 s
def test_a_second_run_reads_the_curve_from_the_cache_and_a_new_round_refits_only_itself(
        two_rounds, tmp_path: Path, monkeypatch) -> None:
    import shutil

    judge, labels, _, cache = two_rounds
    config = judge.model_copy(update={"labels": str(labels)})
    shutil.rmtree(curve_cache_dir(cache), ignore_errors=True)  # another test of this module may have filled it
    fits: list[int | None] = []

    def counting_train(*args, up_to_round=None, **kw):
        fits.append(up_to_round)
        return train(*args, up_to_round=up_to_round, **kw)

    monkeypatch.setattr(rounds, "train", counting_train)
    fitted = train(config, cache)
    first = learning_curve(config, fitted, cache)
    assert fits == [0, 1]  # one refit per earlier round
    assert learning_curve(config, fitted, cache) == first and fits == [0, 1]  # the second run: no refit
    grown = tmp_path / "grown.jsonl"  # a third round imported: rounds 0 and 1 have the same rows, so stay cached
    extra = {"id": "extra-1", "text": "朝ごはんに食べるものは何ですか？", "everyday": 1, "round": 3,
             "annotator": "test", "share": "uncertain"}
    grown.write_text(labels.read_text(encoding="utf-8") + json.dumps(extra, ensure_ascii=False) + "\n",
                     encoding="utf-8")
    config = judge.model_copy(update={"labels": str(grown)})
    curve = learning_curve(config, train(config, cache), cache)
    assert fits == [0, 1, 2] and curve[:2] == first[:2] and [p["round"] for p in curve] == [0, 1, 2, 3]
    changed = learning_curve(config.model_copy(update={"C": 2.0}), train(config, cache), cache)
    assert fits == [0, 1, 2, 0, 1, 2] and len(changed) == 4  # another config: its own points
