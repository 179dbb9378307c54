"""The distilled prefilter: threshold selection, recall on fresh rows, degenerate samples, the stage.

Training data here is Korean 3i4k questions (never the Naver KiN questions, which are kept for
measuring). The teacher is a visible rule ("how do I / a way to" questions), so the tests check
the distillation machinery, not a model's taste.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_ensemble import RuleEngine

from transforms.core import columns as C
from transforms.embed import EmbedderConfig, build_embedder
from transforms.embed.base import Embedder
from transforms.judge.ensemble import Classifier, EnsembleClassify
from transforms.judge.prefilter import (
    DegenerateSampleError,
    DistilledPrefilter,
    fit_prefilter,
    recall_and_pass_rate,
    sample_indices,
    threshold_for_recall,
)

HOW_TO = re.compile(r"어떻게|방법")


@pytest.fixture(scope="module")
def questions(shared_data) -> tuple[list[str], np.ndarray]:
    """500 real 3i4k questions, 150 of them how-to questions, in a fixed shuffled order."""
    rows = [line.split("\t", 1)[1].strip() for line in (shared_data / "ko_3i4k" / "fci.txt").open(encoding="utf-8")
            if line.startswith("2\t")]
    rows = sorted(set(rows))
    pos = [t for t in rows if HOW_TO.search(t)][:150]
    neg = [t for t in rows if not HOW_TO.search(t)][::37][:350]
    texts = pos + neg
    order = np.random.default_rng(7).permutation(len(texts))
    texts = [texts[i] for i in order]
    return texts, np.array([bool(HOW_TO.search(t)) for t in texts])


@pytest.fixture(scope="module")
def embeddings(questions) -> np.ndarray:
    return build_embedder().encode(questions[0])


def test_threshold_is_the_highest_meeting_the_target():
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    labels = np.array([1, 0, 1, 1, 0, 1, 0, 1, 0, 0], dtype=bool)  # 5 positives
    t = threshold_for_recall(scores, labels, 0.8)  # need 4 of 5 → the 4th positive's score
    assert t == 0.4
    assert recall_and_pass_rate(scores, labels, t) == (0.8, 0.6)
    assert threshold_for_recall(scores, labels, 1.0) == 0.2
    assert threshold_for_recall(scores, labels, 0.2) == 0.9


@pytest.mark.floats
def test_fitted_threshold_reaches_target_recall_on_fresh_rows(questions, embeddings):
    texts, labels = questions
    fit_part, fresh = slice(0, 300), slice(300, 500)
    fitted, report = fit_prefilter(embeddings[fit_part], labels[fit_part], target_recall=0.9, holdout_fraction=0.4,
                                   seed=0, min_per_class=4, embedder=EmbedderConfig(), embed_chars=256,
                                   on_degenerate="error")
    assert report["holdout_recall"] >= 0.9
    assert report["holdout_positives"] == round(labels[fit_part].sum() * 0.4)
    assert 0.5 < report["holdout_auc"] <= 1.0
    # On 200 rows the model never saw, recall stays near the target and most negatives are cut.
    recall, pass_rate = recall_and_pass_rate(fitted.scores(embeddings[fresh]), labels[fresh], fitted.threshold)
    assert recall >= 0.8, recall
    assert pass_rate < 0.85, pass_rate
    # A stricter target can only lower the threshold.
    stricter, _ = fit_prefilter(embeddings[fit_part], labels[fit_part], target_recall=1.0, holdout_fraction=0.4,
                                seed=0, min_per_class=4, embedder=EmbedderConfig(), embed_chars=256,
                                on_degenerate="error")
    assert stricter.threshold <= fitted.threshold


def test_degenerate_sample_is_an_error_or_passes_everything(embeddings):
    labels = np.zeros(len(embeddings), dtype=bool)
    labels[:2] = True
    kw = dict(target_recall=0.98, holdout_fraction=0.4, seed=0, min_per_class=4, embedder=EmbedderConfig(),
              embed_chars=256)
    with pytest.raises(DegenerateSampleError, match=r"passed 2 and rejected 498 of 500.*sample_size"):
        fit_prefilter(embeddings, labels, on_degenerate="error", **kw)
    fitted, report = fit_prefilter(embeddings, labels, on_degenerate="pass_all", **kw)
    assert report["degenerate"] is True
    assert (fitted.scores(embeddings) >= fitted.threshold).all()


def test_sample_is_deterministic_and_independent_of_row_order():
    ids = [f"row-{i}" for i in range(1000)]
    a = {ids[i] for i in sample_indices(ids, 50, seed=3)}
    b = {ids[::-1][i] for i in sample_indices(ids[::-1], 50, seed=3)}
    c = {ids[i] for i in sample_indices(ids, 50, seed=4)}
    assert a == b and len(a) == 50
    assert len(a & c) < 25


@pytest.mark.floats
def test_stage_distils_the_ensemble_and_filters_every_row(questions, tmp_path):
    texts, labels = questions
    table = pa.table({C.ID: [f"q{i}" for i in range(len(texts))], C.TEXT: texts})
    teacher = EnsembleClassify(classifiers=[Classifier(name="rule")], cache_dir=str(tmp_path / "cache"))
    engine = RuleEngine(["어떻게", "방법"])
    teacher.use_engine("rule", engine)
    stage = DistilledPrefilter(teacher=teacher, sample_size=200, seed=1, target_recall=0.9,
                               output_dir=str(tmp_path / "prefilter"))
    out = stage(table)
    assert out.num_rows == table.num_rows  # marked, not deleted
    assert len(engine.rows_asked) == 200  # the teacher saw only the sample
    assert sum(out.column("prefilter_sampled").to_pylist()) == 200
    kept = np.array([r is None for r in out.column(C.DROP_REASON).to_pylist()])
    assert set(out.column(C.DROP_REASON).to_pylist()) <= {None, "prefilter_rejected"}
    report = json.loads((tmp_path / "prefilter" / "report.json").read_text())
    assert report == json.loads(json.dumps(stage.report))
    assert report["holdout_recall"] >= 0.9
    assert report["rows"] == 500 and report["rows_kept"] == int(kept.sum())
    assert recall_and_pass_rate(kept.astype(float), labels, 1.0)[0] >= 0.8  # recall against the rule, all rows
    # Sampled rows the teacher passed are kept whatever their score.
    known = np.array(out.column("prefilter_known_positive").to_pylist())
    sampled_mask = np.array(out.column("prefilter_sampled").to_pylist())
    assert known.sum() == (labels & sampled_mask).sum() > 0 and kept[known].all()
    model = json.loads((tmp_path / "prefilter" / "model.json").read_text())
    assert len(model["coef"]) == 512 and model["threshold"] == report["threshold"]
    # The ensemble stage reuses the teacher's answers: sampled rows cost no new calls.
    sampled = out.filter(pa.array(out.column("prefilter_sampled").to_pylist()))
    later_engine = RuleEngine(["어떻게", "방법"])
    later = EnsembleClassify(classifiers=[Classifier(name="rule")], cache_dir=str(tmp_path / "cache"))
    later.use_engine("rule", later_engine)(sampled.select([C.ID, C.TEXT]))
    assert later_engine.rows_asked == []


@pytest.mark.floats
def test_budget_cap_limits_the_pass_rate_and_reports_the_recall_cost(questions, tmp_path):
    texts, _ = questions
    table = pa.table({C.ID: [f"q{i}" for i in range(len(texts))], C.TEXT: texts})
    teacher = EnsembleClassify(classifiers=[Classifier(name="rule")])
    teacher.use_engine("rule", RuleEngine(["어떻게", "방법"]))
    stage = DistilledPrefilter(teacher=teacher, sample_size=200, seed=1, target_recall=0.98, max_pass_rate=0.1)
    out = stage(table)
    kept = sum(r is None for r in out.column(C.DROP_REASON).to_pylist())
    rescued = stage.report["teacher_positives_kept_below_threshold"]
    assert kept == 50 + rescued  # 10% of 500, plus sampled rows the teacher passed that scored lower
    report = stage.report
    assert report["budget_capped"] is True
    assert report["threshold"] > report["threshold_for_target_recall"]
    assert report["holdout_recall"] < 0.98 and report["pass_rate"] == kept / 500
    assert report["pass_rate_at_target_recall"] > 0.1


@pytest.mark.floats
def test_a_resumed_prefilter_embeds_only_the_rows_it_has_no_score_for(questions, tmp_path, monkeypatch):
    texts, _ = questions
    table = pa.table({C.ID: [f"q{i}" for i in range(len(texts))], C.TEXT: texts})

    def stage() -> DistilledPrefilter:
        teacher = EnsembleClassify(classifiers=[Classifier(name="rule")], cache_dir=str(tmp_path / "verdicts"))
        teacher.use_engine("rule", RuleEngine(["어떻게", "방법"]))
        return DistilledPrefilter(teacher=teacher, sample_size=200, seed=1, target_recall=0.9,
                                  cache_dir=str(tmp_path / "scores"))

    first = stage()(table)
    [folder] = (tmp_path / "scores").iterdir()
    [chunk] = folder.glob("*.parquet")
    cached = pq.read_table(chunk)
    assert sorted(cached.column("id").to_pylist()) == sorted(table.column(C.ID).to_pylist())
    # the attempt was cut after its first 320 scores had been written
    chunk.unlink()
    pq.write_table(cached.slice(0, 320), folder / chunk.name)

    embedded: list[str] = []
    encode = Embedder.encode

    def spy(self, batch):
        embedded.extend(batch)
        return encode(self, batch)

    monkeypatch.setattr(Embedder, "encode", spy)
    again = stage()(table)
    missing = set(cached.column("id").to_pylist()[320:])
    sample = 200  # the refit embeds its sample again; its teacher answers come from the verdict cache
    assert len(embedded) == sample + len(missing)
    assert set(embedded[sample:]) == {t[:256] for i, t in zip(table.column(C.ID).to_pylist(), texts,
                                                                 strict=True) if i in missing}
    assert len(list(folder.glob("*.parquet"))) == 2  # the missing rows' scores were added
    assert again.column(C.DROP_REASON).equals(first.column(C.DROP_REASON))
    np.testing.assert_allclose(again.column("prefilter_score").to_numpy(), first.column("prefilter_score").to_numpy(),
                               atol=1e-6)


# -- the supervised prefilter (issue 12): budget and threshold logic on a fitted model ------------
def _fitted_on(scores_pos: list[float], scores_neg: list[float]):
    from transforms.judge.linear import FittedLinear, default_embedder

    oof = scores_pos + scores_neg
    labels = [True] * len(scores_pos) + [False] * len(scores_neg)
    return FittedLinear(coef=[1.0], intercept=0.0, threshold=0.6, embedder=default_embedder(), embed_chars=64,
                        cv={"positives": len(scores_pos), "precision": 0.5, "recall": 0.9, "auc": 0.9,
                            "seed_rows": len(oof)},
                        oof_scores=oof, oof_labels=labels)


def test_supervised_prefilter_over_budget_stops_or_caps_and_says_the_recall(tmp_path, capsys):
    from transforms.judge.gate import OverBudgetError, SupervisedPrefilter

    fitted = _fitted_on([0.95, 0.8, 0.7, 0.65, 0.3], [0.2, 0.1])
    scores = np.linspace(0, 1, 101)  # 41 rows at or above 0.6
    ok = SupervisedPrefilter(llm_budget_rows=50, output_dir=str(tmp_path))
    assert ok.decide(fitted, scores) == 0.6
    assert ok.report["rows_kept"] == 41 and not ok.report["budget_capped"]
    assert "passes 41 of 101 rows" in capsys.readouterr().err  # printed before the LLM stage
    assert json.loads((tmp_path / "report.json").read_text())["pass_rate"] == pytest.approx(41 / 101)

    strict = SupervisedPrefilter(llm_budget_rows=10, on_over_budget="error")
    with pytest.raises(OverBudgetError, match=r"passes 41 of 101 rows, more than the LLM budget of 10; within "
                                              r"the budget the recall would be 0\.20"):
        strict.decide(fitted, scores)

    capped = SupervisedPrefilter(llm_budget_rows=10, on_over_budget="cap")
    threshold = capped.decide(fitted, scores)
    assert int((scores >= threshold).sum()) == 10
    assert capped.report["budget_capped"] and capped.report["cv_recall_at_threshold"] == pytest.approx(0.2)


def test_prefilter_mode_picks_the_class():
    from pydantic import TypeAdapter

    from transforms.judge.gate import SupervisedPrefilter
    from transforms.judge.prefilter import Prefilter

    adapter = TypeAdapter(Prefilter)
    assert isinstance(adapter.validate_python({}), SupervisedPrefilter)
    assert isinstance(adapter.validate_python({"mode": "distilled", "sample_size": 50}), DistilledPrefilter)
    # The default YAML holds the supervised settings: switching mode drops the other mode's own fields...
    switched = adapter.validate_python({"mode": "distilled", "judge": {"target_recall": 0.8}, "llm_budget_rows": 5,
                                        "sample_size": 50})
    assert isinstance(switched, DistilledPrefilter) and switched.sample_size == 50
    # ... but a distilled knob on the supervised mode, or a field neither has, is an error.
    for bad in ("sample_size", "sample_sise"):
        with pytest.raises(ValueError, match=bad):
            adapter.validate_python({"mode": "supervised", bad: 50})
