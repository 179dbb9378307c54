"""`piqaforge submit`: the request it builds, and a real submission to a Ray head started here.

The real test starts `ray start --head --block` with the dashboard (the Jobs API) on free local
ports and its own short temp dir (so no other Ray user on this machine is redirected to it),
submits ko-piqa on a 60-row slice of the sample, streams the logs and checks the run's manifest.
It is killed by process group at the end: never `ray stop`, which would stop every Ray here.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from jobutil import FRONT_HALF_ONLY
from netutil import free_ports, kill_session

from jobs.submit import EXCLUDES, SubmitError, build_request, submit
from transforms.core.manifest import RunManifest
from transforms.core.runner import conservation_errors

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"


def test_request_runs_the_submitted_code_with_the_run_options():
    req = build_request("ko-piqa", ["--lake", "/mnt/lake", "--set", "langid.min_score=0.5"], run_id="ko-7")
    assert shlex.split(req["entrypoint"]) == ["python", "-m", "jobs.cli", "run", "ko-piqa", "--lake", "/mnt/lake",
                                              "--set", "langid.min_score=0.5", "--run-id", "ko-7"]
    env = req["runtime_env"]
    assert env["working_dir"] == str(ROOT)
    assert {".venv", ".cache", ".git", "lake/raw", "lake/staged", "lake/runs"} <= set(env["excludes"])
    assert "lake" not in env["excludes"]  # lake/samples holds the jobs' default inputs
    assert req["submission_id"].startswith("ko-7-")
    resumed = build_request("ko-piqa", ["--resume", "ko-7"])
    assert "--run-id" not in resumed["entrypoint"] and resumed["submission_id"].startswith("ko-7-")


class RecordingClient:
    """An in-memory stand-in for the Jobs API server, to test the CLI flow without a cluster."""

    def __init__(self):
        self.requests = []

    def submit_job(self, **kwargs):
        self.requests.append(kwargs)
        return "raysubmit_1"

    def get_job_status(self, job_id):
        return "SUCCEEDED"

    async def tail_job_logs(self, job_id):
        for chunk in ("line 1\n", "ko-piqa: done\n"):
            yield chunk


def test_submit_prints_the_job_id_and_streams_logs():
    out = io.StringIO()
    client = RecordingClient()
    job_id, status = submit("ko-piqa", ["--lake", "/mnt/lake"], address="http://head:8265", client=client, out=out)
    assert (job_id, status) == ("raysubmit_1", "SUCCEEDED")
    text = out.getvalue()
    assert "submitted raysubmit_1" in text and "ko-piqa: done" in text and text.rstrip().endswith("SUCCEEDED")
    assert client.requests[0]["entrypoint"].endswith("run ko-piqa --lake /mnt/lake")


class StartingHeadClient(RecordingClient):
    """A head whose job agent registers after `ready_after` refusals (Ray's 500 while it starts)."""

    def __init__(self, ready_after):
        super().__init__()
        self.ready_after, self.refused = ready_after, 0

    def submit_job(self, **kwargs):
        if self.refused < self.ready_after:
            self.refused += 1
            raise RuntimeError("Request failed with status code 500: No available agent to submit job, "
                               "please try again later..")
        return super().submit_job(**kwargs)


def test_a_head_still_starting_is_asked_again_until_its_agent_answers(monkeypatch):
    monkeypatch.setattr("jobs.submit.time.sleep", lambda s: None)
    out = io.StringIO()
    client = StartingHeadClient(ready_after=3)
    job_id, status = submit("ko-piqa", [], address="http://head:8265", client=client, out=out)
    assert (job_id, status, client.refused, len(client.requests)) == ("raysubmit_1", "SUCCEEDED", 3, 1)
    assert out.getvalue().count("no job agent yet") == 1


def test_a_head_whose_agent_never_answers_is_one_line_naming_the_address(monkeypatch):
    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr("jobs.submit.time.monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("jobs.submit.time.sleep", lambda s: None)
    with pytest.raises(SubmitError) as err:
        submit("ko-piqa", [], address="http://head:8265", client=StartingHeadClient(ready_after=10**6),
               out=io.StringIO())
    assert "http://head:8265" in str(err.value) and "\n" not in str(err.value)


def test_another_refusal_is_not_asked_again():
    class Refusing(RecordingClient):
        def submit_job(self, **kwargs):
            raise RuntimeError("Request failed with status code 400: bad entrypoint")

    with pytest.raises(RuntimeError, match="bad entrypoint"):
        submit("ko-piqa", [], address="http://head:8265", client=Refusing(), out=io.StringIO())


def _start_head(temp: str) -> tuple[subprocess.Popen, str, int]:
    gcs, dash, client, agent_http, agent_grpc, metrics, env_agent, nm, om = free_ports(9)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    env["RAY_TMPDIR"] = temp
    # as if the venv were activated before `ray start`: the job's `python` is the project's
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    cmd = [str(ROOT / ".venv" / "bin" / "ray"), "start", "--head", "--block", f"--temp-dir={temp}",
           "--node-ip-address=127.0.0.1", f"--port={gcs}", "--include-dashboard=true",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
           f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={env_agent}",
           f"--node-manager-port={nm}", f"--object-manager-port={om}", "--num-cpus=2",
           "--object-store-memory=500000000", "--disable-usage-stats"]
    proc = subprocess.Popen(cmd, env=env, cwd=temp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    return proc, f"http://127.0.0.1:{dash}", agent_http


def _ready(proc: subprocess.Popen, address: str, agent_http: int, wait_s: float = 180) -> str | None:
    """None once the head answers the Jobs API and its job agent listens, else why not (a head whose agent failed
    to start, a port taken between free_ports and `ray start`, exits: `--block` follows its processes)."""
    # asked from a fresh process, as `piqaforge submit` asks: Ray reads RAY_AUTH_MODE once per process, and in a
    # pytest process where an earlier test used Ray without token auth the in-process client sends no token
    probe = ("import socket, sys; from ray.job_submission import JobSubmissionClient; "
             "JobSubmissionClient(sys.argv[1]).list_jobs(); socket.create_connection(('127.0.0.1', int(sys.argv[2])), "
             "timeout=2).close()")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    deadline = time.time() + wait_s
    why = "the head exited"
    while time.time() < deadline and proc.poll() is None:
        out = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", probe, address, str(agent_http)],
                             env=env, capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            return None
        why = (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
        time.sleep(2)
    return f"{why} (head exit code {proc.poll()})"


def jobs_client(address: str):
    """A Jobs API client for the `ray_head` fixture's head that sends the head's token itself: Ray reads
    RAY_AUTH_MODE once per process, so in a pytest process where an earlier test used Ray without token auth its own
    client sends none ("Missing authentication token") whatever the environment says now."""
    from ray.job_submission import JobSubmissionClient

    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    return JobSubmissionClient(address, headers={"Authorization": f"Bearer {path.read_text().strip()}"})


@pytest.fixture
def ray_head(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # head, client and job driver share ~/.ray/auth_token
    pytest.importorskip("aiohttp", reason="the Jobs API needs ray[default]: pip install -e .[cluster]")
    tries = []
    for _ in range(3):  # a head on ports another process took in the meantime dies: start it on others
        temp = tempfile.mkdtemp(prefix="rzs", dir="/tmp")  # short: Ray's socket paths have a length limit
        proc, address, agent_http = _start_head(temp)
        why = _ready(proc, address, agent_http)
        if why is None:
            break
        tries.append(why)
        kill_session(proc)
        shutil.rmtree(temp, ignore_errors=True)
    else:
        pytest.fail(f"a local Ray head did not come up with its job agent in three tries: {tries}")
    try:
        yield address
    finally:
        kill_session(proc)
        shutil.rmtree(temp, ignore_errors=True)  # ~1 GiB of session files and object-store spill per head


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.alone  # a whole Ray head beside another test's load can lose its job agent
@pytest.mark.timeout(1800)
def test_submit_to_a_real_ray_head(ray_head, tmp_path):
    small = tmp_path / "ko_small.jsonl"
    small.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:60]), encoding="utf-8")
    lake = tmp_path / "lake"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "piqaforge"), "submit", "ko-piqa", "--address", ray_head,
                             "--lake", str(lake), "--input", str(small), "--run-id", "sub-1", *FRONT_HALF_ONLY],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "submitted sub-1-" in out and "ko-piqa: done" in out and "SUCCEEDED" in out
    manifest = RunManifest.load(lake / "runs" / "sub-1-crawl" / "manifest.json")
    assert manifest.status == "succeeded" and manifest.stages[0].rows_created == 60
    assert not conservation_errors(manifest)
    # the driver ran from the uploaded working_dir, not from this checkout
    assert "/runtime_resources/" in out or "working_dir" in out or manifest.code_version


def test_the_working_dir_package_holds_the_code_and_samples_only(tmp_path):
    # the zip Ray would upload, built by Ray's own packager with our excludes (submit turns off
    # Ray's .gitignore reading, which mishandles `!lake/samples/`)
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    target = tmp_path / "pkg.zip"
    create_package(str(ROOT), target, include_gitignore=False, excludes=list(EXCLUDES))
    names = zipfile.ZipFile(target).namelist()
    assert "jobs/cli.py" in names and "transforms/core/runner.py" in names
    assert "lake/samples/ko_crawl_sample.jsonl" in names
    assert not [n for n in names if n.startswith((".venv", ".git/", ".cache", "lake/runs", "lake/staged"))]
    assert target.stat().st_size < 50 * 2**20


def test_a_recipe_file_outside_the_repository_travels_with_the_job(tmp_path, monkeypatch):
    """A team's own recipe file is sent in the job's environment and run from there by the driver."""
    import base64

    from jobs.submit import RECIPE_FROM_ENV, RECIPE_TEXT_VAR

    mine = tmp_path / "vi-piqa.yaml"
    mine.write_text((ROOT / "jobs" / "recipes" / "zh-piqa.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    req = build_request(str(mine), ["--lake", "/mnt/lake"], run_id="vi-1")
    assert shlex.split(req["entrypoint"])[4] == RECIPE_FROM_ENV
    assert base64.b64decode(req["runtime_env"]["env_vars"][RECIPE_TEXT_VAR]) == mine.read_bytes()
    inside = build_request(str(ROOT / "jobs" / "recipes" / "zh-piqa.yaml"), [], run_id="zh-1")
    assert shlex.split(inside["entrypoint"])[4] == "jobs/recipes/zh-piqa.yaml"  # its path in the working dir
    # the driver's side: the recipe comes out of the environment and is checked like any file
    from jobs.cli import main

    monkeypatch.setenv(RECIPE_TEXT_VAR, base64.b64encode(b"recipe: broken\n").decode())
    assert main(["run", RECIPE_FROM_ENV, "--lake", str(tmp_path / "lake")]) == 2
