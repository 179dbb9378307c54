"""The j-piqa release suite counts the minimal pair in words, with the job's segmenter (fugashi +
unidic-lite), on real Japanese sentences from the Tanaka corpus; without the segmenter it fails the
gate with a message naming the extra, instead of quietly falling back to characters."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest

pytest.importorskip("fugashi", reason="the `lang` extra (fugashi, unidic-lite) is not installed")

from expectations.checks import derive  # noqa: E402
from expectations.gate import run_gate, to_frame  # noqa: E402
from expectations.suite import load_suite  # noqa: E402
from transforms.piqa.japanese_words import morphemes, word_distance  # noqa: E402
from transforms.text.textcheck import pair_distance  # noqa: E402

ONLY_PAIR = {"near_duplicates": None, "language_purity": None, "label_balance": None, "degenerate": None,
             "required_columns": ["id", "lang", "goal", "sol1", "sol2", "label"]}


def _tanaka(shared_data) -> list[str]:
    lines = (shared_data / "parallel_en_ja_small" / "dev.ja").read_text(encoding="utf-8").splitlines()
    return ["".join(line.split()) for line in lines if line.strip()]


def _pairs(shared_data) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Real sentences with one noun swapped for a long compound (1 word, > 6 characters), and with
    three one-character words changed (3 words, ≤ 6 characters)."""
    long_swap, three_short = [], []
    for s in _tanaka(shared_data):
        if not s.endswith("。"):
            continue
        ms = morphemes(s)
        nouns = [m.surface for m in ms if m.pos == "名詞" and len(m.surface) >= 2]
        if nouns and len(long_swap) < 20:
            long_swap.append((s, s.replace(nouns[0], "トイレットペーパー", 1)))
        particles = [i for i, m in enumerate(ms) if m.pos == "助詞" and m.surface in ("は", "を", "が", "に", "で")]
        if len(particles) >= 3 and len(three_short) < 20:
            swap = {"は": "も", "を": "が", "が": "を", "に": "で", "で": "に"}
            out = [m.surface if i not in particles[:3] else swap[m.surface] for i, m in enumerate(ms)]
            three_short.append((s, "".join(out)))
    return long_swap, three_short


def _table(pairs: list[tuple[str, str]]) -> pa.Table:
    n = len(pairs)
    return pa.table({"id": [f"r{i}" for i in range(n)], "lang": ["ja"] * n, "goal": ["目的。"] * n,
                     "sol1": [a for a, _ in pairs], "sol2": [b for _, b in pairs], "label": [0] * n})


def test_the_suite_counts_words_where_characters_would_misjudge(shared_data):
    long_swap, three_short = _pairs(shared_data)
    assert len(long_swap) == 20 and len(three_short) >= 10
    # the cases where the old character proxy (≤ 6 characters) and words disagree
    assert all(pair_distance(a, b, "ja")[0] > 6 for a, b in long_swap)
    assert all(word_distance(a, b) == 1 for a, b in long_swap)
    assert all(pair_distance(a, b, "ja")[0] <= 6 for a, b in three_short)
    assert all(word_distance(a, b) >= 3 for a, b in three_short)

    suite = load_suite("j-piqa", ONLY_PAIR)
    assert suite.minimal_pair is not None and suite.minimal_pair.segmenters == {"ja": "fugashi"}
    df = to_frame(_table(long_swap + three_short))
    derive(df, suite)
    assert list(df["_minimal_pair_ok"]) == [True] * len(long_swap) + [False] * len(three_short)
    assert list(df["_minimal_pair_distance"][:len(long_swap)]) == [1] * len(long_swap)

    result = run_gate(_table(three_short[:3]), suite)
    failed = {c.name: c for c in result.failures()}
    assert failed["minimal_pair"].failing_ids == ["id=r0", "id=r1", "id=r2"]
    assert "≤ 2 words" in failed["minimal_pair"].reason()


def test_without_the_segmenter_the_gate_fails_and_names_the_extra(monkeypatch, shared_data):
    from transforms.piqa import japanese_words

    long_swap, _ = _pairs(shared_data)
    japanese_words._tagger.cache_clear()
    japanese_words._morphemes.cache_clear()
    monkeypatch.setitem(sys.modules, "fugashi", None)  # `import fugashi` raises ImportError
    try:
        checks = derive(to_frame(_table(long_swap[:2])), load_suite("j-piqa", ONLY_PAIR))
    finally:
        japanese_words._tagger.cache_clear()
        japanese_words._morphemes.cache_clear()
    check = next(c for c in checks if c.name == "minimal_pair")
    # run_gate turns a check that could not run into a failed check with this error (test_expectations.py)
    assert check.error is not None and check.error.startswith("could not run: MissingDependencyError")
    assert "pip install -e .[lang]" in check.error
