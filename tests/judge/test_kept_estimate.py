"""The kept set's precision and recall, estimated from the labels drawn at random (transforms/judge/linear.py
`kept_estimate`, shown by transforms/judge/rounds.py in the run report).

Default tier: the interval is the Wilson one of the random rows the judge keeps, recall comes only from a random
share of the crawl (an audit of kept rows says nothing of the rows dropped), and "labels to halve" does halve the
interval. Slow tier, on crawl-filter's bundled Japanese example and its truth (each row's source): the labelling
loop as `piqaforge label export` / `label import` run it, for 10 seeds; after every round the 95% interval holds
the true precision of the crawl rows the run keeps in at least 9 of the 10 seeds, and the run report (report.json
and its "Judge" section) says it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from transforms.judge.linear import kept_estimate
from transforms.judge.metrics import wilson
from transforms.judge.rounds import judge_section


def _width(bounds: list[float] | None) -> float:
    assert bounds is not None
    return bounds[1] - bounds[0]


def test_the_estimate_is_the_wilson_interval_of_the_random_rows_kept_and_says_what_halves_it() -> None:
    # 60 rows drawn at random: 30 score at least the threshold (24 of them positive), 6 positives score under it
    scores = [0.9] * 24 + [0.8] * 6 + [0.1] * 6 + [0.05] * 24
    labels = [True] * 24 + [False] * 6 + [True] * 6 + [False] * 24
    got = kept_estimate({"random": {"scores": scores, "labels": labels}}, threshold=0.5)
    assert got is not None and got["from"] == "random" and (got["labels"], got["kept_labels"]) == (60, 30)
    assert got["precision"] == 24 / 30 and got["precision_interval"] == wilson(24, 30)
    assert got["recall"] == 24 / 30 and got["recall_interval"] == wilson(24, 30)
    more = got["precision_labels_to_halve"]
    # half the random rows land in the kept set, so `more` labels add more / 2 kept ones: enough, and barely
    assert _width(wilson(round(24 * (30 + more / 2) / 30), round(30 + more / 2))) <= _width(wilson(24, 30)) / 2
    fewer = more - 4
    assert _width(wilson(round(24 * (30 + fewer / 2) / 30), round(30 + fewer / 2))) > _width(wilson(24, 30)) / 2
    # an audit of kept rows: precision only
    audit = kept_estimate({"audit": {"scores": [0.9] * 20, "labels": [True] * 18 + [False] * 2}}, threshold=0.5)
    assert audit is not None and audit["precision"] == 0.9 and "recall" not in audit
    assert kept_estimate({}, threshold=0.5) is None


def test_the_run_report_shows_the_estimate_or_says_how_to_get_one() -> None:
    estimate = kept_estimate({"random": {"scores": [0.9] * 20 + [0.1] * 20, "labels": [True] * 18 + [False] * 22}},
                             threshold=0.5)
    html = judge_section({"label": "everyday", "labels": "l.jsonl", "kept_estimate": estimate})
    assert "The kept set, estimated from 40 labels drawn at random" in html
    assert f"Precision {estimate['precision']:.3f}" in html and f"{estimate['precision_labels_to_halve']} more" in html
    assert "label export RUN --audit N" in judge_section({"label": "everyday", "labels": "l.jsonl"})


@pytest.mark.slow  # 10 seeds x 6 fits of the judge on the bundled example: about a minute
def test_the_interval_holds_the_true_precision_of_the_kept_rows_in_nine_of_ten_seeds(tmp_path: Path) -> None:
    import pyarrow as pa

    import benchmarks.bench_labelling_loop as bench
    from transforms.judge.gate import SupervisedPrefilter
    from transforms.judge.rounds import judge_figures
    from transforms.review.labelling import RANDOM_SHARE

    judge = bench.recipe_judge()
    pool, evaluation = bench.rows_and_split(judge, "ja")
    args = bench.parser().parse_args(["--seed-labels", "40", "--step", "20", "--rounds", "5",
                                      "--cache", str(tmp_path.parent / "cache" / "embeddings")])
    assert (args.random_share, args.random_rows, args.threshold_on) == (RANDOM_SHARE, "train", "representative")
    curves = []
    for seed in range(10):
        work = tmp_path / f"seed{seed}"
        work.mkdir()
        curves.append(bench.run_arm("loop", judge, pool, evaluation, seed, args, work))
    last = [c[-1] for c in curves]
    assert all(p["kept_estimate"]["from"] == "random" for p in last)
    assert {p["kept_estimate"]["labels"] for p in last} == {5 * round(RANDOM_SHARE * 20)}
    for k in range(1, 6):  # at every budget with a random share: the truth is the precision of the rows kept
        at = [c[k] for c in curves]
        assert sum(p["kept_covered"] for p in at) >= 9, (k, [(p["kept_estimate"]["precision_interval"],
                                                               p["kept_true_precision"]) for p in at])

    # the run report of the last seed's labels says the same: its report.json holds the estimate, weighted to the
    # scores of the crawl the run judged
    labels = tmp_path / "seed9" / "loop-9.jsonl"
    stage = SupervisedPrefilter(judge=judge.model_copy(update={"labels": str(labels), "min_labels": None}),
                                embed_cache_dir=args.cache, output_dir=str(tmp_path / "prefilter"))
    fitted = stage.fit()
    scored = stage.score(pa.table({"id": [r["id"] for r in pool], "text": [r["text"] for r in pool]}), fitted)
    stage.decide(fitted, np.array(scored.column("prefilter_score").to_pylist()))
    report = json.loads((tmp_path / "prefilter" / "report.json").read_text(encoding="utf-8"))
    figures = judge_figures(None, None, str(tmp_path / "prefilter"))
    assert figures is not None
    expected = json.loads(json.dumps(last[-1]["kept_estimate"]))
    assert json.loads(json.dumps(figures["kept_estimate"])) == report["kept_estimate"] == expected
    assert "The kept set, estimated from 50 labels drawn at random" in judge_section(figures)
