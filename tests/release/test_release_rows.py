"""The release gate checks rows against each other (issue 32 §2): reviewers vs label, agreement vs verdicts,
and the card's figures recomputed from the published files. The property test swaps random rows of a real
reviewed table (PIQA dev items with their real annotators' verdicts) through the real `balance_labels` and the
real gate, with every bundled recipe's suite and published columns."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reviewed_items import reviewed_piqa

from expectations.gate import run_gate
from expectations.suite import load_suite
from transforms.flow.recipe import list_recipes, load_recipe
from transforms.piqa.balance import BalanceLabels
from transforms.piqa.positions import POSITION_PAIRS, swap_solutions
from transforms.piqa.schema import ITEM_SCHEMA
from transforms.release.hub import DEFAULT_PROVENANCE
from transforms.release.recheck import recheck_release
from transforms.release.writer import HubSettings, build_release

# The rows are English PIQA items: the checks of a recipe's language and text shape are switched off so that
# what is tested is the rows' agreement with themselves (the other checks have their own tests).
ROWS_ONLY = {"languages": None, "language_purity": None, "length": None, "minimal_pair": None,
             "solution_pattern": None, "degenerate": None, "require_provenance": False,
             "near_duplicates": {"representation": "char-ngrams"}}


def release_specs() -> list[tuple[str, str, list[str]]]:
    out = []
    for name, _ in list_recipes():
        for run in load_recipe(name).runs:
            if run.release:
                out.append((name, run.release.suite, list(run.release.columns or DEFAULT_PROVENANCE)))
    return out


SPECS = release_specs()


@pytest.fixture(scope="module")
def reviewed(shared_data) -> pa.Table:
    return reviewed_piqa(shared_data, 160)


def with_columns(table: pa.Table, columns: list[str]) -> pa.Table:
    """The reviewed table with every published position-dependent pair filled (a gloss that names its solution)."""
    for a, b in POSITION_PAIRS:
        if a in columns and a not in table.column_names:
            for col, src in ((a, "sol1"), (b, "sol2")):
                table = table.append_column(col, pa.array([f"[{col}] {s}" for s in table.column(src).to_pylist()]))
    return table


def with_required(table: pa.Table, required: list[str]) -> pa.Table:
    """The suite's required recipe columns the PIQA rows lack (J-PIQA's is_translation ...), typed by the schema."""
    for name in required:
        if name not in table.column_names:
            dtype = ITEM_SCHEMA.field(name).type
            value = False if pa.types.is_boolean(dtype) else 0 if pa.types.is_integer(dtype) else f"{name} value"
            table = table.append_column(name, pa.array([value] * table.num_rows, dtype))
    return table


def old_swap(table: pa.Table, mask: list[bool]) -> pa.Table:
    """What balance_labels did before issue 32: solutions and label only, the reviewers' verdicts left behind."""
    cols = {c: table.column(c).to_pylist() for c in ("sol1", "sol2", "label")}
    for i, m in enumerate(mask):
        if m:
            cols["sol1"][i], cols["sol2"][i], cols["label"][i] = cols["sol2"][i], cols["sol1"][i], 1 - cols["label"][i]
    for c, v in cols.items():
        table = table.set_column(table.column_names.index(c), c, pa.array(v, table.schema.field(c).type))
    return table


def test_every_bundled_recipe_has_a_release_spec():
    assert {n for n, _, _ in SPECS} >= {"ko-piqa", "ta-piqa", "zh-piqa", "j-piqa", "ru-piqa", "pindic"}


@pytest.mark.parametrize(("recipe", "suite", "columns"), SPECS, ids=[s[0] for s in SPECS])
def test_random_swaps_through_balance_and_gate_never_publish_a_contradiction(reviewed, recipe, suite, columns):
    rng = random.Random(recipe)
    suite_cfg = load_suite(suite, ROWS_ONLY)
    base = with_required(with_columns(reviewed, columns), suite_cfg.required_columns)
    for trial in range(3):
        rows = sorted(rng.sample(range(base.num_rows), 60 + 20 * trial))
        table = base.take(pa.array(rows))
        mask = [rng.random() < 0.5 for _ in range(table.num_rows)]
        balanced = BalanceLabels(seed=trial).process_table(swap_solutions(table, mask))
        kept = balanced.filter(pa.compute.invert(pa.compute.is_valid(balanced.column("drop_reason")))) \
            if "drop_reason" in balanced.column_names else balanced
        gate = run_gate(kept.drop_columns([c for c in ("drop_reason", "solutions_swapped") if c in kept.column_names]),
                        suite_cfg)
        assert gate.success, gate.reasons()
        review = next(c for c in gate.checks if c.name == "review_agrees_with_label")
        assert review.success and review.unexpected_count == 0
        # the same rows swapped the old way (verdicts left behind): refused, the swapped rows named
        planted = [rng.random() < 0.2 for _ in range(table.num_rows)]
        planted[0] = True
        bad = run_gate(old_swap(table, planted), suite_cfg)
        assert not bad.success
        failed = next(c for c in bad.failures() if c.name == "review_agrees_with_label")
        assert failed.unexpected_count == sum(planted)
        assert set(failed.failing_ids) == {f"id={i}" for i, p in zip(table.column("id").to_pylist(), planted,
                                                                    strict=True) if p}
        assert set(failed.examples) <= set(table.column("id").to_pylist())


def test_agreement_that_does_not_follow_from_the_verdicts_is_refused(reviewed):
    table = reviewed.slice(0, 40)
    agreement = table.column("review_agreement").to_pylist()
    i = next(k for k, v in enumerate(agreement) if v == 1.0)
    agreement[i] = 2 / 3
    table = table.set_column(table.column_names.index("review_agreement"), "review_agreement",
                             pa.array(agreement, pa.float64()))
    gate = run_gate(table, load_suite("generic", {**ROWS_ONLY, "label_balance": None}))
    failed = [c for c in gate.failures()]
    assert [c.name for c in failed] == ["review_agrees_with_label"]
    assert failed[0].failing_ids == [f"id={table.column('id')[i].as_py()}"]
    assert "review_agreement 0.6667" in next(iter(failed[0].examples.values()))


def test_ids_repeated_and_identical_solutions_are_refused(reviewed):
    rows = reviewed.slice(0, 40).to_pylist()
    rows[5]["id"] = rows[4]["id"]
    rows[7]["sol2"] = rows[7]["sol1"]
    gate = run_gate(pa.Table.from_pylist(rows), load_suite("generic", {**ROWS_ONLY, "label_balance": None}))
    names = {c.name for c in gate.failures()}
    assert {"unique_ids", "solutions_differ"} <= names


def _release(table: pa.Table, tmp_path, name: str = "rows") -> tuple:
    suite = load_suite("generic", ROWS_ONLY)
    gate = run_gate(table, suite)
    gate_dict = {**gate.model_dump(), "reasons": gate.reasons()}
    result = build_release(table, gate_dict, out_dir=tmp_path / name, dataset="rows", recipe="rows-recipe",
                           version="1", audit=False, hub=HubSettings(licence="afl-3.0"))
    return gate, result


def test_the_card_is_recomputed_from_the_published_files(reviewed, tmp_path):
    table = BalanceLabels().process_table(reviewed.slice(0, 80)).drop_columns(["solutions_swapped"])
    gate, result = _release(table, tmp_path)
    assert gate.success and result.released, result.reasons
    out = tmp_path / "rows"
    assert recheck_release(out) == []
    data = out / "data" / "en" / "test-00000-of-00001.parquet"
    published = pq.read_table(data)
    assert published.column("review_labels").to_pylist() == table.column("review_labels").to_pylist()
    # a published file changed after the card was written: the recheck names every figure that no longer follows
    pq.write_table(published.slice(0, 79), data)
    problems = recheck_release(out)
    assert any("rows per config {'en': 80}" in p and "{'en': 79}" in p for p in problems), problems
    assert any(p.startswith("release recheck: stats items: card 80, published files 79") for p in problems)
    labels = published.column("label").to_pylist()
    flipped = published.set_column(published.column_names.index("label"), "label",
                                   pa.array([1 - labels[0], *labels[1:]], pa.int64()))
    pq.write_table(flipped, data)
    problems = recheck_release(out)
    assert any("contradict their reviewers" in p and published.column("id")[0].as_py() in p for p in problems)
    assert any(p.startswith("release recheck: stats labels.0") for p in problems)
    stats = json.loads((out / "extras" / "stats.json").read_text("utf-8"))
    assert stats["items"] == 80
