"""Every `docs/PAGE.md` or `docs/PAGE.md#anchor` that the code, the recipes, the scripts or the README point a
reader to (error messages, CLI help, comments) names a page that exists and a heading on it, so moving or
renaming a page or a heading fails here, not in front of a user. (Links inside docs/ are checked by the strict
site build, tests/docs/test_site.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"docs/([\w/.-]+?\.md)(#[\w-]+)?")
SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".md", ".cfg", ".txt", ".Dockerfile")


def _anchors(page: Path) -> set[str]:
    """The ids mkdocs gives the page's headings (Python-Markdown's toc slugify, code spans unwrapped)."""
    from markdown.extensions.toc import slugify

    found, fence = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if re.match(r"\s*(```|~~~)", line):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            found.add(slugify(line.lstrip("#").strip().replace("`", ""), "-"))
    return found


def links() -> list[tuple[str, str, str, str]]:
    """(file, link, page, anchor) for every docs link outside docs/."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in files:
        if name.startswith("docs/") or not name.endswith(SUFFIXES) or name == "tests/docs/test_doc_links_in_code.py":
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in LINK.finditer(text):
            out.append((name, m.group(0), m.group(1), (m.group(2) or "")[1:]))
    return out


LINKS = links()


def test_links_are_found():
    assert len(LINKS) > 50
    assert any(link == "docs/howto/plan.md" for _, link, _, _ in LINKS)  # `piqaforge plan --help`


@pytest.mark.parametrize("name, link, page, anchor", LINKS, ids=[f"{n}:{lk}" for n, lk, _, _ in LINKS])
def test_a_docs_link_in_the_code_resolves(name, link, page, anchor):
    target = ROOT / "docs" / page
    assert target.is_file(), f"{name}: {link}: no page docs/{page}"
    if anchor:
        ids = _anchors(target)
        # a link cut by a line break inside a docstring (`#language-checks-for-every-`) names a prefix
        ok = anchor in ids or (anchor.endswith("-") and any(i.startswith(anchor) for i in ids))
        assert ok, f"{name}: {link}: docs/{page} has no heading #{anchor}"
