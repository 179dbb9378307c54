"""docs/reference/cli.md is the parser's own account of every command and flag (`python -m jobs.cli_reference`),
so a flag added, renamed or re-described in jobs/parser.py (or a module that adds a command) shows up in the docs
or fails here."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.cli_reference import reference_markdown
from jobs.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "cli.md"


def test_the_cli_reference_is_current():
    assert PAGE.read_text(encoding="utf-8") == reference_markdown(), \
        "docs/reference/cli.md is stale: run `python -m jobs.cli_reference > docs/reference/cli.md`"


def _commands(parser, path=("piqaforge",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name), child
                yield from _commands(child, (*path, name))


def test_every_command_and_flag_is_on_the_page():
    text = reference_markdown()
    commands = list(_commands(build_parser()))
    assert {"run", "submit", "plan", "stages"} <= {p[1] for p, _ in commands}
    for path, parser in commands:
        assert f"# {' '.join(path)}\n" in text, f"{' '.join(path)} is missing"
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in text, f"{' '.join(path)} {option} is missing"
