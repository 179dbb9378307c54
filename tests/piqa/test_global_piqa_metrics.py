"""acc_bytes: byte-length-normalised log-likelihood choice, against hand computations and in the report."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from transforms.eval.evaluator import LOGLIK_ACC, LOGLIK_BYTES, LOGLIK_NORM, choose
from transforms.eval.metrics import loglik_picks, utf8_length
from transforms.eval.report import loglik_rows, markdown, summarize
from transforms.piqa.formats import read_xcopa


def test_byte_lengths_by_script():
    assert utf8_length("kimchi") == 6  # ASCII: one byte a character
    assert utf8_length("борщ") == 8  # Cyrillic: two
    assert utf8_length("김치") == 6  # Hangul syllables: three
    assert utf8_length("お茶") == 6  # kana and kanji: three
    assert utf8_length("கை") == 6  # Tamil: a letter with its vowel sign is two code points, three bytes each


def test_acc_bytes_disagrees_with_acc_norm_where_the_hand_computation_says():
    # "두 개" (two, in Hangul): 3 characters, 3 + 1 + 3 = 7 bytes; "2개": 2 characters, 1 + 3 = 4 bytes.
    sol1, sol2 = ["두 개"], ["2개"]
    lls = np.array([[-6.9, -4.5]])
    # acc: -6.9 < -4.5 → sol2. acc_norm: -6.9/3 = -2.30 < -4.5/2 = -2.25 → sol2.
    # acc_bytes: -6.9/7 = -0.986 > -4.5/4 = -1.125 → sol1.
    picks = loglik_picks(lls, sol1, sol2)
    assert picks["acc"].tolist() == [1] and picks["acc_norm"].tolist() == [1] and picks["acc_bytes"].tolist() == [0]
    scores = np.array([[-6.9, -4.5, 3, 2]])
    assert {k: v.tolist() for k, v in choose(scores, sol1, sol2).items()} == \
        {LOGLIK_ACC: [1], LOGLIK_NORM: [1], LOGLIK_BYTES: [0]}
    # ties go to the first solution, as np.argmax does in lm-eval
    assert loglik_picks(np.array([[-3.0, -3.0]]), ["ab"], ["cd"])["acc_bytes"].tolist() == [0]


def test_tamil_bytes_are_three_per_code_point_but_spaces(shared_data):
    items = read_xcopa(shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl")
    for text in items.column("sol1").to_pylist() + items.column("sol2").to_pylist():
        tamil = sum(1 for ch in text if "\u0b80" <= ch <= "\u0bff")
        assert utf8_length(text) == 3 * tamil + (len(text) - tamil)  # the rest is ASCII (spaces)


def _predictions(ll1, ll2, sol1, sol2, labels):
    scores = np.array([ll1, ll2, [1] * len(ll1), [1] * len(ll1)], dtype=float).T
    parts = []
    for method, pred in choose(scores, sol1, sol2).items():
        n = len(labels)
        parts.append(pa.table({"id": [f"i{i}" for i in range(n)], "label": pa.array(labels, pa.int8()),
                               "model": ["m"] * n, "method": [method] * n, "variant": ["original"] * n,
                               "prompt": ["eval_global_cloze@1"] * n, "pred": pred.tolist(),
                               "correct": (pred == np.array(labels)).tolist(), "status": ["scored"] * n}))
    return pa.concat_tables(parts)


def test_summary_and_table_carry_acc_bytes_beside_acc_and_acc_norm():
    sol1, sol2, labels = ["두 개", "물", "김치"], ["2개", "불", "된장"], [0, 1, 0]
    preds = _predictions([-6.9, -2.0, -1.0], [-4.5, -1.0, -3.0], sol1, sol2, labels)
    items = pa.table({"id": ["i0", "i1", "i2"], "goal": ["g"] * 3, "sol1": sol1, "sol2": sol2,
                      "label": pa.array(labels, pa.int8())})
    summary = summarize(preds, items)
    rows = {r["model"]: r for r in loglik_rows(summary)}
    # by hand: acc picks [1, 1, 0] → 2/3 right; acc_norm [1, 1, 0] → 2/3; acc_bytes [0, 1, 0] → 3/3
    assert round(rows["m"]["acc"]["acc"], 4) == round(2 / 3, 4)
    assert round(rows["m"]["acc_norm"]["acc"], 4) == round(2 / 3, 4)
    assert rows["m"]["acc_bytes"]["acc"] == 1.0
    md = markdown(summary)
    assert "| model | items | acc | acc_norm | acc_bytes |" in md and "| m | 3 | 66.7" in md


def test_the_audit_trains_only_on_the_release_it_is_given():
    """Global PIQA's licence forbids training on it: the audit's one fitted model (bow_logreg) sees only
    the release table; there is no way to hand it a reference set."""
    import inspect

    from transforms.eval.audit import audit_release, bow_logreg

    assert [p for p in inspect.signature(bow_logreg).parameters] == ["table", "folds", "seed"]
    params = inspect.signature(audit_release).parameters
    assert list(params)[0] == "table" and not any("ref" in p for p in params)
