"""`piqaforge submit JOB --address ADDR [run options]`: run a job on a Ray cluster via the Jobs API.

The repo is uploaded as the job's working_dir (without the venv, the lake's data zones and
caches), and the entrypoint is the same `run` command you would type locally, executed with
`python -m jobs.cli` so the cluster runs the code you submitted, not whatever piqaforge happens to
be installed on the head. Under the Jobs API the driver finds RAY_ADDRESS set and joins the
cluster (transforms/core/runner.init_ray). The client is injectable for offline tests.

Equivalent plain Ray command (docs/cluster.md):

    ray job submit --address http://HEAD:8265 --working-dir . -- \\
        python -m jobs.cli run ko-piqa --lake /mnt/lake --run-id ko-1
"""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from jobs.forwarding import (  # noqa: F401 (re-exported: tests and the driver import them from here)
    SECRETS_PAD_VAR,
    SECRETS_URI_VAR,
    receive_forwarded_secrets,
    seal,
    unseal,
    upload_secrets,
)
from transforms.core.secrets import literal_secrets, scrub_text

REPO = Path(__file__).resolve().parents[1]
# Never uploaded: environments, caches, and the lake's data zones (lake/samples stays: jobs' defaults use it).
EXCLUDES = [".venv", ".venv-*", ".rehearsal", ".cache", ".git", "**/__pycache__", ".pytest_cache", ".mypy_cache",
            ".ruff_cache", ".import_linter_cache", "*.egg-info", "lake/raw", "lake/staged", "lake/curated", "lake/release",
            "lake/rejected", "lake/runs", "lake/bench", "benchmarks/results", "build", "*.pyc"]
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
RECIPE_TEXT_VAR = "PIQAFORGE_RECIPE_TEXT"  # a recipe file from outside the repository, base64
RECIPE_FROM_ENV = "@recipe"
class JobsClient(Protocol):
    """The part of ray.job_submission.JobSubmissionClient we use."""

    def submit_job(self, **kwargs: Any) -> str: ...

    def get_job_status(self, job_id: str) -> Any: ...

    def tail_job_logs(self, job_id: str) -> Any: ...


def build_request(job: str, run_args: list[str], *, run_id: str | None = None,
                  env_vars: dict[str, str] | None = None, working_dir: Path = REPO,
                  entrypoint_num_cpus: float | None = None) -> dict[str, Any]:
    """The keyword arguments of JobSubmissionClient.submit_job for `piqaforge run JOB RUN_ARGS`.

    A team's recipe file outside the repository travels in the job's environment (RECIPE_TEXT_VAR) and the
    driver runs it from there (`run @recipe`); the files it names must be on the cluster's shared filesystem."""
    env_vars = dict(env_vars or {})
    path = Path(job)
    if job.endswith((".yaml", ".yml")) and path.exists() and not path.resolve().is_relative_to(working_dir.resolve()):
        env_vars[RECIPE_TEXT_VAR] = base64.b64encode(path.read_bytes()).decode()
        job = RECIPE_FROM_ENV
    elif job.endswith((".yaml", ".yml")) and path.exists():  # inside the repository: its path there
        job = str(path.resolve().relative_to(working_dir.resolve()))
    args = ["python", "-m", "jobs.cli", "run", job, *run_args]
    if run_id and "--run-id" not in run_args and "--resume" not in run_args:
        args += ["--run-id", run_id]
    runtime_env: dict[str, Any] = {"working_dir": str(working_dir), "excludes": list(EXCLUDES)}
    env = {"PIQAFORGE_PROGRESS": "0", **env_vars}
    runtime_env["env_vars"] = env
    request: dict[str, Any] = {"entrypoint": shlex.join(args), "runtime_env": runtime_env,
                               "metadata": {"piqaforge_job": job}}
    # The submission id starts with the run id, so `ray job logs <id>` and the lake are easy to match.
    submission_id = run_id or _flag(run_args, "--run-id") or _flag(run_args, "--resume")
    if submission_id:
        request["submission_id"] = f"{submission_id}-{int(time.time())}"
    if entrypoint_num_cpus is not None:
        request["entrypoint_num_cpus"] = entrypoint_num_cpus
    return request


def _flag(args: list[str], name: str) -> str | None:
    for i, token in enumerate(args):
        if token == name and i + 1 < len(args):
            return args[i + 1]
        if token.startswith(name + "="):
            return token.split("=", 1)[1]
    return None


async def _tail(client: JobsClient, job_id: str, out: TextIO) -> None:
    async for lines in client.tail_job_logs(job_id):
        out.write(lines)
        out.flush()


def split_secret_sets(run_args: list[str]) -> tuple[list[str], list[str]]:
    """(run_args without the `--set` items that hold a literal secret, those items)."""
    from jobs.config import parse_set, set_dotted

    kept: list[str] = []
    moved: list[str] = []
    it = iter(run_args)
    for token in it:
        item = next(it, "") if token == "--set" else token[len("--set="):] if token.startswith("--set=") else None
        if item is None:
            kept.append(token)
            continue
        key, value = parse_set(item)
        nested: dict[str, Any] = {}
        set_dotted(nested, key, value)
        if literal_secrets(nested):
            moved.append(item)
        else:
            kept += ["--set", item]
    return kept, moved


def submit(job: str, run_args: list[str], *, address: str, client: JobsClient | None = None,
           follow: bool = True, out: TextIO = sys.stdout, secret_names: list[str] | None = None,
           **request_options: Any) -> tuple[str, str]:
    """Submit, print the job id, stream the logs until the job ends; returns (job id, final status)."""
    run_args, secret_sets = split_secret_sets(run_args)
    names = list(secret_names or [])  # what the recipe or job names in `secrets:` (jobs/cli.py resolves them)
    if client is None:
        from transforms.core.deps import require

        require("ray.job_submission", "cluster", "piqaforge submit")
        require("aiohttp", "cluster", "piqaforge submit (the Ray Jobs API client)")
        from ray.job_submission import JobSubmissionClient

        try:
            client = JobSubmissionClient(address)
        except (ConnectionError, OSError, RuntimeError, ValueError) as err:  # nothing listens, or not a Ray head
            raise unreachable(address, err) from None
    # EXCLUDES is the complete list: Ray's .gitignore reading drops `!lake/samples/` (a negated
    # directory), which would leave the jobs' default inputs behind.
    os.environ.setdefault("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")
    if names or secret_sets:
        absent = [n for n in names if n not in os.environ]
        if absent:
            raise SubmitError(f"the job forwards secret(s) {', '.join(absent)}, not set here: set them in this shell "
                              "(docs/secrets.md)")
        env = {n: os.environ[n] for n in names}
        pointer = upload_secrets(client, {"env": env, "set": secret_sets})
        request_options["env_vars"] = {**request_options.get("env_vars", {}), **pointer}
        print(f"piqaforge: forwarding secret(s) {names} and {len(secret_sets)} --set item(s) holding one "
              "outside Ray's job record (docs/secrets.md)", file=out, flush=True)
    request = build_request(job, run_args, **request_options)
    job_id = _submit_job(client, request, address, out)
    print(f"piqaforge: submitted {job_id} to {address}", file=out, flush=True)
    print(f"piqaforge: entrypoint {scrub_text(request['entrypoint'])}", file=out, flush=True)
    if not follow:
        return job_id, str(_status(client, job_id))
    asyncio.run(_tail(client, job_id, out))
    status = _status(client, job_id)
    deadline = time.time() + 60  # the log stream can close a moment before the status settles
    while status not in TERMINAL and time.time() < deadline:
        time.sleep(0.5)
        status = _status(client, job_id)
    print(f"piqaforge: job {job_id} {status}", file=out, flush=True)
    return job_id, status


# A head that has just started answers 500 "No available agent to submit job, please try again later" until its
# dashboard agent registers (seconds on an idle head, longer on a loaded one): asked again, not failed.
AGENT_NOT_READY = "No available agent to submit job"
AGENT_WAIT_S = 120.0


def _submit_job(client: JobsClient, request: dict[str, Any], address: str, out: TextIO,
                wait_s: float = AGENT_WAIT_S, pause_s: float = 2.0) -> str:
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return client.submit_job(**request)
        except (ConnectionError, OSError) as err:  # the head went away between the check and the upload
            raise unreachable(address, err) from None
        except RuntimeError as err:
            if AGENT_NOT_READY not in str(err):
                raise
            if time.monotonic() >= deadline:
                raise SubmitError(f"the Ray head at {address} has no job agent after {wait_s:.0f} s ({AGENT_NOT_READY}): "
                                  "check `ray status` on the head and its dashboard_agent.log") from None
            if not told:
                print(f"piqaforge: the Ray head at {address} has no job agent yet (it is starting); "
                      f"asking again for up to {wait_s:.0f} s", file=out, flush=True)
                told = True
            time.sleep(pause_s)


def _status(client: JobsClient, job_id: str) -> str:
    status = client.get_job_status(job_id)
    return str(getattr(status, "value", status))


class SubmitError(RuntimeError):
    """A submission that could not reach the cluster: one line, the address and what to check."""


def unreachable(address: str, err: BaseException) -> SubmitError:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return SubmitError(f"cannot reach the Ray Jobs API at {address} ({reason[:160]}): check that the cluster's head "
                       "is up and that this is its dashboard's address (http://HEAD:8265: `ray status` on the head; "
                       "the dashboard port open to this machine), or run `piqaforge submit --dry-run` to check the "
                       "job without a cluster")


def upload_files(working_dir: Path = REPO, excludes: list[str] | None = None) -> list[tuple[str, int]]:
    """(path, bytes) of every file the job's working_dir upload holds: `working_dir` less `EXCLUDES`, matched as
    Ray matches them (gitwildmatch patterns relative to the working dir; Ray's .gitignore reading is off)."""
    try:  # the matcher Ray's packager uses (it vendors pathspec)
        from ray._private.thirdparty.pathspec import PathSpec
    except ImportError:
        from pathspec import PathSpec

    spec = PathSpec.from_lines("gitwildmatch", excludes if excludes is not None else EXCLUDES)
    out: list[tuple[str, int]] = []
    for folder, dirs, files in os.walk(working_dir):
        rel = Path(folder).relative_to(working_dir)
        dirs[:] = sorted(d for d in dirs if not spec.match_file(f"{(rel / d).as_posix()}/"))
        for name in sorted(files):
            path = (rel / name).as_posix()
            full = Path(folder) / name
            if not spec.match_file(path) and full.is_file():
                out.append((path, full.stat().st_size))
    return out


def upload_summary(files: list[tuple[str, int]], every: bool = False) -> list[str]:
    """The upload's size and its files: per top-level entry, its files and bytes (`every`: each file)."""
    by_top: dict[str, list[int]] = {}
    for path, size in files:
        top = path.split("/", 1)[0] + ("/" if "/" in path else "")
        by_top.setdefault(top, []).append(size)
    lines = [f"upload: {len(files):,} files, {sum(s for _, s in files) / 2**20:,.1f} MiB (the working_dir "
             f"{REPO.name}/ less {len(EXCLUDES)} excluded patterns: {', '.join(EXCLUDES)})"]
    for top, sizes in sorted(by_top.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"  {top:<28} {len(sizes):>6,} files {sum(sizes) / 2**10:>12,.1f} KiB")
    if every:
        lines += [f"    {path} ({size:,} B)" for path, size in files]
    return lines


def local_rows(paths: list[str]) -> int | None:
    """The rows of a recipe's input when every file is a local JSONL file (lines counted), else None."""
    from transforms.io.crawl import list_files

    try:
        files = list_files(paths)
    except FileNotFoundError:
        return None
    if not files or any(f.suffix not in (".jsonl", ".ndjson") for f in files):
        return None
    total = 0
    for f in files:
        with f.open("rb") as fh:
            total += sum(chunk.count(b"\n") for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""))
    return total


def dry_run(job: str, run_args: list[str], *, address: str | None, rows: int | None = None,
            cluster: Path | None = None, lake: Path | None = None, out: TextIO | None = None,
            every_file: bool = False) -> int:
    """What `submit` would send, checked here, with nothing started and no connection made: the recipe loaded and
    its stages built (the checks a submit makes before it uploads), the secrets it forwards present, the upload's
    size and files, each stage's node type in the cluster config, and the plan's table. 0: it would be sent;
    1: a stage no node type holds, or a secret missing here."""
    from jobs.errors import UserError
    from jobs.overrides import forwarded_secret_names, recipe_overrides
    from jobs.parser import build_parser
    from jobs.plan import MIN_RATE_ROWS, ROOT, node_types, plan, planned_stages, recipe_inputs
    from jobs.plan_cli import render
    from transforms.core.envs import set_cpu_pin
    from transforms.flow.demand import demand, missing_on
    from transforms.flow.recipe import is_recipe, load_recipe

    out = out or sys.stdout
    if not is_recipe(job):
        raise UserError(f"submit --dry-run checks recipes; {job!r} is a tool job (run it with `submit` itself)")
    names = forwarded_secret_names(job, run_args)  # the recipe checked, as a real submit checks it first
    args, extra = build_parser().parse_known_args(["run", job, *run_args])
    cluster = cluster or ROOT / "cluster.yaml"
    types = node_types(cluster)
    set_cpu_pin(True)  # the cluster has env_cpu: stages that want no GPU ask for it (as on the cluster)
    try:
        recipe = load_recipe(job, recipe_overrides(args, extra), config_file=args.config)
        stages, unread = planned_stages(recipe)
        placed = [(where, name, demand(stage)) for where, name, stage in stages]
    finally:
        set_cpu_pin(False)
    request = build_request(job, run_args)
    problems = 0
    print(f"piqaforge: dry run of `submit {job}`: nothing is uploaded or started, no address is contacted", file=out)
    print(f"would submit to {address or '(no --address given)'}: {scrub_text(request['entrypoint'])}", file=out)
    print(f"recipe: {recipe.recipe} ({recipe.path or job}) checked: {len(stages)} stages built"
          + (f"; {'; '.join(unread)} here: read on the cluster" if unread else ""), file=out)
    missing = [n for n in names if n not in os.environ]
    if names:
        print(f"secrets forwarded: {', '.join(names)}" + (f"; missing here: {', '.join(missing)}" if missing else ""),
              file=out)
    problems += len(missing)
    for line in upload_summary(upload_files(), every_file):
        print(line, file=out)
    print(f"node types ({cluster}): the stage's demand, and the node types whose resources hold it", file=out)
    for where, name, want in placed:
        fits = [n for n, t in types.items() if not missing_on(want, t["resources"])]
        if fits:
            print(f"  {where:<44} {name:<22} {want.describe():<48} -> {', '.join(fits)}", file=out)
        else:
            problems += 1
            lacks = "; ".join(f"{n}: {', '.join(missing_on(want, t['resources']))}" for n, t in types.items())
            print(f"  {where:<44} {name:<22} {want.describe():<48} -> NO node type holds it ({lacks})", file=out)
    planned_rows = rows if rows is not None else None if unread else local_rows(recipe_inputs(stages))
    if planned_rows is None:
        print("plan: give --rows N (the input's rows) for the plan's table", file=out)
    else:
        plans = plan(recipe, planned_rows, lake or Path(args.lake or "lake"), cluster)
        print(render(plans, recipe.recipe, planned_rows, 0.7, False, MIN_RATE_ROWS), file=out)
    print(f"piqaforge: dry run {'found ' + str(problems) + ' problem(s)' if problems else 'passed'}", file=out)
    return 1 if problems else 0
