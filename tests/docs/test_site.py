"""The docs build as a site with strict checking (mkdocs.yml): a page missing from the nav, a link to a page that
does not exist, or an anchor that no heading makes, fails the build, and so this test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `dev` extra: pip install -e '.[dev]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the `dev` extra)")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site),
                           "--config-file", str(ROOT / "mkdocs.yml")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-6000:]
    assert (site / "index.html").is_file() and (site / "reference" / "cli" / "index.html").is_file()
    shutil.rmtree(site, ignore_errors=True)


def test_strict_checking_catches_a_broken_anchor_and_a_missing_page(tmp_path):
    """The validation settings bite: a copy of the config over two planted pages fails for each."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `dev` extra: pip install -e '.[dev]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the `dev` extra)")
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    for planted in ("[there](b.md#no-such-heading)", "[there](no_such_page.md)"):
        docs = tmp_path / planted.count("#").__str__() / "docs"
        docs.mkdir(parents=True)
        (docs / "index.md").write_text(f"# A\n\nSee {planted}.\n", encoding="utf-8")
        (docs / "b.md").write_text("# B\n\n## A heading\n", encoding="utf-8")
        mine = {"site_name": "t", "docs_dir": str(docs), "validation": config["validation"],
                "nav": ["index.md", "b.md"]}
        (docs.parent / "mkdocs.yml").write_text(yaml.safe_dump(mine), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                               str(docs.parent / "site"), "--config-file", str(docs.parent / "mkdocs.yml")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0, f"{planted}: the strict build passed"
