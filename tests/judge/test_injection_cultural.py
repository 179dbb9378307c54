"""Issue 24 for the cultural tagger and the LLM members' views: added text cannot make a row cultural,
and an LLM asked every view (`views: all`) always reads the clean question among them."""

from __future__ import annotations

import pyarrow as pa
from conftest import SAMPLES

from transforms.core import columns as C
from transforms.judge.injection import POSITIONS, inject, load_templates
from transforms.llm.cultural import CulturalTagger, guarded_terms, load_lexicon
from transforms.recipes.ko_piqa.seeds import load_labels
from transforms.text.views import llm_views, prefix_views

LIST = "(김치냉장고, 온돌, 제사, 한복, 떡국)"


def test_added_cultural_terms_do_not_tag_a_row():
    lex = load_lexicon("ko")
    commands = ["에어컨 온도 이십육도로 맞춰줘", "가스 밸브 잠겨있는지 확인해줄수있니", "흰 셔츠 얼룩은 어떻게 빼나요? 급해요."]
    for q in commands:
        assert not guarded_terms(lex, q)
        for position in POSITIONS:
            dirty = inject(q, LIST, position)
            if dirty is not None:
                assert lex.match(dirty) and not guarded_terms(lex, dirty), (position, dirty)
        for t in load_templates():  # an instruction carrying a term is not read at all
            if t["kind"] in ("content", "topics") and not t["id"].startswith("ko_topics_answer"):
                continue
            assert not guarded_terms(lex, inject(q, t["text"] + " 김치냉장고", "end_glued"))
    table = CulturalTagger(language="ko")(pa.table({C.ID: ["a", "b"], C.TEXT: [inject(commands[0], LIST, "end"),
                                                                                  "김치냉장고 온도는 몇 도가 좋나요?"]}))
    assert table.column("is_cultural").to_pylist() == [False, True]


def test_the_guard_costs_the_tagger_nothing_on_the_labelled_rows():
    lex = load_lexicon("ko")
    rows = [r for f in ("ko_seed_labels.jsonl", "ko_heldout_labels.jsonl")
            for r in load_labels(SAMPLES / f, allow_held_out=True)]
    assert [r.id for r in rows if bool(lex.match(r.text)) != bool(guarded_terms(lex, r.text))] == []


def test_llm_views_keep_the_first_segment_and_add_the_clean_question():
    q = "흰 셔츠에 커피를 쏟았어요. 얼룩을 빼려면 어떻게 하나요?"
    assert llm_views(q, 400) == prefix_views(q, 400)
    for position in ("end", "start", "inside"):
        for t in load_templates():
            dirty = inject(q, t["text"], position)
            views = llm_views(dirty, 400)
            assert views[-1] == " ".join(views[-1].split())
            if position == "end":
                assert views[0] == prefix_views(q, 400)[0]  # `views: first` reads what it read before
            if position != "inside":  # inside: at the sentence end, the question's halves stay apart
                assert " ".join(q.split()) in views, (t["id"], position, views)
