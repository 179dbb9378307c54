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
            ".ruff_cache", "*.egg-info", "lake/raw", "lake/staged", "lake/curated", "lake/release",
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

        client = JobSubmissionClient(address)
    # EXCLUDES is the complete list: Ray's .gitignore reading drops `!lake/samples/` (a negated
    # directory), which would leave the jobs' default inputs behind.
    os.environ.setdefault("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")
    if names or secret_sets:
        env = {n: os.environ[n] for n in names}
        pointer = upload_secrets(client, {"env": env, "set": secret_sets})
        request_options["env_vars"] = {**request_options.get("env_vars", {}), **pointer}
        print(f"piqaforge: forwarding secret(s) {names} and {len(secret_sets)} --set item(s) holding one "
              "outside Ray's job record (docs/secrets.md)", file=out, flush=True)
    request = build_request(job, run_args, **request_options)
    job_id = client.submit_job(**request)
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


def _status(client: JobsClient, job_id: str) -> str:
    status = client.get_job_status(job_id)
    return str(getattr(status, "value", status))
