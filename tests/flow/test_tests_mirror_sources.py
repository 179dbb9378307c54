"""Issue 33 §5: tests/ mirrors the source tree. A test file lives in the folder of what it specifies:
tests/<package>/ for transforms/<package>/, tests/recipes/<recipe>/ for transforms/recipes/<recipe>/ (or a bundled
recipe without its own code), tests/jobs/ for the CLI, tests/gpu/ for the device checks, tests/docs/ for the docs site
and tests/scripts/ for scripts/; only the shared helpers and doubles stay at tests/ itself."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _allowed_folders() -> set[str]:
    packages = {p.name for p in (ROOT / "transforms").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    recipes = {p.name for p in (ROOT / "transforms" / "recipes").iterdir() if p.is_dir() and not p.name.startswith("_")}
    recipes |= {p.stem.replace("-", "_") for p in (ROOT / "jobs" / "recipes").glob("*.yaml")}
    return (packages - {"recipes"}) | {"jobs", "gpu", "recipes", "docs", "scripts"} | {f"recipes/{r}" for r in recipes}


def test_every_test_file_lives_in_the_folder_of_what_it_specifies():
    allowed = _allowed_folders()
    tests = sorted(TESTS.rglob("test_*.py"))
    assert len(tests) > 100
    misplaced = [str(p.relative_to(TESTS)) for p in tests if str(p.parent.relative_to(TESTS)) not in allowed]
    assert not misplaced, f"test files outside a folder mirroring the sources: {misplaced} (allowed: {sorted(allowed)})"


def test_test_module_names_are_unique_across_folders():
    # pytest imports them by file name (no __init__.py): two test_x.py in two folders would collide
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
