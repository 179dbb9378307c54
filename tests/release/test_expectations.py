"""The release gate: per-recipe suites on real items, and bad input that must fail readably, never crash.

Expected values are computed here independently (our own edit distance, pandas counts), not read
back from the code under test.
"""

from __future__ import annotations

import string
from functools import cache

import pyarrow as pa
import pytest

from expectations.checks import derive
from expectations.gate import run_gate, to_frame
from expectations.suite import SUITES_DIR, load_suite
from transforms.piqa.formats import read_parus, read_piqa, read_xcopa
from transforms.piqa.schema import RECIPES

FAST = {"near_duplicates": {"representation": "char-ngrams", "threshold": 0.95}}


def _tokens(text: str) -> tuple[str, ...]:
    out = []
    for raw in text.split():
        word = raw.lower().strip(string.punctuation)
        if word:
            out.append(word)
    return tuple(out)


def _edit(a: tuple, b: tuple) -> int:
    """Textbook recursive Levenshtein (memoised), independent of transforms.text.textcheck."""
    @cache
    def d(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
    return d(len(a), len(b))


@pytest.fixture(scope="module")
def piqa(shared_data):
    d = shared_data / "piqa_en"
    return read_piqa(d / "valid.jsonl", d / "valid-labels.lst")


def test_every_recipe_suite_loads():
    for recipe in (*RECIPES, "generic"):
        suite = load_suite(recipe)
        assert suite.name == recipe
    jp = load_suite("j-piqa")
    assert jp.minimal_pair is not None and jp.minimal_pair.max_word_edits == 2
    assert jp.solution_pattern == "。$" and jp.label_balance.min == 0.45  # inherited from generic
    assert load_suite("ko-piqa").near_duplicates.threshold == 0.85
    assert load_suite("ta-piqa", {"label_balance": {"min": 0.3}}).label_balance.min == 0.3


def test_a_new_language_is_configuration(tmp_path):
    (tmp_path / "generic.yaml").write_text((SUITES_DIR / "generic.yaml").read_text(encoding="utf-8"))
    (tmp_path / "kn-piqa.yaml").write_text("extends: generic\nlanguages: [kn]\n"
                                           "language_purity: {method: script}\n", encoding="utf-8")
    suite = load_suite("kn-piqa", suites_dir=tmp_path)
    assert suite.languages == ["kn"] and suite.language_purity.method == "script"


def test_minimal_pair_distances_on_real_piqa(piqa):
    """Word edit distance on PIQA validation: the gate's numbers equal a separate textbook DP."""
    suite = load_suite("j-piqa", {"languages": ["en"], "near_duplicates": None, "language_purity": None})
    df = to_frame(piqa.select(["id", "lang", "goal", "sol1", "sol2", "label"]))
    derive(df, suite)
    expected = [_edit(_tokens(a), _tokens(b)) for a, b in zip(df["sol1"], df["sol2"], strict=True)]
    # the first item: "ripped paper strips" vs "ripped jeans material" → 2 substitutions
    assert expected[0] == 2 and df["_minimal_pair_ok"][0]
    capped = [min(e, 4) for e in expected]  # the gate stops counting past its limit
    assert [min(int(x), 4) for x in df["_minimal_pair_distance"]] == capped
    n_ok = sum(e <= 2 for e in expected)
    assert int(df["_minimal_pair_ok"].sum()) == n_ok
    assert 1000 < n_ok < 1838  # PIQA is mostly, not entirely, minimal pairs (1,134 of 1,838)


def test_japanese_minimal_pairs_fall_back_to_characters():
    items = pa.table({"id": ["a", "b", "c"], "lang": ["ja"] * 3,
                      "goal": ["お茶を入れるには", "窓を拭くには", "パンを焼くには"],
                      "sol1": ["急須に茶葉を入れる。", "新聞紙で窓を拭く。", "トースターで焼く。"],
                      "sol2": ["急須に砂糖を入れる。", "乾いた砂で窓ガラスをこする", "冷蔵庫で焼く。"],
                      "label": [0, 0, 1]})
    suite = load_suite("j-piqa", {"near_duplicates": None, "language_purity": None, "label_balance": None,
                                  "required_columns": ["id", "lang", "goal", "sol1", "sol2", "label"]})
    df = to_frame(items)
    derive(df, suite)
    # characters without punctuation: 茶葉→砂糖 = 2; 新聞紙で窓を拭く vs 乾いた砂で窓ガラスをこする: > 6
    assert list(df["_minimal_pair_ok"]) == [True, False, True]
    result = run_gate(items, suite)
    failed = {c.name: c for c in result.failures()}
    assert set(failed) == {"minimal_pair", "pattern:sol2"}
    assert failed["minimal_pair"].failing_ids == ["id=b"]
    assert failed["pattern:sol2"].failing_ids == ["id=b"]  # no closing 。


def test_real_xcopa_ta_passes_the_tamil_suite(shared_data):
    items = read_xcopa(shared_data / "xcopa_ta", "val")
    result = run_gate(items, load_suite("ta-piqa"))
    assert result.success, result.reasons()
    balance = next(c for c in result.checks if c.name == "label_balance")
    labels = items.column("label").to_pylist()
    assert balance.observed == pytest.approx(sum(labels) / len(labels))


def test_mixed_languages_fail_and_name_the_rows(shared_data, piqa):
    ru = read_parus(shared_data / "ru_russiansuperglue_humanbench").slice(0, 40)
    en = piqa.slice(0, 10).select(ru.column_names[:8])
    en = en.set_column(1, "lang", pa.array(["ru"] * 10))  # English text declared as Russian
    mixed = pa.concat_tables([ru.select(en.column_names), en])
    result = run_gate(mixed, load_suite("ru-piqa", {**FAST, "length": None, "label_balance": None}))
    assert not result.success
    failed = {c.name: c for c in result.failures()}
    assert set(failed) == {"language_purity"}
    assert sorted(failed["language_purity"].failing_ids) == sorted(f"id={i}" for i in en.column("id").to_pylist())
    assert failed["language_purity"].unexpected_count == 10


def test_missing_columns_are_reported_not_crashed():
    items = pa.table({"id": ["a", "b"], "goal": ["How to open a jar?", "How to dry shoes?"],
                      "sol1": ["Tap the lid.", "Stuff them with paper."]})
    result = run_gate(items, load_suite("generic", FAST))
    assert not result.success
    reasons = "\n".join(result.reasons())
    for col in ("lang", "sol2", "label"):
        assert f"column_exists:{col}" in reasons
    assert "skipped: needs column(s) ['sol2']" not in reasons  # skipped checks are not failures themselves


def test_labels_outside_0_1_and_nulls_name_the_rows(piqa):
    t = piqa.slice(0, 40).select(["id", "lang", "goal", "sol1", "sol2", "label"])
    labels = t.column("label").to_pylist()
    labels[3], labels[7] = 2, -1
    goals = t.column("goal").to_pylist()
    goals[5] = None
    t = t.set_column(5, "label", pa.array(labels, pa.int64())).set_column(2, "goal", pa.array(goals))
    result = run_gate(t, load_suite("generic", FAST))
    failed = {c.name: c for c in result.failures()}
    ids = t.column("id").to_pylist()
    assert failed["label_values"].failing_ids == [f"id={ids[3]}", f"id={ids[7]}"]
    assert failed["not_null:goal"].failing_ids == [f"id={ids[5]}"]


def test_unreadable_label_type_fails_with_a_reason(piqa):
    t = piqa.slice(0, 10).select(["id", "lang", "goal", "sol1", "sol2"])
    t = t.append_column("label", pa.array(["yes", "no"] * 5))
    result = run_gate(t, load_suite("generic", FAST))
    assert not result.success
    reasons = "\n".join(result.reasons())
    assert "column 'label' cannot be read as int64" in reasons
    assert "label_values" in reasons


def test_one_row_repeated_a_thousand_times(piqa):
    row = piqa.slice(0, 1).select(["id", "lang", "goal", "sol1", "sol2", "label"])
    t = pa.concat_tables([row] * 1000)
    result = run_gate(t, load_suite("generic", FAST))
    failed = {c.name: c for c in result.failures()}
    assert failed["no_duplicate_items"].unexpected_count == 1000
    assert failed["unique_ids"].unexpected_count == 1000
    assert failed["no_near_duplicate_goals"].unexpected_count == 999  # the first copy is kept
    assert failed["label_balance"].observed == 0.0
    assert all(len(r) < 400 for r in result.reasons())  # one readable line each, ids truncated


def test_empty_table_fails():
    t = pa.table({c: pa.array([], pa.string()) for c in ("id", "lang", "goal", "sol1", "sol2")}).append_column(
        "label", pa.array([], pa.int64()))
    result = run_gate(t, load_suite("generic", FAST))
    assert not result.success and "non_empty" in {c.name for c in result.failures()}


def test_swapped_copy_and_generated_rows_without_prompt(piqa):
    t = piqa.slice(0, 30).select(["id", "lang", "goal", "sol1", "sol2", "label"])
    first = t.slice(0, 1).to_pylist()[0]
    swapped = {**first, "id": "swapped", "sol1": first["sol2"], "sol2": first["sol1"], "label": 1 - first["label"]}
    t = pa.concat_tables([t, pa.Table.from_pylist([swapped], schema=t.schema)])
    models = [None] * t.num_rows
    models[4] = "gemma-3-270m"
    t = t.append_column("model", pa.array(models, pa.string()))
    result = run_gate(t, load_suite("generic", FAST))
    failed = {c.name: c for c in result.failures()}
    assert sorted(failed["no_duplicate_items"].failing_ids) == sorted([f"id={first['id']}", "id=swapped"])
    assert failed["generation_provenance"].failing_ids == [f"id={t.column('id')[4].as_py()}"]


def test_minimal_pair_filter_stage_on_real_piqa(piqa):
    """The J-PIQA filter as a pipeline stage keeps exactly the items our own DP puts at ≤ 2 words."""
    from transforms.piqa.filters import MinimalPairFilter

    out = MinimalPairFilter(max_word_edits=2)(piqa.select(["id", "lang", "goal", "sol1", "sol2", "label"]))
    assert out.num_rows == piqa.num_rows  # rows are marked, not deleted
    expected = [_edit(_tokens(a), _tokens(b)) <= 2 for a, b in zip(
        piqa.column("sol1").to_pylist(), piqa.column("sol2").to_pylist(), strict=True)]
    kept = [s == "kept" for s in out.column("_status").to_pylist()]
    assert kept == expected
    assert set(filter(None, out.column("drop_reason").to_pylist())) == {"not_minimal_pair:word"}


def test_kannada_and_malayalam_use_the_script_check(shared_data):
    from transforms.text.textcheck import in_language, script_share

    kn = "ನೀರು ಕುದಿಸಲು ಪಾತ್ರೆಯನ್ನು ಒಲೆಯ ಮೇಲೆ ಇಡಿ"
    ml = "വെള്ളം തിളപ്പിക്കാൻ പാത്രം അടുപ്പിൽ വയ്ക്കുക"
    assert script_share(kn, "kn") == 1.0 and script_share(ml, "kn") == 0.0
    assert in_language([kn, ml, "boil water in a pot"], ["kn", "ml", "kn"], method="script") == [True, True, False]
    # a Tamil row declared as Kannada fails purity under the PIndicQA suite (script check for kn)
    ta = read_xcopa(shared_data / "xcopa_ta", "val").slice(0, 3).select(["id", "lang", "goal", "sol1", "sol2", "label"])
    rows = ta.to_pylist()
    rows[0]["lang"] = "kn"
    rows[1].update(lang="kn", goal=kn + "?", sol1=kn, sol2=kn + " ಬೇಗ")
    table = pa.Table.from_pylist(rows)
    suite = load_suite("pindic", {"near_duplicates": None, "label_balance": None, "length": None,
                                  "required_columns": ["id", "lang", "goal", "sol1", "sol2", "label"]})
    df = to_frame(table)
    derive(df, suite)
    assert list(df["_language_ok"]) == [False, True, True]  # row 2 is Tamil declared ta: fastText


def _two(**cols):
    base = {"id": ["a", "b"], "lang": ["en", "en"], "goal": ["How to boil water?", "How to dry wet shoes?"],
            "sol1": ["Use a pot.", "Stuff them with paper."], "sol2": ["Use a sieve.", "Stuff them with sand."],
            "label": [0, 1]}
    base.update(cols)
    return pa.table(base)


@pytest.mark.parametrize("table, failing", [
    (pa.table({"x": [1, 2]}), "column_exists:id"),
    (_two(label=pa.nulls(2, pa.int64())), "not_null:label"),
    (_two(label=[0.0, 1.5]), "types"),
    (_two(lang=[None, None]), "not_null:lang"),
    (_two().slice(0, 1), "label_balance"),
])
def test_odd_tables_fail_without_crashing(table, failing):
    result = run_gate(table, load_suite("generic", FAST))
    assert not result.success
    assert failing in {c.name for c in result.failures()}
    assert all(isinstance(r, str) and r for r in result.reasons())
