"""Issue 34 §1: the prefilter's optional hashed n-gram first tier (`judge.first_tier`).

The recipe's own prefilter judge (jobs/recipes/ko-piqa.yaml) with the tier switched on, fitted on the bundled
seeds: the cascade keeps the out-of-fold recall the e5 judge has alone, a row the tier cuts is never
embedded and scores 0, and what it costs on the held-out positives and saves on the crawl sample is
measured (embedding only the held-out rows the tier cuts). The figures are why ko-piqa leaves it off
(docs/judges.md): it spares about half the crawl rows and, at equal out-of-fold recall, lost 1 of 24
held-out positives.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT, SAMPLES
from jobutil import ko_piqa_judges

from transforms.judge.linear import LinearJudge, embedder_for, train
from transforms.recipes.ko_piqa.seeds import load_labels
from transforms.text.guard import sanitize

pytestmark = pytest.mark.floats  # every test here depends on native kernels' floats


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    return train(judge_of(), tmp_path_factory.mktemp("emb"))


def judge_of():
    spec = ko_piqa_judges()["prefilter"]["judge"]
    return LinearJudge.model_validate(spec | {"labels": str(ROOT / spec["labels"]),
                                              "first_tier": {"ngram_range": [2, 4], "max_recall_loss": 0.0}})


def _tier_passes(fitted, texts):
    tier = fitted.first_tier
    texts = [sanitize(t) for t in texts]
    return fitted._over_views(tier.scores, texts, tier.threshold) >= tier.threshold


def test_the_cascade_keeps_the_out_of_fold_recall(fitted):
    cv = fitted.cv["first_tier"]
    assert cv["recall_cascade"] >= cv["recall_judge_alone"] - fitted.first_tier.config.max_recall_loss - 1e-9
    assert cv["recall_judge_alone"] == pytest.approx(fitted.cv["recall"])
    assert 0 < cv["negatives_passing_tier"] < 0.8  # the tier does cut seed negatives


def test_what_the_tier_costs_on_held_out_positives_and_spares_on_the_crawl(fitted):
    held = [r for r in load_labels(SAMPLES / "ko_heldout_labels.jsonl", allow_held_out=True) if r.physical]
    assert len(held) >= 20
    through = _tier_passes(fitted, [r.text for r in held])
    cut = [r.text for r, ok in zip(held, through, strict=True) if not ok]
    # what the tier costs is what the e5 judge alone would have kept among them (embedding only those rows)
    alone = fitted.model_copy(update={"first_tier": None})
    lost = int((alone.score_texts(cut, embedder_for(judge_of(), None)) >= fitted.threshold).sum()) if cut else 0
    print(f"held-out positives: {len(held)}, cut by the tier: {len(cut)}, of which the e5 judge keeps: {lost}")
    assert lost <= len(cut) <= 0.1 * len(held)  # measured 2026-11-28: 1 cut, 1 lost (why the recipe leaves it off)
    crawl = [json.loads(x)["text"] for x in (SAMPLES / "ko_crawl_sample.jsonl").read_text("utf-8").splitlines()]
    share = float(_tier_passes(fitted, crawl).mean())
    assert share < 0.6, f"the tier passes {share:.0%} of the crawl sample to the embedder"


def test_a_row_the_tier_cuts_is_not_embedded_and_scores_zero(fitted):
    class Counting:
        def __init__(self):
            self.seen = []

        def encode(self, texts):
            self.seen += list(texts)
            return np.zeros((len(texts), len(fitted.coef)), np.float32)

    texts = ["오늘 날씨 어때?", "라면 물을 빨리 끓이려면 뚜껑을 덮는 게 나을까요, 아니면 열어 두는 게 나을까요?"]
    through = _tier_passes(fitted, texts)
    counter = Counting()
    scores = fitted.score_texts(texts, counter)
    for text, passed, score in zip(texts, through, scores, strict=True):
        if not passed:
            assert score == 0.0 and not any(text[:20] in s for s in counter.seen)
    assert not through.all() or counter.seen
