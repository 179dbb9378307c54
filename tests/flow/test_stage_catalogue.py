"""Issue 33 §1: a stage is one class that says everything about itself; the catalogue is derived from it.

The registered name is the class's `name`; every field has a description; extras live on the class (the
`require()` calls are checked against them in tests/flow/test_cluster_placement.py); `piqaforge stages` and
`piqaforge stages NAME` print what the classes say; docs/stages_reference.md is their current output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from transforms.flow import catalogue
from transforms.flow.registry import STAGES, stage_class

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(STAGES))
def test_a_stage_is_registered_under_its_own_name_and_describes_itself(name):
    cls = stage_class(name)
    assert cls.name == name, f"{STAGES[name]} calls itself {cls.name!r} but is registered as {name!r}"
    doc = catalogue.describe(name)
    assert doc.summary and not doc.summary.startswith("Base class"), f"{name}: the class has no docstring"
    undescribed = [f.name for f in doc.fields if not f.description]
    assert not undescribed, f"{name}: fields without a description: {undescribed}"


def test_no_two_stages_share_a_name():
    names = [stage_class(n).name for n in STAGES]
    assert len(names) == len(set(names))


def test_the_stage_reference_is_current():
    current = catalogue.reference_markdown()
    on_disk = (ROOT / "docs" / "stages_reference.md").read_text(encoding="utf-8")
    assert on_disk == current, "docs/stages_reference.md is stale: run `piqaforge stages --markdown > " \
                               "docs/stages_reference.md`"


def test_stages_cli_lists_one_line_each_and_prints_a_stages_fields():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "jobs.cli", "stages", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    listed = cli()
    assert listed.returncode == 0
    lines = [line for line in listed.stdout.splitlines() if line and not line.startswith(("`", "Old names"))]
    assert [line.split()[0] for line in lines] == list(STAGES)
    one = cli("item_language")
    assert one.returncode == 0 and "columns" in one.stdout and "The item's texts" in one.stdout
    assert "extras: langid" in one.stdout and "reads:  goal, sol1, sol2" in one.stdout
    wrong = cli("item_langage")
    assert wrong.returncode == 2 and "did you mean item_language" in wrong.stderr


def test_the_catalogue_says_which_stages_fuse_into_one_pass():
    from transforms.flow.catalogue import describe, stage_text

    assert describe("langid").fuses and describe("normalize").fuses
    assert not describe("exact_dedup").fuses and not describe("llm_transform").fuses
    assert "fuses with cheap neighbours into one pass" in stage_text("length_filter")
    assert "fuses" not in stage_text("minhash_dedup").splitlines()[0]
