"""Minimal pairs built by substitution (transforms/piqa/edit_pairs.py), the local profile's direct
generation in j-piqa and ru-piqa: on real Japanese (Tanaka corpus) and Russian (PARus) sentences the
built pair passes the recipe's own checks; replies a small model gets wrong are dropped with a reason."""

from __future__ import annotations

import json
import unicodedata
from collections import Counter

import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.piqa.edit_pairs import MinimalPairFromEdit, substitute


def test_substitute_replaces_the_first_occurrence_and_keeps_capitals():
    assert substitute("ご飯をうちわであおぐ。", "うちわ", "布団") == ("ご飯を布団であおぐ。", None)
    assert substitute("Мокрую тряпку положите на доску.", "мокрую", "сухую") == \
        ("Сухую тряпку положите на доску.", None)  # matched ignoring case, capital kept
    assert substitute("Мокрую тряпку положите на мокрую доску.", "мокрую", "сухую") == \
        ("Мокрую тряпку положите на сухую доску.", None)  # the word as written comes first
    # the model named the lemma, the answer has another case (from the local ru-piqa run)
    assert substitute("Всё дело в интеграции специальностей.", "интеграция", "разработка") == \
        ("Всё дело в разработка специальностей.", None)
    assert substitute("Всё дело в интеграции специальностей.", "интернет", "сеть") == (None, "edit_word_missing")
    assert substitute("靴に新聞紙を詰める。", "紙", "紙") == (None, "edit_no_change")
    assert substitute("靴に新聞紙を詰める。", "タオル", "布") == (None, "edit_word_missing")
    assert substitute("", "a", "b") == (None, "edit_empty") and substitute("x", " ", "b") == (None, "edit_empty")


def test_real_japanese_sentences_become_pairs_the_constraint_filter_accepts(shared_data):
    pytest.importorskip("fugashi", reason="the `lang` extra (fugashi, unidic-lite) is not installed")
    from transforms.piqa.japanese_words import is_full_sentence, morphemes
    from transforms.recipes.j_piqa.stages import JapaneseConstraintFilter

    lines = (shared_data / "parallel_en_ja_small" / "dev.ja").read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines):
        s = "".join(line.split())
        nouns = [m.surface for m in morphemes(s) if m.pos == "名詞" and len(m.surface) >= 2]
        if s.endswith("。") and is_full_sentence(s) and nouns and s.count(nouns[0]) == 1:
            rows.append({"id": f"t{i}", "question": "目的。", "answer": s, "word": nouns[0], "wrong_word": "机"})
        if len(rows) == 40:
            break
    out = MinimalPairFromEdit(goal_column="question")(pa.Table.from_pylist(rows))
    assert out.column(C.DROP_REASON).null_count == len(rows)
    labels = Counter(out.column("label").to_pylist())
    assert set(labels) == {0, 1} and min(labels.values()) >= 10  # the position is drawn, not always first
    for r in out.to_pylist():  # the correct solution is the model's answer, wherever it was put
        correct = r["sol1"] if r["label"] == 0 else r["sol2"]
        assert correct == unicodedata.normalize("NFKC", r["answer"]) and r["correct"] == str(r["label"] + 1)
    checked = JapaneseConstraintFilter()(out)
    reasons = Counter(checked.column(C.DROP_REASON).to_pylist())
    # a new noun can fuse differently with its particle (docs/j_piqa.md: 2 of 103 in the same experiment)
    assert reasons[None] >= 36, reasons
    assert set(checked.column("option_word_distance").to_pylist()) <= {1, 2}


def test_real_russian_sentences_become_word_substitutions(shared_data):
    from transforms.recipes.ru_piqa.contrast import RussianContrastFilter

    path = shared_data / "ru_russiansuperglue_humanbench" / "parus_unique_items.jsonl"
    items = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()][:60]
    rows = []
    for i, it in enumerate(items):
        words = [w.strip(".,!?") for w in it["choice1"].split()]
        long_words = [w for w in words if len(w) >= 5 and it["choice1"].count(w) == 1]
        if long_words:
            rows.append({"id": f"p{i}", "goal": it["premise"], "answer": it["choice1"], "word": long_words[-1],
                         "wrong_word": "кирпич"})
    assert len(rows) >= 30
    out = MinimalPairFromEdit()(pa.Table.from_pylist(rows))
    assert out.column(C.DROP_REASON).null_count == len(rows)
    checked = RussianContrastFilter()(out)
    assert checked.column(C.DROP_REASON).null_count == len(rows)
    assert set(checked.column("contrast_type").to_pylist()) == {"word_substitution"}


def test_model_mistakes_are_dropped_with_their_reason():
    rows = [{"id": "a", "question": "靴を乾かしたい。", "answer": "靴に新聞紙を詰める。", "word": "新聞紙", "wrong_word": "水"},
            {"id": "b", "question": "q", "answer": "靴に新聞紙を詰める。", "word": "タオル", "wrong_word": "布"},
            {"id": "c", "question": "q", "answer": "靴に新聞紙を詰める。", "word": "新聞紙", "wrong_word": "新聞紙"},
            {"id": "d", "question": "q", "answer": None, "word": "x", "wrong_word": "y"}]
    out = MinimalPairFromEdit(goal_column="question")(pa.Table.from_pylist(rows))
    assert out.column(C.DROP_REASON).to_pylist() == [None, "edit_word_missing", "edit_no_change", "edit_empty"]
    assert out.column("goal").to_pylist()[0] == "靴を乾かしたい。"
    assert out.column("label").to_pylist()[1:] == [None, None, None]


def test_copies_of_the_prompts_worked_examples_are_dropped():
    from transforms.piqa.edit_pairs import prompt_examples

    assert len(prompt_examples("j_piqa/direct_item")) == 3 and len(prompt_examples("ru_piqa/grounded_item")) == 1
    rows = [  # the local run's reply that reused the example's 沿って / 逆らって, an exact copy, and a new item
        {"id": "a", "question": "照明の部屋を掃除したい。", "answer": "照明の部屋に沿って掃除機をかける。",
         "word": "沿って", "wrong_word": "逆らって"},
        {"id": "b", "question": "q", "answer": "ご飯をうちわであおぐ。", "word": "ご飯", "wrong_word": "麺"},
        {"id": "c", "question": "q", "answer": "靴に新聞紙を詰める。", "word": "新聞紙", "wrong_word": "水"}]
    out = MinimalPairFromEdit(goal_column="question", examples_from="j_piqa/direct_item")(pa.Table.from_pylist(rows))
    assert out.column(C.DROP_REASON).to_pylist() == ["copies_prompt_example", "copies_prompt_example", None]
