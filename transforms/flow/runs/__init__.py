"""The kinds of run a recipe declares, one interface each (steps.run_one dispatches to them):

* `plan(ctx, spec)` -> [(place, built stage)]: what the run will run, each stage at its place in the run
  (`source`, `stages.<stage>[#k]`, `release`, `evaluate`, `review.auto.engines.<i>`), built as the run builds
  it. The placement check (transforms/flow/placement.py) reads this; it changes nothing.
* `execute(ctx, spec, entry)` -> "done", "awaiting_review" (the recipe stops until people's judgments are
  imported) or "stop" (nothing left to release). Every run that reads rows is a run of the runner; its law is
  re-checked from disk and its report written, also when it fails.

| kind | module |
|---|---|
| `stages` / `source`: a chain over its parents or a source | runs/stages.py |
| `rounds`: quota rounds | runs/rounds.py |
| `review`: export, import, or LLM annotators | runs/review.py |
| `release`: the gate and the release folder | runs/release.py |
| `evaluate`: the evaluated models over a release | runs/evaluate.py |
"""

from __future__ import annotations

from typing import Any, Protocol

from transforms.flow.context import Context, RunEntry
from transforms.flow.recipe import RunSpec
from transforms.flow.runs.evaluate import EvaluateRun
from transforms.flow.runs.release import ReleaseRun
from transforms.flow.runs.review import ReviewRun
from transforms.flow.runs.rounds import RoundsRun
from transforms.flow.runs.stages import StagesRun


class RunKind(Protocol):
    def plan(self, ctx: Context, spec: RunSpec) -> list[tuple[str, Any]]: ...

    def execute(self, ctx: Context, spec: RunSpec, entry: RunEntry) -> str: ...


KINDS: dict[str, RunKind] = {"stages": StagesRun(), "source": StagesRun(), "rounds": RoundsRun(),
                             "review": ReviewRun(), "release": ReleaseRun(), "evaluate": EvaluateRun()}


def kind_of(spec: RunSpec) -> RunKind:
    return KINDS[spec.kind]
