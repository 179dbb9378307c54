"""Drop reasons by construction (issue 48 §1): a stage's reasons are the members of one `DropReason` enum, the class
is `Stage[ItsEnum]`, and the only way it drops a row (`drop`, `drop_where`) takes a member of that enum, so mypy
refuses another stage's reason or a bare string. The tests here plant such stages in a temporary module and run
mypy on them with the repo's configuration, both ways; check that the declaration is what the catalogue reads; and
that nothing in transforms/ writes a reason around it (the code scan, tests/core/test_drop_reasons_declared.py,
stays as a second line).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pytest
from stageutil import stage_classes

from transforms.core import columns as C
from transforms.core.creating import ExpandStage
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import STRICT_DROP_REASONS, Stage, StageError, check_drop_reasons, set_drop_reason

ROOT = Path(__file__).resolve().parents[2]
MYPY = Path(sys.executable).with_name("mypy")

HEADER = '''\
from typing import ClassVar

import pyarrow as pa

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import FilterStage, Stage
from transforms.text.quality import LengthDrops


class ShortDrops(DropReason):
    TOO_SHORT = "too_short", "fewer than three characters"
    EMPTY_FIELD = "empty_field", "a field is empty (empty_field:<column>)"


class OtherDrops(DropReason):
    WRONG_LANGUAGE = "wrong_language", "another stage's reason"


class Short(Stage[ShortDrops]):
    name: ClassVar[str] = "planted_short"

    def process(self, batch: pa.Table) -> pa.Table:
        mask = pa.array([True] * batch.num_rows)
'''

CORRECT = '''\
        batch = self.drop(batch, [ShortDrops.TOO_SHORT, (ShortDrops.EMPTY_FIELD, "goal"), None][:batch.num_rows])
        return self.drop_where(batch, mask, ShortDrops.EMPTY_FIELD, "sol1")


class Keeps(Stage):
    name: ClassVar[str] = "planted_keeps"

    def process(self, batch: pa.Table) -> pa.Table:
        return self.drop(batch, [None] * batch.num_rows)


class ShortFilter(FilterStage[ShortDrops]):
    def reasons(self, batch: pa.Table) -> list[ShortDrops | None]:
        return [ShortDrops.TOO_SHORT] * batch.num_rows


def helper_in_a_ray_task(batch: pa.Table) -> pa.Table:
    return Short.drop_where(batch, pa.array([False] * batch.num_rows), ShortDrops.TOO_SHORT)
'''

# Each wrong version: the line that replaces CORRECT's first line, and what mypy must say about it.
WRONG = {
    "another_stages_member": ('        batch = self.drop(batch, [OtherDrops.WRONG_LANGUAGE])',
                              r'incompatible type "OtherDrops"; expected "ShortDrops \| tuple\[ShortDrops, str\] \| None"'),
    "a_repo_stages_member": ('        batch = self.drop_where(batch, mask, LengthDrops.TOO_LONG)',
                             r'incompatible type "LengthDrops"; expected "ShortDrops"'),
    "a_bare_string": ('        batch = self.drop(batch, ["too_short"])',
                      r'incompatible type "str"; expected "ShortDrops \| tuple\[ShortDrops, str\] \| None"'),
    "a_detail_written_into_the_string": ('        batch = self.drop(batch, ["empty_field:goal"])',
                                         r'incompatible type "str"'),
    "a_helper_naming_another_stage": ('        batch = Short.drop(batch, [OtherDrops.WRONG_LANGUAGE])',
                                      r'incompatible type "OtherDrops"'),
}


def mypy(folder: Path, *files: Path) -> dict[str, list[str]]:
    """mypy with the repo's configuration (pydantic plugin, follow_imports) on `files`: error lines by file name."""
    proc = subprocess.run([str(MYPY), "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                           str(folder / ".mypy_cache"), "--no-error-summary", *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 2: mypy itself failed (a config error)
    errors: dict[str, list[str]] = {f.name: [] for f in files}
    for line in proc.stdout.splitlines():
        name = Path(line.split(":", 1)[0]).name
        if ": error:" in line and name in errors:
            errors[name].append(line)
    return errors


def test_mypy_accepts_the_stages_own_reasons_and_refuses_any_other(tmp_path):
    right = tmp_path / "planted_right.py"
    right.write_text(HEADER + CORRECT, encoding="utf-8")
    wrong = {}
    for case, (line, _) in WRONG.items():
        wrong[case] = tmp_path / f"planted_{case}.py"
        wrong[case].write_text(HEADER + CORRECT.replace(CORRECT.splitlines()[0], line, 1), encoding="utf-8")
    errors = mypy(tmp_path, right, *wrong.values())
    assert errors[right.name] == []
    planted_line = len(HEADER.splitlines()) + 1
    for case, (_, says) in WRONG.items():
        found = errors[wrong[case].name]
        assert len(found) == 1 and f":{planted_line}: error:" in found[0] and re.search(says, found[0]), (case, found)


def test_a_class_declares_its_reasons_once_and_the_catalogue_reads_them():
    from transforms.flow.catalogue import describe
    from transforms.text.quality import LengthDrops, LengthFilter

    assert LengthFilter.reason_type is LengthDrops
    assert LengthFilter.drop_reasons == {str(m): m.meaning for m in LengthDrops} == LengthDrops.meanings()
    assert dict(describe("length_filter").drop_reasons) == LengthDrops.meanings()

    class Twice(DropReason):
        ONE = "one", "the only one"

    with pytest.raises(TypeError, match="beside its reasons' enum Twice"):
        class Both(Stage[Twice]):
            drop_reasons: ClassVar[dict[str, str]] = {"one": "written a second time"}

    with pytest.raises(TypeError, match="empty_reason 'nothing' is not a member of its reasons Twice"):
        class Expands(ExpandStage[Twice]):
            empty_reason: ClassVar[str] = "nothing"


def test_drop_writes_the_kinds_as_they_are_on_disk():
    class Planted(DropReason):
        EMPTY_FIELD = "empty_field", "a field is empty"
        TOO_LONG = "too_long", "too long"

    class Planter(Stage[Planted]):
        name: ClassVar[str] = "planter"

        def process(self, batch: pa.Table) -> pa.Table:
            out = self.drop(batch, [(Planted.EMPTY_FIELD, "goal"), None, Planted.TOO_LONG])
            return self.drop_where(out, pa.array([True, True, False]), Planted.TOO_LONG, "sol1")

    out = Planter()(pa.table({C.TEXT: ["a", "b", "c"]}))
    assert out.column(C.DROP_REASON).to_pylist() == ["empty_field:goal", "too_long:sol1", "too_long"]
    assert out.schema.field(C.DROP_REASON).type == pa.string()


def test_a_stage_from_outside_the_repo_writing_its_own_strings_still_gets_the_runtime_check(monkeypatch):
    class Outside(Stage):  # a team's plain subclass: a hand-written dict and its own strings
        name: ClassVar[str] = "outside"
        drop_reasons: ClassVar[dict[str, str]] = {"too_short": "short"}

        def process(self, batch: pa.Table) -> pa.Table:
            return set_drop_reason(batch, pa.array(["too_short", "mystery:x"], pa.string()))

    monkeypatch.setenv(STRICT_DROP_REASONS, "0")  # a user's run: a warning, the rows dropped as the stage said
    assert Outside()(pa.table({C.TEXT: ["a", "b"]})).column(C.DROP_REASON).to_pylist() == ["too_short", "mystery:x"]
    assert check_drop_reasons(Outside(), ["too_short", "mystery:x"]) == [
        f"undeclared drop reason 'mystery': {__name__}.Outside does not declare it"]
    monkeypatch.setenv(STRICT_DROP_REASONS, "1")  # the tests
    with pytest.raises(StageError, match="'mystery'"):
        Outside()(pa.table({C.TEXT: ["a", "b"]}))


# The calls that write a reason string without a member: the contract's own plumbing, and `drop_where`, the one
# stage whose reason is configuration (a recipe names it), which declares exactly that string.
RAW_WRITERS = {"transforms/core/stage.py", "transforms/core/creating.py", "transforms/piqa/provenance.py"}


def test_no_stage_in_the_repo_writes_a_reason_around_its_enum():
    calls = []
    for path in sorted((ROOT / "transforms").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == \
                    "set_drop_reason" and rel not in RAW_WRITERS:
                calls.append(f"{rel}:{node.lineno}")
    assert calls == [], "drop rows with self.drop / self.drop_where and a member of the stage's reasons"
    by_hand = sorted(f"{c.__module__}.{c.__qualname__}" for c in stage_classes()
                     if c.__module__.startswith("transforms.") and c.reason_type is None and c.drop_reasons
                     and c.__name__ not in ("ExpandStage", "AggregateStage", "DropWhere"))
    assert by_hand == [], "declare these classes' reasons as a DropReason enum: class X(Stage[XDrops])"


def test_a_stage_defined_outside_a_module_travels_to_a_worker_with_its_reasons():
    import cloudpickle  # what Ray ships a stage with: by value, enum included, for a notebook's or a test's class

    class NotebookDrops(DropReason):
        BAD = "bad_row", "a row the notebook does not want"

    class NotebookStage(Stage[NotebookDrops]):
        name: ClassVar[str] = "notebook"

        def process(self, batch: pa.Table) -> pa.Table:
            return self.drop(batch, [NotebookDrops.BAD, None])

    shipped = cloudpickle.loads(cloudpickle.dumps(NotebookStage()))
    assert shipped(pa.table({C.TEXT: ["a", "b"]})).column(C.DROP_REASON).to_pylist() == ["bad_row", None]
    assert type(shipped).drop_reasons == {"bad_row": "a row the notebook does not want"}


def test_every_reason_of_the_repo_says_what_it_means():
    blank = sorted(f"{c.__module__}.{c.__qualname__}: {kind}" for c in stage_classes()
                   if c.__module__.startswith("transforms.") for kind, meaning in c.drop_reasons.items()
                   if not meaning.strip())
    assert blank == [], "give each member its meaning: NAME = 'kind', 'what it means'"
