"""The artifact audit as a release check (issue 32 §2): a planted artifact is refused, an audit that cannot
run refuses the release with its reason, and only an explicit switch publishes without it. Real PIQA items."""

from __future__ import annotations

import pyarrow as pa
import pytest

from expectations.gate import run_gate
from expectations.suite import load_suite
from transforms.piqa.formats import read_piqa
from transforms.release.writer import AUDIT_OFF, HubSettings, build_release

SUITE = {"languages": None, "language_purity": None, "near_duplicates": {"representation": "char-ngrams"},
         "require_provenance": False}


@pytest.fixture(scope="module")
def piqa(shared_data) -> pa.Table:
    table = read_piqa(shared_data / "piqa_en" / "valid_labeled.jsonl").slice(0, 400)
    rows = [r for r in table.to_pylist() if len(r["sol1"]) != len(r["sol2"])]
    ones = [r for r in rows if r["label"] == 1][:60]
    zeros = [r for r in rows if r["label"] == 0][:60]
    return pa.Table.from_pylist([{**r, "lang": "en"} for r in ones + zeros])


def planted(table: pa.Table) -> pa.Table:
    """The same items, solutions ordered so the correct one is always the longer (labels stay balanced)."""
    out = []
    for r in table.to_pylist():
        right, wrong = (r["sol1"], r["sol2"]) if r["label"] == 0 else (r["sol2"], r["sol1"])
        if len(right) < len(wrong):
            right, wrong = wrong, right
        out.append({**r, "sol1": right, "sol2": wrong} if r["label"] == 0 else {**r, "sol1": wrong, "sol2": right})
    return pa.Table.from_pylist(out)


def release(table: pa.Table, out, **kw):
    gate = run_gate(table, load_suite("generic", SUITE))
    assert gate.success, gate.reasons()
    return build_release(table, {**gate.model_dump(), "reasons": gate.reasons()}, out_dir=out, dataset="audit",
                         recipe="audit-recipe", version="1", hub=HubSettings(licence="afl-3.0"), **kw)


def test_a_release_with_a_planted_artifact_is_refused_and_the_same_items_without_it_are_not(piqa, tmp_path):
    clean = release(piqa, tmp_path / "clean")
    assert clean.released and (tmp_path / "clean" / "RELEASED").exists(), clean.reasons
    assert clean.audit and clean.audit["baselines"]["longer_solution"]["acc"] < 0.6
    art = release(planted(piqa), tmp_path / "planted")
    assert not art.released and not (tmp_path / "planted" / "RELEASED").exists()
    assert art.audit and art.audit["baselines"]["longer_solution"]["acc"] == 1.0
    assert any(r.startswith("artifact audit: the longer_solution baseline answers 1.00") for r in art.reasons)
    assert "artifact audit: the longer_solution" in (tmp_path / "planted" / "README.md").read_text("utf-8")


def test_an_audit_that_raises_refuses_the_release_with_its_reason(piqa, tmp_path):
    # a bound outside (0, 1) reaches the real audit, which raises: the release must not pass unaudited
    result = release(piqa, tmp_path / "raised", audit_bound=1.5)
    assert not result.released and not (tmp_path / "raised" / "RELEASED").exists()
    reason = next(r for r in result.reasons if r.startswith("artifact audit could not run"))
    assert "ValueError: bound must be a fraction between 0 and 1, got 1.5" in reason and AUDIT_OFF in reason
    assert "could not run: ValueError" in (tmp_path / "raised" / "README.md").read_text("utf-8")


def test_an_audit_switched_off_explicitly_publishes_and_says_so(piqa, tmp_path):
    result = release(planted(piqa), tmp_path / "off", audit=False)
    assert result.released and result.audit is None, result.reasons
    card = (tmp_path / "off" / "README.md").read_text("utf-8")
    assert f"not run: switched off by the recipe (`{AUDIT_OFF}`)" in card
