"""A stage of one's own, `my_stages:Class`, resolves from the working directory the recipe is run in, with no
PYTHONPATH (the `piqaforge` entry point's sys.path starts at its script's folder, not there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from transforms.flow.recipe_check import ref_problem
from transforms.flow.registry import resolve_ref

MODULE = '''from typing import ClassVar

from transforms.core.stage import FilterStage


class ShoutFilter(FilterStage):
    name: ClassVar[str] = "shout_filter"
'''


def test_a_module_of_the_working_directory_resolves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "team_stages_h43.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "team_stages_h43", raising=False)
    assert ref_problem("team_stages_h43:ShoutFilter") is None
    assert "no 'Shout'" in (ref_problem("team_stages_h43:Shout") or "")
    assert resolve_ref("team_stages_h43:ShoutFilter").name == "shout_filter"
