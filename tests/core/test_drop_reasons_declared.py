"""Every drop reason the code can write is declared by the stage that writes it, found by reading the code, not by
what the tests happened to reach (issue 41: `no_final_period` was written by transforms/piqa/japanese_words.py and
declared by no stage; a model's real output took that path on a cluster and the run died).

The scan reads each module of transforms/ and collects the string values in the places a drop reason is made:
the reasons argument of `set_drop_reason(...)`, what is appended to or assigned to a name that says `reason`
(`reasons.append(...)`, `reason = ...`, a module's `REASONS = {...}`), through module constants, conditional
expressions, containers and f-strings (`f"{NOT_MINIMAL}:{unit}"` is kind `not_minimal_pair`). A value inside a call
(`pl.lit(...)`, `batch.column("label")`) is not a reason. Each kind found must be declared:
* inside a stage class: by that class (or a subclass that runs it);
* in a helper module: by a stage class of that module or of a module that imports it;
* elsewhere: by some stage.
A run never dies for this at run time any more (the runner records an undeclared kind as a warning); the tests run
strict (tests/conftest.py) and this scan finds what no test reaches. Since issue 48 the guarantee is typed: a stage's
reasons are the members of its `DropReason` enum and mypy refuses any other (tests/core/test_drop_reasons_typed.py);
this scan stays as a second line (a class's `drop_reasons` is derived from its enum).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from stageutil import stage_classes

from transforms.core.stage import Stage

ROOT = Path(__file__).resolve().parents[2]
KIND = re.compile(r"^[a-z][a-z0-9_]*[a-z0-9]$")
PASS_THROUGH = (ast.IfExp, ast.BoolOp, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Starred, ast.ListComp,
                ast.GeneratorExp, ast.JoinedStr, ast.FormattedValue, ast.BinOp)
ARRAYS = ("array", "chunked_array", "list", "tuple")  # calls whose first argument holds the values


def _value(node: ast.AST, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, ast.JoinedStr) and node.values:  # the kind is the f-string's start
        first = node.values[0]
        if isinstance(first, ast.Constant):
            return str(first.value)
        if isinstance(first, ast.FormattedValue):
            return _value(first.value, consts)
    return None


def reason_values(expr: ast.AST, consts: dict[str, str]) -> list[tuple[str, int]]:
    """(kind, line) for each reason value `expr` can be, not looking into calls, comparisons or subscripts."""
    out: list[tuple[str, int]] = []
    todo = [expr]
    while todo:
        node = todo.pop()
        value = _value(node, consts)
        if value is not None:
            kind = value.split(":", 1)[0].strip()
            if KIND.match(kind):
                out.append((kind, getattr(node, "lineno", 0)))
            continue
        if isinstance(node, ast.IfExp):
            todo += [node.body, node.orelse]
        elif isinstance(node, ast.Dict):  # REASONS = {"kind": "meaning"}: the keys are the kinds
            todo += [k for k in node.keys if k is not None]
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            todo.append(node.elt)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in ARRAYS:
            todo += node.args[:1]  # pa.array([...], pa.string()): the values, not the type
        elif isinstance(node, PASS_THROUGH):
            todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    return out


def _says_reason(target: ast.AST) -> bool:
    text = ast.unparse(target).lower()
    return "reason" in text and "reject_reason" not in text  # review's rejected judgments are not drop reasons


def made_reasons(tree: ast.Module) -> list[tuple[str, int, str | None]]:
    """(kind, line, enclosing class name or None) of every drop reason value the module makes."""
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}
    found: list[tuple[str, int, str | None]] = []

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.ClassDef) else cls
            exprs: list[ast.AST] = []
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name == "set_drop_reason" and len(child.args) >= 2:
                    exprs.append(child.args[1])
                if name in ("append", "extend") and isinstance(f, ast.Attribute) and _says_reason(f.value):
                    exprs += child.args
            elif isinstance(child, ast.Assign) and not (node is tree and isinstance(child.value, ast.Constant)):
                # (a module constant such as DROP_REASON = "drop_reason" is a name; it counts where it is used)
                for target in child.targets:
                    if isinstance(target, ast.Tuple) and isinstance(child.value, ast.Tuple) \
                            and len(target.elts) == len(child.value.elts):  # reason, note = "kind", "a note"
                        exprs += [v for t, v in zip(target.elts, child.value.elts, strict=True) if _says_reason(t)]
                    elif _says_reason(target):
                        exprs.append(child.value)
            elif isinstance(child, ast.AnnAssign) and child.value is not None and _says_reason(child.target) \
                    and "drop_reasons" not in ast.unparse(child.target):
                exprs.append(child.value)
            for expr in exprs:
                found.extend((kind, line, cls) for kind, line in reason_values(expr, consts))
            visit(child, inner)

    visit(tree, None)
    return found


def imported_modules(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def undeclared(root: Path, classes: list[type[Stage]]) -> list[str]:
    files = {".".join(p.relative_to(root).with_suffix("").parts): p for p in (root / "transforms").rglob("*.py")}
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in files.items()}
    by_module: dict[str, list[type[Stage]]] = {}
    for cls in classes:
        by_module.setdefault(cls.__module__, []).append(cls)
    everywhere = {k for cls in classes for k in cls.drop_reasons}
    imports = {m: imported_modules(t) for m, t in trees.items()}
    problems = []
    for mod, tree in trees.items():
        users = [c for m in trees if mod in imports[m] for c in by_module.get(m, [])]
        for kind, line, cls_name in made_reasons(tree):
            if cls_name is not None and any(c.__name__ == cls_name for c in by_module.get(mod, [])):
                owner = next(c for c in by_module[mod] if c.__name__ == cls_name)
                family = [owner, *(c for c in classes if issubclass(c, owner))]
                ok, where = any(kind in c.drop_reasons for c in family), f"class {cls_name}"
            elif by_module.get(mod) or users:
                family = [*by_module.get(mod, []), *users]
                ok, where = any(kind in c.drop_reasons for c in family), \
                    "the stages of this module or of those that import it: " + \
                    ", ".join(sorted({c.__name__ for c in family}))
            else:
                ok, where = kind in everywhere, "any stage"
            if not ok:
                problems.append(f"{files[mod].relative_to(root)}:{line}: drop reason {kind!r} is declared by none of "
                                f"{where}")
    return sorted(set(problems))


def test_every_drop_reason_the_code_makes_is_declared_by_a_stage_that_can_write_it():
    problems = undeclared(ROOT, stage_classes())
    assert not problems, "make each a member of the class's DropReason enum (`class X(Stage[XDrops])`):\n" + \
        "\n".join(problems)


@pytest.mark.parametrize("source, kinds", [
    ('REASONS = {"no_final_period": "x", "empty_option": "y"}\n', {"no_final_period", "empty_option"}),
    ('NOT_MINIMAL = "not_minimal_pair"\ndef f(reasons, d, unit):\n'
     '    reasons.append(None if d else f"{NOT_MINIMAL}:{unit}")\n', {"not_minimal_pair"}),
    ('def check(a, b):\n    reason = "no_final_period" if a else ("word_order_changed" if b else None)\n'
     '    return reason\n', {"no_final_period", "word_order_changed"}),
    ('def p(batch):\n    return set_drop_reason(batch, pa.array(["too_long" if x else None for x in batch.column("label")]))\n',
     {"too_long"}),
    ('def v(reason):\n    reason = pl.when(x).then(pl.lit("skipped"))\n', set()),  # inside a call: not counted
])
def test_the_scan_finds_reasons_where_code_makes_them(source, kinds):
    assert {k for k, _, _ in made_reasons(ast.parse(source))} == kinds


def test_the_scan_names_a_forgotten_reason_with_its_file_and_line(tmp_path):
    helper = tmp_path / "transforms" / "piqa" / "words.py"
    helper.parent.mkdir(parents=True)
    helper.write_text('def check(a):\n    if a:\n        return "no_final_period"\n    reason = "empty_option"\n'
                      '    return reason\n')
    (tmp_path / "transforms" / "piqa" / "stage.py").write_text("from transforms.piqa.words import check\n")

    class Words(Stage):
        drop_reasons = {"empty_option": "an option is empty"}

    Words.__module__ = "transforms.piqa.stage"
    assert undeclared(tmp_path, [Words]) == []  # a bare `return "..."` is not a reason place; the assignment is
    helper.write_text(helper.read_text().replace('reason = "empty_option"', 'reason = "no_final_period"'))
    assert undeclared(tmp_path, [Words]) == [
        "transforms/piqa/words.py:4: drop reason 'no_final_period' is declared by none of the stages of this module "
        "or of those that import it: Words"]
