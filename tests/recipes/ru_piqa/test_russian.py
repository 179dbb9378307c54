"""Russian PIQA checks: minimal contrast (≤ 2 words or a swap of two phrases) with sentences written
for these tests and PARus (Russian SuperGLUE), the 25-word share and repeated openings."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from transforms.recipes.ru_piqa.contrast import (
    IDENTICAL_SOLUTIONS,
    INVALID_LABEL,
    NOT_MINIMAL,
    RussianContrastFilter,
    item_words,
    length_share,
    minimal_contrast,
    phrase_swap,
    repeated_openings,
    stem,
)


@pytest.fixture(scope="module")
def parus(shared_data) -> list[dict]:
    path = shared_data / "ru_russiansuperglue_humanbench" / "parus_unique_items.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


MINIMAL = [  # (sol1, sol2, contrast kind)
    ("Чтобы быстро остудить чай, поставьте кружку в миску с холодной водой.",
     "Чтобы быстро остудить чай, поставьте кружку в миску с горячей водой.", "word_substitution"),
    ("Налейте воду в кастрюлю и поставьте её на плиту.",
     "Налейте кастрюлю в воду и поставьте её на плиту.", "word_swap"),
    ("Поставьте горячую сковороду на деревянную доску.",
     "Поставьте деревянную доску на горячую сковороду.", "phrase_reorder"),
    ("Накройте глубокую кастрюлю плоской крышкой, чтобы вода закипела быстрее.",
     "Накройте плоскую крышку глубокой кастрюлей, чтобы вода закипела быстрее.", "phrase_reorder"),
    ("Протрите экран телефона сухой мягкой тряпкой.",
     "Протрите экран телефона мягкой тряпкой.", "word_added_removed"),
    ("Сложите ёлочные игрушки в коробку и уберите её на антресоли.",
     "Сложите ёлочные игрушки в мокрую коробку и уберите на антресоли.", "other"),  # +1 word, −1 word: minimal
]


@pytest.mark.parametrize(("a", "b", "kind"), MINIMAL)
def test_minimal_pairs_and_their_contrast_kind(a, b, kind):
    found_kind, _, _, minimal = minimal_contrast(a, b)
    assert (found_kind, minimal) == (kind, True)


def test_a_swap_with_adapted_endings_is_recorded_as_such():
    kind, distance, detail, minimal = minimal_contrast(*MINIMAL[3][:2])
    assert minimal and distance == 4 and detail == "глубокую кастрюлю ⇄ плоской крышкой (forms adapted)"
    assert stem("крышку") == stem("крышкой") == "крышк" and stem("лёд") == "лед"
    assert phrase_swap(["a", "b", "c", "d"], ["a", "d", "c", "b"]) == ("b", "d")
    assert phrase_swap(["a", "b", "c", "d"], ["a", "b", "d", "c"]) == ("c", "d")
    assert phrase_swap(["a", "b", "c", "d"], ["a", "c", "b", "e"]) is None


NOT_MINIMAL_PAIRS = [
    ("Чтобы разморозить курицу, переложите её из морозилки в холодильник на ночь.",
     "Чтобы разморозить курицу, залейте её кипятком и оставьте на столе до вечера."),
    ("Кончился бензин.", "Водитель заснул."),  # two edits, but nothing in common
    ("Смажьте петли двери машинным маслом.", "Смажьте петли двери машинным маслом."),
]


def test_pairs_that_are_not_minimal():
    assert minimal_contrast(*NOT_MINIMAL_PAIRS[0])[3] is False
    assert minimal_contrast(*NOT_MINIMAL_PAIRS[1])[3] is False
    assert minimal_contrast(*NOT_MINIMAL_PAIRS[2])[:2] == ("identical", 0)


def test_filter_drops_with_one_reason_each_and_records_the_contrast():
    rows = [MINIMAL[0][:2], MINIMAL[2][:2], NOT_MINIMAL_PAIRS[0], NOT_MINIMAL_PAIRS[2], MINIMAL[1][:2]]
    table = pa.table({"id": [str(i) for i in range(5)], "goal": ["Цель."] * 5,
                      "sol1": [a for a, _ in rows], "sol2": [b for _, b in rows],
                      "label": pa.array([0, 1, 0, 1, 2], pa.int64())})
    out = RussianContrastFilter()(table)
    assert out.column("drop_reason").to_pylist() == [None, None, NOT_MINIMAL, IDENTICAL_SOLUTIONS, INVALID_LABEL]
    assert out.column("contrast_type").to_pylist()[:2] == ["word_substitution", "phrase_reorder"]
    assert out.column("contrast_distance").to_pylist()[0] == 1


def test_parus_is_not_a_set_of_minimal_pairs(parus):
    """PARus's choices are different events; only short ones fit the ≤ 2-word rule (measured 118/499)."""
    minimal = [minimal_contrast(r["choice1"], r["choice2"])[3] for r in parus]
    assert len(parus) == 499
    assert 0.15 < sum(minimal) / len(minimal) < 0.35
    long_enough = [m for r, m in zip(parus, minimal, strict=True)
                   if min(len(r["choice1"].split()), len(r["choice2"].split())) >= 5]
    assert sum(long_enough) / max(len(long_enough), 1) < 0.5


def test_length_share_counts_like_the_release_gate(parus):
    assert item_words("Как быстро остудить чай?", "Поставить кружку в миску.", "Поставить кружку.") == 4 + 2
    table = pa.table({"goal": [r["premise"] for r in parus], "sol1": [r["choice1"] for r in parus],
                      "sol2": [r["choice2"] for r in parus]})
    report = length_share(table)
    assert report["items"] == 499 and report["over"] == 0 and report["median_words"] == 8  # COPA is short
    long_goal = ("Вы хотите, чтобы вода в походном котелке закипела как можно быстрее, а дров у костра осталось "
                 "совсем немного и ветер сильный, что лучше сделать?")
    mixed = pa.table({"goal": [long_goal, "Как остудить чай?"],
                      "sol1": ["Накрыть котелок крышкой.", "Подуть."], "sol2": ["Снять крышку с котелка.", "Ждать."]})
    assert length_share(mixed) | {"median_words": None} == {"items": 2, "min_words": 25, "over": 1, "share_over": 0.5,
                                                            "median_words": None}


def test_repeated_openings_overall_and_per_model(parus):
    table = pa.table({"goal": [r["premise"] for r in parus]})
    report = repeated_openings(table)["all"]
    assert report["items"] == 499 and report["top"][0] == {"opening": "я", "items": 83}
    generated = pa.table({"goal": ["Как быстро остудить чай?", "Как быстро высушить обувь?", "Чем отмыть жир?",
                                   "Как сохранить хлеб свежим?"],
                          "model": ["a", "a", "a", "b"]})
    per_model = repeated_openings(generated, by="model")
    assert per_model["a"] == {"items": 3, "distinct_openings": 2, "share_repeated": 0.6667,
                              "top": [{"opening": "как", "items": 2}]}
    assert per_model["b"]["share_repeated"] == 0.0
