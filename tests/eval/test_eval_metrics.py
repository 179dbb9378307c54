"""Metrics and answer parsing against hand-computed values on small frames."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from transforms.eval import items as I
from transforms.eval.metrics import (
    accuracy,
    grouped_accuracy,
    random_baseline,
    swap_consistency,
    wilson_interval,
)
from transforms.eval.parse import EMPTY, EXACT, LENIENT, REFUSAL, UNPARSABLE, parse_answer
from transforms.eval.report import markdown, paper_rows, summarize
from transforms.eval.templates import answer_index, prompt_for


# -- Wilson interval ------------------------------------------------------------------------------------
def test_wilson_matches_textbook_values():
    # 8/10: p=.8, z=1.96 -> centre (.8 + .19208)/1.38416, half 1.96*sqrt(.016 + .009604)/1.38416
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4)
    assert hi == pytest.approx(0.9433, abs=1e-4)
    lo, hi = wilson_interval(0, 20)  # never below 0, and not the degenerate [0, 0] of the Wald interval
    assert lo == 0.0 and hi == pytest.approx(3.8415 / (20 + 3.8415), abs=1e-3)


def test_wilson_with_no_observations_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)


# -- accuracy with omitted replies -------------------------------------------------------------------------
def test_accuracy_omits_unanswered_and_counts_them():
    acc = accuracy([True, False, None, True, None], ["exact", "lenient", "refusal", "exact", "empty"])
    assert acc["n"] == 5 and acc["scored"] == 3 and acc["correct"] == 2 and acc["omitted"] == 2
    assert acc["acc"] == pytest.approx(2 / 3)
    assert acc["omitted_by"] == {"refusal": 1, "empty": 1}
    assert (acc["ci_low"], acc["ci_high"]) == pytest.approx(wilson_interval(2, 3))


def test_accuracy_when_every_reply_is_omitted():
    acc = accuracy([None, None], ["refusal", "refusal"])
    assert acc["acc"] is None and acc["scored"] == 0 and acc["omitted"] == 2
    assert (acc["ci_low"], acc["ci_high"]) == (0.0, 1.0)
    assert accuracy([])["acc"] is None


# -- random baselines -------------------------------------------------------------------------------------
def test_random_baseline_from_label_distribution():
    rb = random_baseline([0, 0, 0, 1])
    assert rb["uniform"] == 0.5
    assert rb["empirical"] == pytest.approx(0.75**2 + 0.25**2)  # 0.625
    assert rb["majority"] == 0.75
    assert rb["label_dist"] == {"0": 3, "1": 1}


def test_random_baseline_one_label_and_empty():
    rb = random_baseline([1, 1, 1])
    assert rb["empirical"] == 1.0 and rb["majority"] == 1.0
    empty = random_baseline([])
    assert empty["empirical"] is None and empty["uniform"] == 0.5


# -- swap consistency --------------------------------------------------------------------------------------
def test_swap_consistency_by_hand():
    # item 1: picks slot 0, then slot 1 after the swap -> same solution (consistent)
    # item 2: slot 1 both times -> different solutions (position bias)
    # items 3, 4: one run gave no answer -> left out
    out = swap_consistency([0, 1, 0, None], [1, 1, None, 0])
    assert out["pairs"] == 2 and out["consistent"] == 1 and out["consistency"] == 0.5 and out["omitted"] == 2
    assert out["first_position_rate"] == pytest.approx(3 / 6)
    always_first = swap_consistency([0, 0, 0], [0, 0, 0])
    assert always_first["consistency"] == 0.0 and always_first["first_position_rate"] == 1.0
    assert swap_consistency([None], [None])["consistency"] is None


# -- answer parsing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply,answers,expected", [
    ("A", ["A", "B"], (0, EXACT)),
    ("  b. ", ["A", "B"], (1, EXACT)),
    ("**B**", ["A", "B"], (1, EXACT)),
    ("(A)", ["A", "B"], (0, EXACT)),
    ("B입니다.", ["A", "B"], (1, LENIENT)),
    ("정답: A", ["A", "B"], (0, LENIENT)),
    ("정답은 B", ["A", "B"], (1, LENIENT)),
    ("A와 B 둘 다 가능합니다", ["A", "B"], (None, UNPARSABLE)),
    ("Apple", ["A", "B"], (None, UNPARSABLE)),
    ("1", ["0", "1"], (1, EXACT)),
    ("0.", ["0", "1"], (0, EXACT)),
    ("Ответ: 0", ["0", "1"], (0, LENIENT)),
    ("Правильный ответ — 1, потому что вариант 0 опасен", ["0", "1"], (1, LENIENT)),
    ("10", ["0", "1"], (None, UNPARSABLE)),
    ("The answer is 2", ["1", "2"], (1, LENIENT)),
    ("", ["A", "B"], (None, EMPTY)),
    ("   \n", ["0", "1"], (None, EMPTY)),
    (None, ["0", "1"], (None, EMPTY)),
    ("I'm sorry, but I can't choose between A and B.", ["A", "B"], (None, REFUSAL)),
    ("죄송하지만 답변할 수 없습니다.", ["A", "B"], (None, REFUSAL)),
    ("Извините, я не могу ответить на этот вопрос.", ["0", "1"], (None, REFUSAL)),
    ("Je pense que c'est la deuxième", ["A", "B"], (None, UNPARSABLE)),  # wrong language, no label
])
def test_parse_answer(reply, answers, expected):
    parsed = parse_answer(reply, answers)
    assert (parsed.choice, parsed.status) == expected


def test_parse_aliases_from_the_prompt_files():
    ru = prompt_for("ru")
    answers, aliases = answer_index(ru)
    assert answers == ["0", "1"]
    assert parse_answer("Второй вариант", answers, aliases).choice == 1
    ko = prompt_for("ko")
    answers, aliases = answer_index(ko)
    assert answers == ["A", "B"]
    assert parse_answer("첫 번째 방법이 맞습니다", answers, aliases).choice == 0
    assert prompt_for("ta").id == "eval_generic/en"  # no Tamil prompt: the generic one


def test_prompts_render_strictly_and_carry_provenance():
    rendered = prompt_for("ru").render(goal="Открыть банку", sol1="Нож", sol2="Ложка")
    assert rendered.ref == "eval_ru/ru@1"
    assert rendered.messages[0]["role"] == "system" and "0 или 1" in rendered.messages[0]["content"]
    assert "Открыть банку" in rendered.messages[-1]["content"]
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        prompt_for("ko").render(goal="x", sol1="y")  # sol2 missing


# -- items and grouped accuracy ------------------------------------------------------------------------------
def _items(labels, cultural=None, source=None):
    n = len(labels)
    data = {"id": [f"i{k}" for k in range(n)], "goal": [f"goal {k}" for k in range(n)],
            "sol1": [f"first {k}" for k in range(n)], "sol2": [f"second solution {k}" for k in range(n)],
            "label": labels}
    if cultural is not None:
        data["is_cultural"] = cultural
    if source is not None:
        data["source"] = source
    return I.prepare_items(pa.table(data))


def test_prepare_items_rejects_bad_labels_and_fills_defaults():
    t = _items([0, 1])
    assert t.column("lang").to_pylist() == ["en", "en"] and t.column("is_cultural").null_count == 2
    with pytest.raises(I.ItemError, match="outside"):
        I.prepare_items(pa.table({"goal": ["g"], "sol1": ["a"], "sol2": ["b"], "label": [2]}))
    with pytest.raises(I.ItemError, match="missing"):
        I.prepare_items(pa.table({"goal": ["g"], "sol1": ["a"], "label": [0]}))


def test_swap_and_sample():
    t = _items([0, 1, 1])
    s = I.swap_solutions(t)
    assert s.column("sol1").to_pylist() == t.column("sol2").to_pylist()
    assert s.column("label").to_pylist() == [1, 0, 0]
    a, b = I.sample_items(_items([0] * 50), 10, seed=3), I.sample_items(_items([0] * 50), 10, seed=3)
    assert a.column("id").to_pylist() == b.column("id").to_pylist() and a.num_rows == 10
    assert I.sample_items(t, None).num_rows == 3


def _predictions(items, model, method, variant, preds, statuses):
    labels = items.column("label").to_pylist()
    return pa.table({
        "id": items.column("id"), "label": items.column("label"),
        "is_cultural": items.column("is_cultural"), "source": items.column("source"),
        "model": [model] * len(preds), "method": [method] * len(preds), "variant": [variant] * len(preds),
        "prompt": ["eval_generic/en@1"] * len(preds),
        "pred": pa.array(preds, pa.int8()),
        "correct": [None if p is None else p == y for p, y in zip(preds, labels, strict=True)],
        "status": statuses,
    })


def test_summary_by_subset_and_swap_by_hand():
    items = _items([0, 1, 0, 1], cultural=[True, True, False, False], source=["a", "a", "b", "b"])
    orig = _predictions(items, "m", "generate", "original", [0, 0, 0, None], ["exact", "exact", "lenient", "refusal"])
    swapped_items = I.swap_solutions(items)
    swapped = _predictions(swapped_items, "m", "generate", "swapped", [1, 0, 1, 1], ["exact"] * 4)
    summary = summarize(pa.concat_tables([orig, swapped]), items)
    run = next(r for r in summary["runs"] if r["variant"] == "original")
    # original: items 0 (right), 1 (wrong), 2 (right), 3 refused -> 2/3, one refusal omitted
    assert run["overall"]["acc"] == pytest.approx(2 / 3) and run["overall"]["omitted_by"] == {"refusal": 1}
    cultural = {g["is_cultural"]: g for g in run["by"]["is_cultural"]}
    assert cultural[True]["acc"] == 0.5 and cultural[False]["acc"] == 1.0 and cultural[False]["omitted"] == 1
    # swap: item0 0->1 same solution, item1 0->0 flips, item2 0->1 same, item3 unanswered -> 2/3
    assert summary["swap_consistency"]["m"]["consistency"] == pytest.approx(2 / 3)
    rows = paper_rows(summary)
    top = next(r for r in rows if r["variant"] == "original")
    assert top["refusal"] == 1 and top["cultural_acc"] == 0.5 and top["universal_acc"] == 1.0
    assert top["swap_consistency"] == pytest.approx(2 / 3)
    md = markdown(summary)
    assert "| m | generate | original |" in md and "66.7" in md


def test_grouped_accuracy_all_refused_group():
    items = _items([0, 1], cultural=[True, False])
    preds = _predictions(items, "m", "generate", "original", [None, 1], ["refusal", "exact"])
    groups = {g["is_cultural"]: g for g in grouped_accuracy(preds, ["is_cultural"])}
    assert groups[True]["acc"] is None and groups[True]["omitted"] == 1
    assert groups[False]["acc"] == 1.0
    assert math.isclose(groups[False]["ci_high"], 1.0)
