"""The card names the recipe (not the suite it uses) and keeps prose citations out of the BibTeX block."""

from __future__ import annotations

import re

from reviewed_items import reviewed_piqa

from transforms.piqa.balance import BalanceLabels
from transforms.release.hub_card import citation_section
from transforms.release.licences import SourceSpec
from transforms.release.stage import GateAndRelease

BIB = "@inproceedings{bisk2020piqa,\n  title = {PIQA: Reasoning about Physical Commonsense in Natural Language},\n}"
PROSE = "Bisk et al. (2020). PIQA: Reasoning about Physical Commonsense in Natural Language. AAAI."


def test_the_card_names_the_recipe_and_the_suite_separately(shared_data, tmp_path):
    table = BalanceLabels().process_table(reviewed_piqa(shared_data, 60)).drop_columns(["solutions_swapped"])
    stage = GateAndRelease(recipe="generic", recipe_name="zh-piqa", dataset="names", version="1",
                           out_dir=str(tmp_path / "rel"), result_path=str(tmp_path / "gate.json"), audit=False,
                           suite_overrides={"languages": None, "language_purity": None,
                                            "near_duplicates": {"representation": "char-ngrams"}},
                           hub={"licence": "afl-3.0"})
    stage.process_table(table)
    card = (tmp_path / "rel" / "README.md").read_text("utf-8")
    assert "Recipe `zh-piqa`" in card and "(suite `generic`)" in card and "Recipe `generic`" not in card


def _bibtex_block(text: str) -> str:
    return re.search(r"```bibtex\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]


def test_a_prose_citation_is_cited_as_text_and_a_bibtex_one_inside_the_block():
    text = citation_section("ta-piqa", "2026.11.27", None, [
        SourceSpec(name="piqa", licence="afl-3.0", citation=PROSE),
        SourceSpec(name="piqa-bib", licence="afl-3.0", citation=BIB)])
    block = _bibtex_block(text)
    assert BIB in block and PROSE not in block
    assert f"- {PROSE}" in text.split("```", 2)[2]
    assert block.count("@") == 2  # ours and the source's entry, every one BibTeX
