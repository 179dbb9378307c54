"""Per-row checks Great Expectations has no built-in for, computed in pandas before validation.

Each adds a boolean column (`_minimal_pair_ok`, ...) that the suite expects to be True, so a
failure names its rows by id. A check whose columns are missing is skipped (the column-exists
expectation reports that); a check that cannot run (no model for a language) records why, and
the gate fails it instead of crashing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from expectations.suite import SuiteConfig
from transforms.text import textcheck as tc


@dataclass
class Derived:
    """One computed check: the boolean column the gate expects to be True."""

    name: str
    column: str
    description: str
    needs: tuple[str, ...]
    mostly: float = 1.0
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _text(df: pd.DataFrame, col: str) -> list[str]:
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in df[col].tolist()]


def _langs(df: pd.DataFrame, suite: SuiteConfig) -> list[str | None]:
    default = suite.languages[0] if suite.languages and len(suite.languages) == 1 else None
    if "lang" not in df.columns:
        return [default] * len(df)
    return [str(v) if isinstance(v, str) and v else default for v in df["lang"].tolist()]


def item_key(goal: str, sol1: str, sol2: str) -> str:
    """Goal plus the unordered pair of solutions, case- and space-folded: swapped copies collide."""
    def norm(s: str) -> str:
        return re.sub(r"\s+", " ", s).strip().casefold()
    a, b = sorted((norm(sol1), norm(sol2)))
    return f"{norm(goal)}\x1f{a}\x1f{b}"


def derive(df: pd.DataFrame, suite: SuiteConfig) -> list[Derived]:
    """Add the computed columns to `df` in place; return what each one means."""
    checks: list[Derived] = []
    if suite.exact_duplicates:
        checks.append(Derived("no_duplicate_items", "_item_key",
                              "no two rows share goal and solutions (case/space-folded, either order)",
                              ("goal", "sol1", "sol2")))
    if suite.minimal_pair:
        mp = suite.minimal_pair
        checks.append(Derived("minimal_pair", "_minimal_pair_ok",
                              f"sol1 and sol2 differ by ≤ {mp.max_word_edits} words "
                              f"(≤ {mp.max_char_edits} characters where text has no spaces)",
                              ("sol1", "sol2"), mp.mostly))
    if suite.near_duplicates:
        nd = suite.near_duplicates
        checks.append(Derived("no_near_duplicate_goals", "_goal_distinct_ok",
                              f"no {nd.column} within cosine {nd.threshold} of an earlier kept row's "
                              f"({nd.representation})", ("id", nd.column)))
    if suite.language_purity:
        lp = suite.language_purity
        checks.append(Derived("language_purity", "_language_ok",
                              f"≥ {lp.min_share:.0%} of rows have {'/'.join(lp.columns)} in the row's language",
                              tuple(lp.columns), lp.min_share))
    if suite.length and any(v is not None for k, v in suite.length.model_dump().items() if k != "mostly"):
        checks.append(Derived("length_bounds", "_length_ok", _length_text(suite), ("goal", "sol1", "sol2"),
                              suite.length.mostly))
    if suite.degenerate:
        checks.append(Derived("not_degenerate", "_degenerate_ok",
                              f"no {'/'.join(suite.degenerate.columns)} is one word repeated or ≥ "
                              f"{suite.degenerate.max_share:.0%} one n-gram repeated ≥ "
                              f"{suite.degenerate.min_repeats} times", tuple(suite.degenerate.columns)))
    if "review_labels" in df.columns or "review_consensus" in df.columns:
        checks.append(Derived("review_agrees_with_label", "_review_ok",
                              "every reviewed row's label is the solution its reviewers chose (review_labels, "
                              "review_consensus) and review_agreement is the share review_labels give",
                              ("label",)))
    if suite.require_provenance and "model" in df.columns:
        checks.append(Derived("generation_provenance", "_provenance_ok",
                              "generated rows (model set) record prompt_id and prompt_version", ("model",)))
    for check in checks:
        missing = [c for c in check.needs if c not in df.columns]
        if missing:
            check.error = f"skipped: needs column(s) {missing}"
            continue
        try:
            _COMPUTE[check.name](df, suite, check)
        except Exception as err:  # a check that cannot run fails the gate with its reason, never crashes it
            check.error = f"could not run: {type(err).__name__}: {err}"
    return checks


def _length_text(suite: SuiteConfig) -> str:
    parts = [f"{k.replace('_', ' ')} {v}" for k, v in suite.length.model_dump().items()  # type: ignore[union-attr]
             if v is not None and k != "mostly"]
    return "lengths within bounds: " + ", ".join(parts)


def _exact(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    df["_item_key"] = [item_key(g, a, b) for g, a, b in zip(_text(df, "goal"), _text(df, "sol1"),
                                                             _text(df, "sol2"), strict=True)]


def _minimal_pair(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    mp = suite.minimal_pair
    assert mp is not None
    dist, ok = [], []
    for a, b, lang in zip(_text(df, "sol1"), _text(df, "sol2"), _langs(df, suite), strict=True):
        limit_word, limit_char = mp.max_word_edits, mp.max_char_edits
        if lang in mp.segmenters:  # words from the analyser the job used (a missing `lang` extra fails the check)
            from transforms.piqa.japanese_words import word_distance

            d, unit = word_distance(a, b, cap=limit_word + 1), "word"
        else:
            d, unit = tc.pair_distance(a, b, lang, unit=mp.unit, cap=max(limit_word, limit_char) + 1)
        dist.append(d)
        ok.append(d <= (limit_word if unit == "word" else limit_char))
    df["_minimal_pair_distance"] = dist
    df["_minimal_pair_ok"] = ok


def _near_dup(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    from transforms.dedup.semantic import near_duplicate_of

    nd = suite.near_duplicates
    assert nd is not None
    langs = [v if isinstance(v, str) else None for v in df["lang"].tolist()] if "lang" in df.columns else None
    # the same function suggests duplicates in the review batch (transforms/dedup/review_neighbours.py)
    dup = near_duplicate_of([str(v) for v in df["id"].tolist()], _text(df, nd.column), langs,
                            threshold=nd.threshold, representation=nd.representation, embedder=nd.embedder)
    df["_near_duplicate_of"] = dup
    df["_goal_distinct_ok"] = [d is None for d in dup]


def _language(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    lp = suite.language_purity
    assert lp is not None
    langs = _langs(df, suite)
    ok = [True] * len(df)
    for col in lp.columns:
        texts = _text(df, col)
        use_script = [lp.method == "script" or (lp.method == "auto" and lang in lp.script_languages)
                      for lang in langs]
        script_ok = tc.in_language(texts, langs, method="script", min_script_share=lp.min_script_share)
        ft_rows = [i for i, s in enumerate(use_script) if not s]
        ft_ok = tc.in_language([texts[i] for i in ft_rows], [langs[i] for i in ft_rows]) if ft_rows else []
        col_ok = list(script_ok)
        for i, good in zip(ft_rows, ft_ok, strict=True):
            col_ok[i] = good
        ok = [a and b for a, b in zip(ok, col_ok, strict=True)]
    df["_language_ok"] = ok


def _length(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    lb = suite.length
    assert lb is not None
    langs = _langs(df, suite)
    goal = [tc.n_words(t, lang) for t, lang in zip(_text(df, "goal"), langs, strict=True)]
    s1 = [tc.n_words(t, lang) for t, lang in zip(_text(df, "sol1"), langs, strict=True)]
    s2 = [tc.n_words(t, lang) for t, lang in zip(_text(df, "sol2"), langs, strict=True)]

    def within(v: int, lo: int | None, hi: int | None) -> bool:
        return (lo is None or v >= lo) and (hi is None or v <= hi)

    ok = []
    for g, a, b in zip(goal, s1, s2, strict=True):
        good = within(g, lb.min_goal_words, lb.max_goal_words)
        good &= within(a, lb.min_solution_words, lb.max_solution_words)
        good &= within(b, lb.min_solution_words, lb.max_solution_words)
        good &= within(g + min(a, b), lb.min_goal_plus_solution_words, None)
        ok.append(good)
    df["_goal_words"], df["_length_ok"] = goal, ok


def _provenance(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    def present(col: str) -> list[bool]:
        return [bool(v) for v in _text(df, col)] if col in df.columns else [False] * len(df)

    generated = present("model")
    pid, pver = present("prompt_id"), present("prompt_version")
    df["_provenance_ok"] = [not g or (a and b) for g, a, b in zip(generated, pid, pver, strict=True)]


def _degenerate(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    from transforms.piqa.degenerate import degenerate_rows

    rule = suite.degenerate
    assert rule is not None
    why = degenerate_rows({c: _text(df, c) for c in rule.columns if c in df.columns}, _langs(df, suite), rule)
    df["_degenerate_why"] = why
    df["_degenerate_ok"] = [w is None for w in why]
    check.details["examples"] = {str(i): w for i, w in zip(df["id"] if "id" in df.columns else df.index, why,
                                                           strict=True) if w}


def _review(df: pd.DataFrame, suite: SuiteConfig, check: Derived) -> None:
    from transforms.piqa.positions import review_contradiction

    def column(name: str) -> list[Any]:
        if name not in df.columns:
            return [None] * len(df)
        return [None if v is None or (isinstance(v, float) and v != v) else v for v in df[name].tolist()]

    verdicts = [None if v is None else list(v) for v in column("review_labels")]
    why = [review_contradiction(lab, ver, con, agr) for lab, ver, con, agr in zip(
        column("label"), verdicts, column("review_consensus"), column("review_agreement"), strict=True)]
    df["_review_ok"] = [w is None for w in why]
    check.details["examples"] = {str(i): w for i, w in zip(column("id") if "id" in df.columns else df.index, why,
                                                           strict=True) if w}


_COMPUTE = {"no_duplicate_items": _exact, "minimal_pair": _minimal_pair, "no_near_duplicate_goals": _near_dup,
            "language_purity": _language, "length_bounds": _length, "generation_provenance": _provenance,
            "not_degenerate": _degenerate, "review_agrees_with_label": _review}
