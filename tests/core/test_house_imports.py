"""The house has no import circles, not even two files of one folder (issue 41).

lint-imports checks the layers between packages; it does not see two modules of one folder importing each other,
nor an import written inside a function or under `if TYPE_CHECKING:` that closes a loop. This test reads every
first-party module's imports from its source (all of them: top level, in functions, under TYPE_CHECKING) and
fails on any strongly connected set of two or more modules, naming the modules and the lines that tie them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("transforms", "jobs", "harness", "expectations")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """module -> {imported first-party module: line}, every import statement of the file counted."""
    files = {module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # `from pkg import mod` names a module when pkg.mod is one; else it names a member of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:  # `import a.b.c` where c is a member
                    target = target.rpartition(".")[0]
                # a module importing its own package (an ancestor's __init__) is not a tie to each module under it
                if target and target != mod and not mod.startswith(target + "."):
                    graph[mod].setdefault(target, node.lineno)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def describe(graph: dict[str, dict[str, int]], comp: list[str]) -> str:
    ties = [f"{a} -> {b} (line {graph[a][b]})" for a in comp for b in graph[a] if b in comp]
    return "; ".join(ties)


def test_the_house_has_no_import_circle():
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 200  # the whole house was read (255 modules on 2026-11-29)
    found = circles(graph)
    assert not found, "import circles (move the shared names down into a module both can import):\n" + \
        "\n".join(describe(graph, c) for c in found)


def test_the_check_finds_a_circle_of_two_files_in_one_folder_even_in_a_function(tmp_path):
    pkg = tmp_path / "house" / "room"
    pkg.mkdir(parents=True)
    (tmp_path / "house" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from house.room.b import thing\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n\n"
                              "def thing():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from house.room import a\n")  # imports into the circle, is not part of it
    graph = import_graph(tmp_path, ("house",))
    assert circles(graph) == [["house.room.a", "house.room.b"]]
    assert "house.room.b -> house.room.a (line 6)" in describe(graph, ["house.room.a", "house.room.b"])
