"""Label balance (transforms/piqa/balance.py): the one BalanceLabels of Ko-PIQA items, J-PIQA, Russian PIQA
and PIndicQA. Half of the labels 1 (exactly where the count allows), the fewest swaps, a row-order-free
choice by the seeded id hash, an odd item dropped exactly when no split fits the gate's bounds, and every
text that belongs to a solution moving with it."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pydantic import ValidationError

from transforms.core import columns as C
from transforms.piqa.balance import ODD_REASON, SWAPPED, BalanceLabels


def _items(labels: list[int]) -> pa.Table:
    n = len(labels)
    return pa.table({C.ID: [f"i{k}" for k in range(n)], "sol1": [f"a{k}" for k in range(n)],
                     "sol2": [f"b{k}" for k in range(n)], "label": pa.array(labels, pa.int8())})


def _reasons(out: pa.Table) -> list[str | None]:
    return out.column(C.DROP_REASON).to_pylist() if C.DROP_REASON in out.column_names else [None] * out.num_rows


def _kept(out: pa.Table) -> list[dict]:
    return [r for r, why in zip(out.to_pylist(), _reasons(out), strict=True) if why is None]


@pytest.mark.parametrize("n,ones", [(10, 9), (11, 0), (7, 3), (1, 1), (100, 50), (12, 6), (13, 13), (4, 0)])
def test_balance_swaps_as_few_items_as_needed(n, ones):
    rng = random.Random(n)
    labels = [1] * ones + [0] * (n - ones)
    rng.shuffle(labels)
    out = BalanceLabels()(_items(labels))
    assert out.num_rows == n  # the odd one is marked, not deleted
    kept = _kept(out)
    new = [r["label"] for r in kept]
    if len(kept) % 2 == 0:
        assert sum(new) * 2 == len(kept)  # exactly 50/50
    else:
        assert abs(sum(new) - len(kept) / 2) == 0.5
    before = sum(labels[int(r[C.ID][1:])] for r in kept)
    assert sum(r[SWAPPED] for r in kept) == abs(sum(new) - before)  # only as many swaps as the imbalance needs
    for r in out.to_pylist():  # a swapped item still names its correct solution
        k = int(r[C.ID][1:])
        assert r[SWAPPED] == (r["label"] != labels[k])
        assert (r["sol1"], r["sol2"])[r["label"]] == ("a", "b")[labels[k]] + str(k)
    assert out.schema.field("label").type == pa.int8()


def test_no_swap_when_already_balanced_within_one():
    for labels in ([0, 1] * 6, [1] * 6 + [0] * 5, [1] * 5 + [0] * 6):
        out = BalanceLabels()(_items(labels))
        assert not any(out.column(SWAPPED).to_pylist()) and out.column("label").to_pylist() == labels


@pytest.mark.parametrize("n", [1, 3, 5, 9, 11, 13, 4, 10])
def test_an_odd_count_the_gate_cannot_accept_drops_one_item(n):
    out = BalanceLabels(seed=3)(_items([1] * n))
    reasons = _reasons(out)
    kept = _kept(out)
    assert out.num_rows == n and out.column(C.ID).to_pylist() == [f"i{k}" for k in range(n)]
    if n % 2 and n < 11:  # 4 of 9 = 0.44, 5 of 9 = 0.56: no split inside 0.45-0.55
        assert reasons.count(ODD_REASON) == 1 and sum(r["label"] for r in kept) * 2 == len(kept)
        dropped = out.to_pylist()[reasons.index(ODD_REASON)]
        assert dropped["label"] == 1 and not dropped[SWAPPED] and dropped["sol1"] == "a" + dropped[C.ID][1:]
    else:  # from 11 up an odd count balances (5 of 11 = 0.45)
        assert reasons.count(ODD_REASON) == 0 and abs(sum(r["label"] for r in kept) - n / 2) <= 0.5
    if kept:
        assert 0.45 <= sum(r["label"] for r in kept) / len(kept) <= 0.55  # what every suite's gate asks


def test_the_odd_rule_follows_the_bounds():
    three = _items([0, 0, 0])
    loose = BalanceLabels(min_share=0.3, max_share=0.7)(three)  # 1 of 3 = 0.33 is inside
    assert _reasons(loose) == [None] * 3 and loose.column("label").to_pylist().count(1) == 1
    tight = BalanceLabels(min_share=0.49, max_share=0.51)(_items([0] * 11))  # 5 of 11 = 0.455 is not
    assert _reasons(tight).count(ODD_REASON) == 1
    assert sum(r["label"] for r in _kept(tight)) == 5
    assert _reasons(BalanceLabels()(_items([0] * 11))) == [None] * 11
    with pytest.raises(ValidationError):
        BalanceLabels(min_share=0.6)  # the bounds must hold one half


def test_the_choice_is_by_seeded_id_hash_not_row_order():
    labels = [1] * 8 + [0]
    table = _items(labels)
    out = BalanceLabels(seed=7)(table)
    shuffled = table.take(pa.array(random.Random(1).sample(range(9), 9)))
    again = BalanceLabels(seed=7)(shuffled)

    def outcome(t: pa.Table) -> dict:
        return {r[C.ID]: (r[SWAPPED], r[C.DROP_REASON]) for r in t.to_pylist()}

    assert outcome(out) == outcome(again)
    # the seed, not the position, picks the dropped item and the swapped ones
    dropped = {next(r[C.ID] for r in BalanceLabels(seed=s)(table).to_pylist() if r[C.DROP_REASON]) for s in range(20)}
    assert len(dropped) > 1


def test_every_text_of_a_solution_moves_with_it_and_correct_follows():
    n = 8
    table = pa.table({"id": [f"x{i}" for i in range(n)], "label": pa.array([1] * 7 + [0], pa.int64()),
                      "sol1": [f"a{i}" for i in range(n)], "sol2": [f"b{i}" for i in range(n)],
                      "sol1_gloss": [f"ga{i}" for i in range(n)], "sol2_gloss": [f"gb{i}" for i in range(n)],
                      "option1": [f"oa{i}" for i in range(n)], "option2": [f"ob{i}" for i in range(n)],
                      "en_sol1": [f"ea{i}" for i in range(n)], "en_sol2": [f"eb{i}" for i in range(n)],
                      "translated_sol1": [f"ta{i}" for i in range(n)], "translated_sol2": [f"tb{i}" for i in range(n)],
                      "corrected_sol1": [f"ca{i}" for i in range(n)], "corrected_sol2": [f"cb{i}" for i in range(n)],
                      "correct": ["2"] * 7 + ["1"]})
    out = BalanceLabels()(table)
    labels = out.column("label").to_pylist()
    assert sum(labels) == 4 and sum(out.column(SWAPPED).to_pylist()) == 3
    for i, swapped in enumerate(out.column(SWAPPED).to_pylist()):
        a, b = (f"b{i}", f"a{i}") if swapped else (f"a{i}", f"b{i}")
        row = out.slice(i, 1).to_pylist()[0]
        assert (row["sol1"], row["sol2"]) == (a, b)
        for prefix, one, two in (("g", "sol1_gloss", "sol2_gloss"), ("o", "option1", "option2"),
                                 ("e", "en_sol1", "en_sol2"), ("t", "translated_sol1", "translated_sol2"),
                                 ("c", "corrected_sol1", "corrected_sol2")):
            assert (row[one], row[two]) == (prefix + a, prefix + b)
        # the correct solution's text is unchanged by the swap, and `correct` names its new slot
        assert (a, b)[labels[i]] == (f"a{i}", f"b{i}")[table.column("label")[i].as_py()]
        assert row["correct"] == str(labels[i] + 1)


def test_an_earlier_drop_reason_stands_and_empty_input_passes():
    table = _items([1, 1, 1]).append_column(C.DROP_REASON, pa.array(["too_short", None, None], pa.string()))
    out = BalanceLabels()(table)
    reasons = out.column(C.DROP_REASON).to_pylist()
    assert reasons[0] == "too_short" and reasons.count(ODD_REASON) <= 1
    assert BalanceLabels()(_items([])).num_rows == 0
