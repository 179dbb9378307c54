"""Issue 32 §3: `item_language` keeps genuine items with two-word solutions and catches a solution in another
language, for every language with real human-written items or short texts in ../shared/data.

The items and the swaps are benchmarks/bench_item_language.py's (that script prints the table docs/stages.md
carries); these tests hold the real stage, with its defaults, to the targets.
"""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pytest
from conftest import ROOT

from transforms.piqa.item_checks import ItemLanguageCheck

_spec = importlib.util.spec_from_file_location("bench_item_language", ROOT / "benchmarks" / "bench_item_language.py")
bench = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(bench)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def table(shared_data):
    return {r["lang"]: r for r in bench.measure(bench.item_language_check, bench.load_items(shared_data))}


@pytest.mark.floats
def test_every_language_loses_at_most_one_percent_of_its_genuine_items(table):
    assert set(table) >= {"ta", "ru", "ja", "ko", "en", "hi", "bn"}
    for lang, r in table.items():
        allowed = max(1, int(0.01 * r["items"]))  # the two 99-item parallel sets may lose one
        assert r["false_drops"] <= allowed, (lang, r)
    total = sum(r["items"] for r in table.values())
    assert sum(r["false_drops"] for r in table.values()) <= 0.01 * total


@pytest.mark.floats
def test_a_solution_swapped_for_another_languages_is_caught(table):
    for lang, r in table.items():
        assert r["swapped"] == r["items"] and r["catch_rate"] >= 0.985, (lang, r)
    total = sum(r["swapped"] for r in table.values())
    assert sum(r["caught"] for r in table.values()) >= 0.99 * total


@pytest.mark.floats
def test_the_per_text_check_of_earlier_releases_is_what_dropped_short_solutions(table, shared_data):
    """The old decision (each text alone, lid.176 or script at 80%) on the same Hindi items: the drop the new
    team met (8% for them, more on XQuAD's short answers), which the item-level decision removes."""
    items = bench.load_items(shared_data)["hi"]
    old = bench.item_language_check(items, "hi", method="script")
    assert sum(old) > 10 * max(1, table["hi"]["false_drops"])


def _check(lang: str, rows: list[tuple[str, str, str]]) -> list[str | None]:
    stage = ItemLanguageCheck(lang=lang)
    stage.setup()
    out = stage.process(pa.table({"goal": [r[0] for r in rows], "sol1": [r[1] for r in rows],
                                  "sol2": [r[2] for r in rows]}))
    return out.column("language_detail").to_pylist()


def test_languages_outside_the_bundled_recipes_by_code():
    thai = [("จะทำให้น้ำแข็งละลายเร็วขึ้นได้อย่างไร", "ใส่เกลือ", "ใส่น้ำตาล"),
            ("จะทำให้น้ำแข็งละลายเร็วขึ้นได้อย่างไร", "Sprinkle salt over the ice.", "ใส่น้ำตาล")]
    got = _check("th", thai)
    assert got[0] is None and "sol1" in got[1] and "Thai" in got[1]
    swahili = [("Jinsi ya kupika wali bila kuuchoma chini ya sufuria?", "Tumia moto mdogo.", "Tumia moto mkali."),
               ("Jinsi ya kupika wali bila kuuchoma chini ya sufuria?", "Tumia moto mdogo.",
                "Keep the heat high and never stir the rice at all.")]
    got = _check("swa", swahili)  # ISO 639-3 works as well as 639-1
    assert got[0] is None and got[1] is not None and "sol2" in got[1]


def test_an_unknown_code_is_refused_when_the_recipe_loads():
    with pytest.raises(ValueError, match="xx-not-a-language|unknown language"):
        ItemLanguageCheck(lang="xx-not-a-language")
