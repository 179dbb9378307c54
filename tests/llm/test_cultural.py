"""Cultural tagging on real Naver KiN questions, and the general + cultural annotation sample."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from test_ensemble import RuleEngine

from transforms.core import columns as C
from transforms.judge.ensemble import Classifier
from transforms.llm.cultural import CulturalTagger, load_lexicon
from transforms.llm.sampling import SampleGeneralAndCultural
from transforms.text.guard import injection_flags


@pytest.fixture(scope="module")
def kin(shared_data) -> pa.Table:
    path = shared_data / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl"
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    return pa.table({C.ID: [r["url"] for r in rows], C.TEXT: [r["question"] for r in rows]})


@pytest.fixture(scope="module")
def tagged(kin) -> pa.Table:
    return CulturalTagger()(kin)


def test_lexicon_is_data_of_a_useful_size():
    lexicon = load_lexicon("ko")
    terms = {t for ts in lexicon.categories.values() for t in ts}
    assert 60 <= len(terms) <= 150
    assert {"김치", "김치냉장고", "온돌", "한복", "막걸리", "된장", "간장", "고추장", "김장", "떡", "보일러", "연탄",
            "찜질방", "소주", "뚝배기", "돌솥"} <= terms
    assert lexicon.ref == "cultural_lexicon/ko@1"


def test_lexicon_hits_on_real_kin_questions(kin, tagged):
    texts = kin.column(C.TEXT).to_pylist()
    flags = tagged.column("is_cultural").to_pylist()
    terms = tagged.column("cultural_terms").to_pylist()
    hits = [(t, m) for t, f, m in zip(texts, flags, terms, strict=True) if f]
    # 1,081 mixed questions; a handful are about Korean food, housing and customs.
    assert 8 <= len(hits) <= 80, len(hits)
    assert all(all(term in text for term in found) for text, found in hits)
    found = {term for _, m in hits for term in m}
    assert {"된장", "보일러", "제사"} <= found, found
    # "어떡하죠/어떡해요" (what should I do) contains 떡 and appears dozens of times; it must not count.
    how_do_i = [m for t, m in zip(texts, terms, strict=True) if "어떡" in t]
    assert len(how_do_i) >= 10 and not any("떡" in m for m in how_do_i)
    assert all(s == "lexicon" for s in tagged.column("cultural_source").to_pylist() if s is not None)
    assert tagged.column("cultural_llm_score").null_count == tagged.num_rows


@pytest.mark.parametrize(("text", "expected"), [
    ("김치냉장고에 김치를 오래 두면 시어지나요", ["김치냉장고", "김치"]),
    ("호떡 반죽이 너무 질어요", ["호떡"]),
    ("떡잎이 노랗게 변했는데 어떡하죠", []),
    ("발표 소주제 정하는 법", []),
    ("평상시에 보일러를 외출로 두면", ["보일러"]),
    ("친구들이랑 놀다가 성장판 검사", []),
])
def test_false_friends_are_excluded(text, expected):
    assert load_lexicon("ko").match(text) == expected


def test_llm_tag_asks_only_rows_the_lexicon_missed(kin, tmp_path):
    table = kin.slice(0, 60)
    engine = RuleEngine(["택배", "라면"])
    llm = Classifier(name="cult", prompt="classify_cultural/ko")
    out = CulturalTagger(llm=llm, cache_dir=str(tmp_path)).use_engine(engine)(table)
    lexicon_hits = sum(bool(load_lexicon("ko").match(t)) for t in table.column(C.TEXT).to_pylist())
    # rows whose text reads as talk to its reader (ASCII-art padding here) are not asked (issue 24)
    flagged = sum(bool(injection_flags(t)) and not load_lexicon("ko").match(t) for t in table.column(C.TEXT).to_pylist())
    assert flagged == 2 and len(engine.rows_asked) == 60 - lexicon_hits - flagged
    sources = out.column("cultural_source").to_pylist()
    for text, src, score in zip(table.column(C.TEXT).to_pylist(), sources,
                                out.column("cultural_llm_score").to_pylist(), strict=True):
        if src == "llm":
            assert any(w in text for w in ("택배", "라면")) and score > 0.5
    assert "classify_cultural/ko@1" in out.column("cultural_tagger")[0].as_py()


# -- the annotation sample ----------------------------------------------------------------------------
def test_sample_counts_are_exact_and_nothing_is_lost(tagged):
    n_cultural = sum(tagged.column("is_cultural").to_pylist())
    stage = SampleGeneralAndCultural(n_general=100, n_cultural=5, seed=11)
    out = stage(tagged)
    assert out.num_rows == tagged.num_rows
    groups = out.column("sample_group").to_pylist()
    assert groups.count("general") == 100 and groups.count("cultural") == 5
    reasons = out.column(C.DROP_REASON).to_pylist()
    assert reasons.count("not_sampled") == tagged.num_rows - 105
    assert all((g is None) == (r == "not_sampled") for g, r in zip(groups, reasons, strict=True))
    # Cultural draws come only from tagged rows.
    assert all(c for g, c in zip(groups, out.column("is_cultural").to_pylist(), strict=True) if g == "cultural")
    assert stage.report["cultural"] == {"available": n_cultural, "wanted": 5, "drawn": 5, "shortfall": 0}


def test_sample_is_deterministic_and_order_free(tagged):
    stage = SampleGeneralAndCultural(n_general=100, n_cultural=5, seed=11)
    ids = tagged.column(C.ID).to_pylist()
    first = {i for i, g in zip(ids, stage(tagged).column("sample_group").to_pylist(), strict=True) if g}
    order = list(range(tagged.num_rows))
    random.Random(3).shuffle(order)
    shuffled = tagged.take(pa.array(order))
    second = {i for i, g in zip(shuffled.column(C.ID).to_pylist(),
                                stage(shuffled).column("sample_group").to_pylist(), strict=True) if g}
    assert first == second
    other = SampleGeneralAndCultural(n_general=100, n_cultural=5, seed=12)(tagged)
    third = {i for i, g in zip(ids, other.column("sample_group").to_pylist(), strict=True) if g}
    assert first != third


def test_short_group_is_taken_whole_and_reported(tagged, tmp_path):
    n_cultural = sum(tagged.column("is_cultural").to_pylist())
    stage = SampleGeneralAndCultural(n_general=600, n_cultural=158, seed=0, output_dir=str(tmp_path))
    out = stage(tagged)
    assert out.column("sample_group").to_pylist().count("cultural") == n_cultural
    report = json.loads((tmp_path / "sampling.json").read_text())
    assert report["cultural"]["shortfall"] == 158 - n_cultural
    assert report["general"]["drawn"] == 600
