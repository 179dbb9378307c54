"""The degenerate-text expectation every release suite runs: one word repeated, or mostly one repeated
n-gram, fails the gate with the offending ids; real items pass.

The Kannada strings are real: Qwen2.5-Coder-1.5B's "translations" of PIndicQA goals into Kannada from the
local pindic run (docs/pindic.md), 100% Kannada script, which the script-based purity check passes.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from expectations.checks import derive
from expectations.gate import run_gate, to_frame
from expectations.suite import load_suite
from transforms.piqa.degenerate import DegenerateText, degenerate_reason, degenerate_rows, worst_repetition
from transforms.piqa.schema import RECIPES

QWEN_KANNADA = [
    "ಒಂದು ಮುಂದಿಯಾಂದು ಪ್ರಾಣಿಯಾಂದು ಮಾಣ್ಯಾಂದು ಪ್ರಾಣಿಯಾಂದು ಪ್ರಾಣಿಯಾಂದು ಪ್ರಾಣಿಯಾಂದು ಪ್ರಾಣಿಯಾಂದು ಪ್ರಾಣಿಯಾಂದು "
    "ಪ್ರಾಣಿಯಾಂದು ಪ್ರಾಣಿಯಾಂದು",
    "ನಾನು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು "
    "ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂದಿಯಾದಾರು ಮುಂ",
]
# Only the checks this file is about (the others need models or the full schema).
ONLY = {"near_duplicates": None, "language_purity": None, "label_balance": None, "minimal_pair": None,
        "solution_pattern": None, "required_columns": ["id", "lang", "goal", "sol1", "sol2", "label"]}


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _tanaka(shared_data) -> list[str]:
    lines = (shared_data / "parallel_en_ja_small" / "dev.ja").read_text(encoding="utf-8").splitlines()
    return ["".join(line.split()) for line in lines if line.strip()]


def test_real_text_is_not_degenerate(shared_data):
    """Every goal and solution of PIQA valid and of the PIQA train subset, 1,000 Tanaka-corpus
    sentences, PARus and Tamil XCOPA (real text, 30k+ strings) passes."""
    piqa = _jsonl(shared_data / "piqa_en" / "valid_labeled.jsonl") + \
        _jsonl(shared_data / "piqa_en_train_subset" / "train_subset_labeled.jsonl")
    shares = [rep.share if (rep := worst_repetition(r[c], "en")) else 0.0 for r in piqa for c in ("goal", "sol1", "sol2")]
    # none reaches the bound (0.5); the most repetitive real PIQA text stays well below it (measured: 0.35)
    assert len(piqa) > 7000 and max(shares) < 0.45
    ja = _tanaka(shared_data)
    assert len(ja) >= 500 and [t for t in ja if degenerate_reason(t, "ja")] == []
    parus = _jsonl(shared_data / "ru_russiansuperglue_humanbench" / "parus_unique_items.jsonl")
    assert [r for r in parus for c in ("premise", "choice1", "choice2") if degenerate_reason(r[c], "ru")] == []
    ta = _jsonl(shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl")
    assert [r for r in ta for c in ("premise", "choice1", "choice2") if degenerate_reason(r[c], "ta")] == []


def test_repeated_words_fail_in_kannada_japanese_and_russian(shared_data):
    for text in QWEN_KANNADA:
        why = degenerate_reason(text, "kn")
        assert why is not None and "×" in why
    assert degenerate_reason(QWEN_KANNADA[0], "kn").startswith("'ಪ್ರಾಣಿಯಾಂದು' ×8")  # type: ignore[union-attr]
    # a real Japanese word (from the Tanaka corpus) repeated, with and without the final 。
    sentence = _tanaka(shared_data)[1]  # 彼はつらい人生を送った。
    assert "人生" in sentence
    assert degenerate_reason("人生" * 10, "ja") is not None
    assert degenerate_reason("人生人生人生人生人生。", "ja") is not None
    assert degenerate_reason(sentence, "ja") is None
    # Russian: a real PARus sentence, then its first word repeated, then a loop of a phrase after it
    premise = _jsonl(shared_data / "ru_russiansuperglue_humanbench" / "parus_unique_items.jsonl")[0]["premise"]
    first = premise.split()[0]
    assert degenerate_reason(premise, "ru") is None
    assert degenerate_reason(" ".join([first] * 6), "ru") is not None
    loop = premise + " " + " ".join(["и снова вода"] * 5)
    assert degenerate_reason(loop, "ru") is not None  # a 3-gram repeated 5 times covers 15 of 20 words
    # short texts are never called degenerate: "Я чихнул." / "да да"
    assert degenerate_reason("да да", "ru") is None


def test_degenerate_rows_name_the_column_and_the_ngram():
    rows = degenerate_rows({"goal": ["Чтобы вскипятить воду,", QWEN_KANNADA[1]],
                            "sol1": ["поставьте чайник на плиту.", "ಹೌದು"], "sol2": ["a", "b"]}, ["ru", "kn"])
    assert rows[0] is None and rows[1] is not None and rows[1].startswith("goal: 'ಮುಂದಿಯಾದಾರು' ×10")
    strict = DegenerateText(max_share=0.9)
    assert degenerate_rows({"goal": [QWEN_KANNADA[0]]}, ["kn"], strict) == [None]  # 73% < 90%


@pytest.mark.parametrize("recipe", [*RECIPES, "generic"])
def test_every_suite_runs_the_check(recipe):
    suite = load_suite(recipe)
    assert suite.degenerate is not None and suite.degenerate.columns == ["goal", "sol1", "sol2"]


def test_the_gate_fails_with_the_offending_ids(shared_data):
    piqa = _jsonl(shared_data / "piqa_en" / "valid_labeled.jsonl")[:4]
    rows = [{"id": f"piqa-{i}", "lang": "en", **r} for i, r in enumerate(piqa)]
    rows.append({"id": "qwen-kn-0", "lang": "kn", "goal": QWEN_KANNADA[0], "sol1": "ಹಾಲು ಕುದಿಸಿ.",
                 "sol2": "ಹಾಲು ತಣ್ಣಗಾಗಿಸಿ.", "label": 0})
    table = pa.Table.from_pylist(rows)
    suite = load_suite("generic", ONLY)
    df = to_frame(table)
    derive(df, suite)
    assert list(df["_degenerate_ok"]) == [True] * 4 + [False]
    result = run_gate(table, suite)
    failed = {c.name: c for c in result.failures()}
    assert set(failed) == {"not_degenerate"}
    assert failed["not_degenerate"].failing_ids == ["id=qwen-kn-0"]
    reason = failed["not_degenerate"].reason()
    assert "qwen-kn-0" in reason and "'ಪ್ರಾಣಿಯಾಂದು' ×8" in reason


def test_the_degenerate_stage_drops_what_a_model_loops_on_with_one_reason_each():
    """The demo's refinement made this item (a fresh clone, 2026-11-26): a clause repeated three times, cut
    mid-word at the token limit. The stage drops it (and the other shapes of a bad generation) with a reason."""
    import pyarrow as pa

    from transforms.piqa.degenerate import DegenerateFilter

    loop = "벽을 깨지 않도록 하려면 벽지에 {w}을 채워 넣고, 벽면을 깨지 않도록 하려면 벽지에 물을 채워 넣고, " \
           "벽면을 깨지 않도록 하려면 벽지에 물을 채워 넣고, 벽면을깨"
    rows = {"goal": ["벽을 깨지 않도록 하려면", "How do I open a jar?", "To dry shoes overnight,", "To cut bread,",
                     "To cool a drink quickly,", "물을 빨리 끓이려면"],
            "sol1": [loop.format(w="벽"), "Tap the lid.", "stuff them with newspaper and leave them by the heater",
                     "To cut bread.", "put it in the freezer for ten minutes.", "뚜껑을 덮고 끓인다."],
            "sol2": [loop.format(w="물"), "tap  the lid!", "stuff them with wet towels.", "use a spoon.",
                     "put it in the oven for ten minutes.", "뚜껑을 열고 끓인다."]}
    table = pa.table({"id": [f"r{i}" for i in range(6)], **rows})
    out = DegenerateFilter(lang="ko").process(table.slice(0, 1))
    assert out.column("drop_reason").to_pylist() == ["repetition_loop"]
    en = DegenerateFilter(lang="en").process(table.slice(1, 4))
    assert en.column("drop_reason").to_pylist() == ["identical_solutions", "truncated_text", "solution_copies_goal",
                                                    None]
    assert DegenerateFilter(lang="ko").process(table.slice(5, 1)).column("drop_reason").to_pylist() == [None]
