"""The one orchestrator: runs a recipe's runs in order, each through the runner.

It owns everything between runs: run ids (`<recipe run id>-<run name>`), parents, the law re-checked
from disk after every run (raising with the stage named), one report per run, run status
(`running`, `awaiting_review`, `succeeded`, `failed`) and resume. The recipe's own record,
`<lake>/runs/<recipe run id>/recipe.json`, lists each run with its id, status and fingerprint, the
review batch it waits on and the exact next command. `--resume` skips a run whose manifest
succeeded with the same resolved spec, resumes an interrupted one partition by partition (the
runner's ledgers), and asks no LLM question twice (the answer cache under `<lake>/cache/`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from transforms.core.lake import Lake
from transforms.core.liveness import Heartbeat, driver_stamp, effective_status
from transforms.core.stage import note_placement
from transforms.flow import placement, steps
from transforms.flow.context import Context, RecipeRunError, RunEntry, check_stages, entry_next
from transforms.flow.recipe import Recipe, order

log = logging.getLogger("piqaforge")
RECORD = "recipe.json"


class RecipeRecord(BaseModel):
    """`runs/<root>/recipe.json`: the recipe run as a whole (no manifest of its own)."""

    root: str
    recipe: str
    path: str
    status: str = "running"
    started_at: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    finished_at: str | None = None
    runs: dict[str, RunEntry] = Field(default_factory=dict)
    next: str | None = None
    error: str | None = None
    driver: dict[str, Any] | None = Field(None, description="pid and host of the driver running it now.")
    resume: str | None = Field(None, description="The command that continues this recipe run.")

    def write(self, lake: Lake) -> None:
        from transforms.core.manifest import write_atomic
        from transforms.core.secrets import scrub_strings

        # the resume command and the error line carry the command line: a secret given there is scrubbed
        write_atomic(lake.run_dir(self.root) / RECORD, json.dumps(scrub_strings(self.model_dump(mode="json")),
                                                                  indent=2))

    @classmethod
    def load(cls, lake: Lake, root: str) -> RecipeRecord | None:
        path = lake.run_dir(root) / RECORD
        return cls.model_validate_json(path.read_text(encoding="utf-8")) if path.exists() else None


def run_recipe(recipe: Recipe, *, lake: str | Path | None = None, run_id: str | None = None, resume: bool = False,
               doubles: dict[str, Any] | None = None, command: list[str] | None = None,
               on_run: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) every run of `recipe`; returns what the command line prints.

    `doubles` (tests): engine doubles by stage name, role or "*", used by every LLM stage and annotator.
    `on_run(name, event)` is called as runs start and end (tests kill the driver there).
    """
    from transforms.core.runner import init_ray

    the_lake = Lake(lake or "lake")
    root = run_id or Lake.new_run_id(recipe.recipe)
    ctx = Context(recipe, the_lake, root, resume, doubles, command)  # one for the whole recipe run
    check_stages(ctx)  # before the lake is touched
    on_cluster = bool(recipe.ray_address or os.environ.get("RAY_ADDRESS"))
    if on_cluster:  # can it run every stage? (Ray starts once: here on a cluster, below on a laptop)
        init_ray(recipe.ray_address, recipe.num_cpus)
        note_placement("driver")  # with PIQAFORGE_PLACEMENT_LOG set: which node the driver joined from
        checked = placement.preflight(recipe, ctx=ctx)  # the checked builds, placed as they are
        for where, answer in checked.items():
            print(f"{recipe.recipe}: placement check: {where} -> {answer['host']} "
                  f"({answer['env'] or answer['python']}): modules found", file=sys.stderr)
    the_lake.create()
    record = RecipeRecord.load(the_lake, root)
    if record is not None and not resume:
        raise RecipeRunError(f"run {root!r} exists in {the_lake.root}; continue it with --resume {root} or choose "
                             "another --run-id")
    if record is None and resume:
        raise RecipeRunError(f"no recipe run {root!r} in {the_lake.root} to resume (`piqaforge runs` lists them)")
    record = record or RecipeRecord(root=root, recipe=recipe.recipe, path=recipe.path)
    record.status, record.error, record.next = "running", None, None
    record.driver, record.resume = driver_stamp(), ctx.resume_command()
    record.write(the_lake)
    heartbeat = Heartbeat(the_lake.run_dir(root)).__enter__()  # `show` says interrupted once this driver dies
    if not on_cluster:
        init_ray(recipe.ray_address, recipe.num_cpus)
    out: dict[str, Any] = {"recipe": recipe.recipe, "run_id": root}
    try:
        for spec in order(recipe):
            entry = record.runs.get(spec.name) or RunEntry(run_id=ctx.run_id(spec))
            record.runs[spec.name] = entry
            if on_run:
                on_run(spec.name, "start")
            result = steps.run_one(ctx, spec, entry)
            record.write(the_lake)
            if on_run:
                on_run(spec.name, "end")
            if result == "awaiting_review":
                record.status = "awaiting_review"
                record.next = entry_next(ctx, entry)
                out.update({"status": "awaiting_review", "review_batch": entry.batch, "next": record.next})
                return out
            if result == "stop":  # nothing to release, or the gate refused the release
                record.status = "failed" if entry.status == "failed" else entry.status
                record.next = f"see {the_lake.run_dir(entry.run_id) / 'report.html'}" if entry.status == "failed" \
                    else "the earlier runs' reports say where the items were dropped"
                out.update({"status": record.status, "note": f"run {spec.name}: {entry.status}", "exit_code": 1})
                break
        else:
            record.status = "succeeded"
            out["status"] = "succeeded"
    except BaseException as err:
        record.status, record.error = "failed", f"{type(err).__name__}: {err}"
        record.next = f"fix the cause, then `{ctx.resume_command()}`"
        if isinstance(err, Exception):  # one line for the console; the traceback to the run's log
            failing = record.runs.get(spec.name) if "spec" in locals() else None
            line = failure_line(ctx, failing.run_id if failing else root, err)
            record.error = line
            failure = RecipeRunError(line)
            failure.exit_code = getattr(root_cause(err), "exit_code", 1)  # a refused input file: 2
            raise failure from err
        raise
    finally:
        heartbeat.__exit__()
        record.finished_at = dt.datetime.now(dt.UTC).isoformat()
        record.write(the_lake)
        out["runs"] = {name: e.run_id for name, e in record.runs.items() if e.status != "skipped"}
        last = next((ctx.manifests[n] for n in reversed(list(ctx.manifests))), None)
        if last is not None:
            out["manifest"] = str(the_lake.manifest_path(last.run_id))
            out["report"] = str(the_lake.run_dir(last.run_id) / "report.html")
    for spec in recipe.runs:
        if spec.release is not None and (m := ctx.manifests.get(spec.name)) and m.outputs.get("release"):
            out["release"] = m.outputs["release"]
            out["released"] = m.status == "succeeded"
            out["exit_code"] = 0 if m.status == "succeeded" and out.get("exit_code", 0) == 0 else 1
    return out


# Ray Data appends its retry note to a failed stage's own exception ("Failed to apply UDF transform after 1/1
# attempts ... configure `ray.data.DataContext`..."): a hint the user cannot act on, kept out of the one line.
RAY_RETRY_NOTE = re.compile(r"\nFailed to [^\n]* after \d+/\d+ attempts \(total backoff [^)]*\)\..*\Z", re.S)


def failure_line(ctx: Context, run_id: str, err: BaseException) -> str:
    """`run X failed in stage S at ENDPOINT: CAUSE; traceback: LOG; resume: COMMAND` (one line), and the
    traceback written to runs/<run id>/logs/error.log. No Ray wrapper text and no Ray hint reach it."""
    import traceback

    from transforms.core.manifest import RunManifest

    log_dir = ctx.lake.run_dir(run_id) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / "error.log"
    with log_file.open("a", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(err)) + "\n")
    stage = None
    if (path := ctx.lake.manifest_path(run_id)).exists():
        try:
            stage = RunManifest.load(path).extras.get("failed_stage")
        except (OSError, ValueError):
            stage = None
    cause = root_cause(err)
    endpoint = getattr(cause, "endpoint", "") or ""
    what = " ".join(RAY_RETRY_NOTE.sub("", str(cause)).split()) or type(cause).__name__
    if isinstance(cause, RecipeRunError) and cause is err:  # already ours: keep its words
        return f"{what}; log: {log_file}; resume: {ctx.resume_command()}"
    where = (f" in stage {stage}" if stage else "") + (f" at {endpoint}" if endpoint else "")
    return f"run {run_id} failed{where}: {what}; traceback: {log_file}; resume: {ctx.resume_command()}"


def root_cause(err: BaseException) -> BaseException:
    """The exception that started it, under Ray's task wrappers and our re-raises; the first endpoint error."""
    seen: list[BaseException] = []
    todo: BaseException | None = err
    while todo is not None and todo not in seen:
        seen.append(todo)
        inner = getattr(todo, "cause", None)  # ray.exceptions.RayTaskError keeps the actor's exception here
        todo = inner if isinstance(inner, BaseException) else (todo.__cause__ or todo.__context__)
    from transforms.llm.base import EndpointError

    # the deepest: Ray's RayTaskError(EndpointError) is one too, but its text is a traceback and Ray's hint
    endpoint = next((e for e in reversed(seen) if isinstance(e, EndpointError)), None)
    if endpoint is not None:
        return endpoint
    ours = [e for e in seen if not type(e).__module__.startswith("ray")]
    return ours[-1] if ours else seen[-1]


def print_status(record: RecipeRecord, run_dir: Path | None = None) -> str:
    """`piqaforge show <recipe run>`: each run's id and status, and what to do next."""
    status = record.status
    if run_dir is not None:
        status = effective_status(record.status, record.driver, run_dir)
    lines = [f"recipe run {record.root}  recipe {record.recipe}  status {status}",
             f"started {record.started_at}  finished {record.finished_at or '-'}"]
    if record.error:
        lines.append(f"error {record.error}")
    width = max((len(n) for n in record.runs), default=4)
    for name, entry in record.runs.items():
        batch = f"  batch {entry.batch}" if entry.batch else ""
        shown = "interrupted" if status == "interrupted" and entry.status == "running" else entry.status
        lines.append(f"  {name:<{width}}  {shown:<16} {entry.run_id}{batch}")
    if status == "interrupted" and record.resume:
        lines.append(f"its driver is gone; continue with: {record.resume}")
    elif record.next:
        lines.append(f"next: {record.next}")
    return "\n".join(lines)
