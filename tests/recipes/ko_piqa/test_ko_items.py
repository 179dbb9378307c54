"""Ko-PIQA items: structural checks on Korean items (label balance: tests/piqa/test_balance.py)."""

from __future__ import annotations

import pyarrow as pa

from transforms.core import columns as C
from transforms.recipes.ko_piqa.items import StructuralChecks, word_edit_distance

# Items written for this test from real KiN-style questions (how to fix salty soup, unclog a drain ...).
ITEMS = [
    ("라면 국물이 너무 짤 때 맛을 맞추려면", "물을 조금 더 붓고 한 번 더 끓인다.", "소금을 조금 더 넣고 한 번 더 끓인다."),
    ("하수구 냄새를 줄이려면", "배수구에 트랩을 달고 뜨거운 물을 붓는다.", "배수구에 트랩을 떼고 뜨거운 물을 붓는다."),
    ("김치찌개의 신맛을 줄이려면", "설탕을 조금 넣어 끓인다.", "식초를 조금 넣어 끓인다."),
    ("겨울에 수도관이 얼지 않게 하려면", "수도꼭지를 조금 열어 물이 흐르게 둔다.", "수도꼭지를 꽉 잠가 물이 멈추게 둔다."),
]


def test_structural_checks_drop_non_items_and_record_the_pair_distance():
    table = pa.table({C.ID: list("abcde"), "goal": [ITEMS[0][0], "", ITEMS[1][0], ITEMS[2][0], ITEMS[3][0]],
                      "sol1": [ITEMS[0][1], "x", ITEMS[1][1], "", ITEMS[3][1]],
                      "sol2": [ITEMS[0][2], "y", ITEMS[1][1], "z", ITEMS[3][2]], "label": [0, 1, 0, 1, 0]})
    out = StructuralChecks(max_word_distance=2)(table)
    assert out.column(C.DROP_REASON).to_pylist() == [None, "empty_goal", "identical_solutions",
                                                     "missing_solution", "not_minimal_pair"]
    # 물을 → 소금을, 붓고 → 넣고: two words apart
    assert out.column("pair_word_distance").to_pylist()[0] == 2 == word_edit_distance(ITEMS[0][1], ITEMS[0][2])
    assert out.column("pair_word_distance").to_pylist()[4] == 3
    assert out.column("goal_chars").to_pylist()[0] == len(ITEMS[0][0])
