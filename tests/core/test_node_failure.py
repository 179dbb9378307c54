"""A lost node must not lose or duplicate rows.

Fast tier: the write path is idempotent (a retried write task rewrites the same files) and
orphans of a failed attempt are removed. Slow tier (`pytest -m slow tests/core/test_node_failure.py`):
a three-node Ray cluster on this machine (a head and two worker raylets, each its own process
group, own temp dir and ports so no other Ray user here is affected); a worker node is SIGKILLed
while the ko-piqa front half runs on it (in a row-wise stage, and as a global stage starts), or
while the LLM ensemble stage runs (the node of its actor, or the node that ran the finished
prefilter's actor); the job must finish with exactly a clean run's rows (and, for the LLM, the
clean run's verdicts, no question asked twice). About 2 + 6 min.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pytest
from jobutil import (
    CRAWL,
    FRONT_HALF_ONLY,
    SHRUNK_BACK_HALF,
    SHRUNK_CLEAN_RUN,
    answer_files,
    assert_same_rows,
    log_tail,
    popen_logged,
)
from netutil import free_ports, kill_session

from transforms.core import columns as C
from transforms.core.lake import count_rows, read_table
from transforms.core.ledger import PartitionLedger
from transforms.core.manifest import RunManifest
from transforms.core.planning import PART, ROW
from transforms.core.runner import conservation_errors
from transforms.core.writing import BlockWriter
from transforms.core.writing import file_name as _file_name

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"


def _block(part: int, start: int, n: int) -> pa.Table:
    status = [C.KEPT if i % 3 else C.REJECTED for i in range(start, start + n)]
    return pa.table({C.ID: [f"r{i}" for i in range(start, start + n)], C.TEXT: ["t"] * n,
                     C.DROP_REASON: [None if s == C.KEPT else "x" for s in status], C.STATUS: status,
                     PART: pa.array([part] * n, pa.int32()), ROW: pa.array(range(start, start + n), pa.int64())})


def test_a_retried_write_task_does_not_duplicate_rows(tmp_path):
    kept, rejected = tmp_path / "kept", tmp_path / "rejected"
    ledger = PartitionLedger(kept, rejected, "fp", "plan", resume=False)
    writer = BlockWriter(kept, rejected, row_group_rows=100)
    block = _block(0, 0, 90)
    first = writer(block).to_pylist()
    again = writer(block).to_pylist()  # the same task, run again after its node died
    assert first == again
    assert count_rows(kept) == 60 and count_rows(rejected) == 30
    assert C.STATUS not in read_table(kept).schema.names and PART not in read_table(kept).schema.names
    # a partition whose files tile its rows is recognised as done without the driver's report
    writer(_block(0, 90, 10))
    ledger = PartitionLedger(kept, rejected, "fp", "plan", resume=True, expected={0: 100})
    assert ledger.done[0]["rows"] == 100


def test_orphans_and_half_finished_partitions_are_removed(tmp_path):
    kept, rejected = tmp_path / "kept", tmp_path / "rejected"
    ledger = PartitionLedger(kept, rejected, "fp", "plan", resume=False)
    writer = BlockWriter(kept, rejected, row_group_rows=100)
    done = writer(_block(0, 0, 50)).to_pylist()[0]
    ledger.mark_done(0, 50, [done["kept_file"]], [done["rejected_file"]])
    writer(_block(1, 0, 20))  # partition 1 (40 rows) was cut short: 20 of its rows are on disk
    orphan = writer(_block(0, 10, 5)).to_pylist()[0]  # a stray attempt overlapping partition 0
    (kept / ".tmp-p00000-half-written").write_bytes(b"PAR1")
    resumed = PartitionLedger(kept, rejected, "fp", "plan", resume=True, expected={0: 50, 1: 40})
    assert set(resumed.done) == {0}
    assert not (kept / orphan["kept_file"]).exists()
    assert count_rows(kept) + count_rows(rejected) == 50
    assert not list(kept.glob(".tmp-*"))
    # a changed fingerprint (config) wipes the stage
    PartitionLedger(kept, rejected, "other", "plan", resume=True, expected={0: 50})
    assert count_rows(kept) + count_rows(rejected) == 0


def test_a_global_stages_file_is_named_by_its_rows_not_by_their_memory_layout():
    """A retried task of a global stage must rewrite the same file name, however its input was chunked."""
    rows = pa.table({C.ID: [f"r{i}" for i in range(100)], C.TEXT: [f"질문 {i}" for i in range(100)]})
    fresh = pa.table({C.ID: [f"r{i}" for i in range(10, 30)], C.TEXT: [f"질문 {i}" for i in range(10, 30)]})
    chunked = pa.concat_tables([rows.slice(10, 5), rows.slice(15, 15)])
    names = {_file_name(0, t, 20, 0) for t in (rows.slice(10, 20), fresh, chunked)}
    assert len(names) == 1
    assert _file_name(0, rows.slice(11, 20), 20, 0) not in names


# -- slow tier: kill a worker node --------------------------------------------------------------
# The head's GCS declares a silent node dead after ~5 s instead of Ray's default ~15-30 s, so a killed
# node is noticed while the stage after its actor's stage has just begun (see VICTIMS).
FAST_NODE_DEATH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "3000",
                   "RAY_health_check_failure_threshold": "4"}


def _start_node(args: list[str], temp: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    nm, om, env_agent, metrics, agent_http, agent_grpc = free_ports(6)
    cmd = [str(ROOT / ".venv" / "bin" / "ray"), "start", "--block", "--node-ip-address=127.0.0.1",
           f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--runtime-env-agent-port={env_agent}",
           f"--metrics-export-port={metrics}", f"--dashboard-agent-listen-port={agent_http}",
           f"--dashboard-agent-grpc-port={agent_grpc}", "--object-store-memory=300000000",
           "--disable-usage-stats", *args]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=temp, RAY_AUTH_MODE="token", **(extra_env or {}))  # auth: ~/.ray/auth_token
    return subprocess.Popen(cmd, env=env, cwd=temp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


@pytest.fixture
def three_nodes(request):
    """A head and two worker raylets, 1 CPU each: (address, worker processes, Ray's temp dir with its logs).

    `indirect` parametrisation gives the workers custom resources.
    """
    worker_resources = json.dumps(getattr(request, "param", {}))
    temp = tempfile.mkdtemp(prefix="rzn", dir="/tmp")
    gcs, client = free_ports(2)
    head = _start_node(["--head", f"--port={gcs}", f"--temp-dir={temp}", "--include-dashboard=false",
                        f"--ray-client-server-port={client}", "--num-cpus=1"], temp, FAST_NODE_DEATH)
    address = f"127.0.0.1:{gcs}"
    nodes, workers = [head], []
    try:
        _wait_for_nodes(address, 1)
        # one at a time, retried: on a loaded machine a raylet can miss Ray's fixed 30 s start-up window
        for n in (2, 3):
            for _attempt in range(3):
                worker = _start_node([f"--address={address}", "--num-cpus=1", f"--resources={worker_resources}"], temp)
                nodes.append(worker)
                if _wait_for_nodes(address, n, stop_if=worker):
                    workers.append(worker)
                    break
                kill_session(worker)
            else:
                raise TimeoutError(f"could not start worker node {n - 1}")
        yield address, workers, temp
    finally:
        for proc in reversed(nodes):
            kill_session(proc)
        shutil.rmtree(temp, ignore_errors=True)  # each cluster's session files and logs: ~1 GiB


def _wait_for_nodes(address: str, n: int, timeout: float = 300, stop_if: subprocess.Popen | None = None) -> bool:
    code = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
            "print(sum(1 for x in ray.nodes() if x['Alive']))")
    deadline = time.time() + timeout
    env = dict(os.environ, RAY_AUTH_MODE="token")
    while time.time() < deadline:
        out = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", code, address],
                             capture_output=True, text=True, timeout=120, env=env)
        if out.stdout.strip().isdigit() and int(out.stdout.strip()) >= n:
            return True
        if stop_if is not None and stop_if.poll() is not None:  # `ray start` gave up
            return False
        time.sleep(2)
    if stop_if is not None:
        return False
    raise TimeoutError(f"the cluster at {address} did not reach {n} nodes")


def _job(lake: Path, run_id: str, address: str | None, args: list[str] = FRONT_HALF_ONLY) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PIQAFORGE_PROGRESS="0", PIQAFORGE_PARTITION_ROWS="300",
               PIQAFORGE_OBJECT_STORE_BYTES=str(512 * 2**20))
    if address:
        env.update(RAY_ADDRESS=address, RAY_AUTH_MODE="token")
    cmd = [str(ROOT / ".venv" / "bin" / "piqaforge"), "run", "ko-piqa", "--lake", str(lake), "--run-id", run_id,
           "--set", f"input.paths=[{SAMPLE}]", *args]
    return popen_logged(cmd, _log(lake, run_id), cwd=ROOT, env=env, start_new_session=True)


def _log(lake: Path, run_id: str) -> Path:
    return lake.parent / f"{run_id}.log"


def _outputs(lake: Path, run_id: str) -> tuple[pa.Table, pa.Table, RunManifest]:
    manifest = RunManifest.load(lake / "runs" / f"{run_id}{CRAWL}" / "manifest.json")

    def load(path: str) -> pa.Table:
        t = read_table(Path(path))
        return t.select(sorted(t.schema.names)).sort_by(C.ID)

    return load(manifest.outputs["curated"]), load(manifest.outputs["rejected"]), manifest


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> tuple[pa.Table, pa.Table, RunManifest]:
    """The same job on a local Ray instance, never disturbed: what every killed run must equal."""
    lake = tmp_path_factory.mktemp("clean") / "lake"
    clean = _job(lake, "clean", None)
    assert clean.wait(timeout=1800) == 0, log_tail(_log(lake, "clean"))
    return _outputs(lake, "clean")


# Where the node dies: in a row-wise stage (its first partition is written), or just as the first
# global stage (exact dedup) opens its input. The second is where Ray Data's Parquet reader used to
# place a footer-reader actor on the dead node and fail the job (partitions.read_partitions).
KILL_WHEN = {"row-wise stage": "*/.parts/p*.json", "global stage starts": "*_exact_dedup/.parts/_PLAN.json"}


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.ray
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("kill_when", list(KILL_WHEN))
@pytest.mark.ci
def test_killing_a_worker_node_loses_and_duplicates_nothing(three_nodes, clean_run, kill_when, tmp_path):
    address, workers, _ = three_nodes
    lake = tmp_path / "lake"
    job = _job(lake, "nodes", address)
    staged = lake / "staged" / "ko-piqa" / f"nodes{CRAWL}"
    deadline = time.time() + 600
    try:
        while time.time() < deadline and job.poll() is None and not list(staged.glob(KILL_WHEN[kill_when])):
            time.sleep(0.01)
        assert job.poll() is None, "the job ended before the node could be killed"
        kill_session(workers[0])  # the raylet, its object store and every worker process on that node
        killed_at = time.time()
        assert job.wait(timeout=1800) == 0, log_tail(_log(lake, "nodes"))
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)

    kept, rejected, manifest = _outputs(lake, "nodes")
    kept_clean, rejected_clean, clean_manifest = clean_run
    assert manifest.status == "succeeded" and not conservation_errors(manifest)
    assert len(set(kept.column(C.ID).to_pylist())) == kept.num_rows
    assert kept.num_rows + rejected.num_rows == 4600
    assert kept.equals(kept_clean) and rejected.equals(rejected_clean)
    assert [(s.name, s.rows_kept, s.rows_dropped) for s in manifest.stages] == \
        [(s.name, s.rows_kept, s.rows_dropped) for s in clean_manifest.stages]
    print(f"\nthe job ran {time.time() - killed_at:.0f}s after the worker was killed; stages "
          f"{[(s.name, s.seconds) for s in manifest.stages]}")


# -- slow tier: kill the node that runs the LLM ensemble -------------------------------------------
# The back half shrunk as in test_resume.py (SHRUNK_BACK_HALF). The ensemble and the prefilter's scoring
# actor ask for a custom resource only the worker nodes advertise, as the vLLM stage asks for `env_vllm`
# on the cluster, so their actors run on worker nodes that the test can kill.
ON_LLM_WORKERS = ["--set", "runs.crawl.stages.ensemble.resources.custom_resources={llm_worker: 1}",
                  "--set", "runs.crawl.stages.distilled_prefilter.resources.custom_resources={llm_worker: 1}"]
# The node that dies: the one the ensemble's actor runs on, once it has cached answers; or, as the
# ensemble stage starts, the one that ran the prefilter's scoring actor, the stage before. For a while
# after a stage ends, Ray Data still holds its blocks and their lineage, so Ray restarts that actor to
# rebuild the blocks lost with the node. In CI the restarted actor held the last free CPU and the next
# stage waited for it forever; now it exits at once (Stage.exit_actor_if_finished).
VICTIMS = {"ensemble's node": "_StageActor", "node of the finished prefilter": "_ScoreActor"}
ZOMBIE_EXITS = "finished before this actor (re)started"


def _answers(lake: Path, run_id: str) -> dict[str, str]:
    """classifier/row -> option, over every answer chunk the run cached; a repeated question fails."""
    out: dict[str, str] = {}
    for f in answer_files(lake, f"{run_id}{CRAWL}"):
        for r in read_table(f).select([C.ID, "option"]).to_pylist():
            key = f"{f.parent.name}/{r[C.ID]}"
            assert key not in out, f"{key} was asked twice"
            out[key] = r["option"]
    return out


def _actor_session(name: str) -> int | None:
    """The session id (= its `ray start` pid, see _start_node) of the process running actor `name`."""
    ps = subprocess.run(["ps", "-eo", "sid=,args="], capture_output=True, text=True, check=True).stdout
    for line in ps.splitlines():
        sid, _, args = line.strip().partition(" ")
        if args.startswith("ray::") and name in args:
            return int(sid)
    return None


@pytest.fixture(scope="module")
def llm_clean_run(shrunk_clean_lake) -> tuple[Path, tuple[pa.Table, pa.Table, RunManifest]]:
    """The shrunk back half on a local Ray instance, never disturbed: the session's clean run (tests/conftest.py),
    which test_resume.py compares with too (the partitioning differs, 200 rows against 300 here: the rows do not)."""
    return shrunk_clean_lake, _outputs(shrunk_clean_lake, SHRUNK_CLEAN_RUN)


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.ray
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("three_nodes", [{"llm_worker": 1}], indirect=True, ids=["llm-on-workers"])
@pytest.mark.parametrize("victim_of", list(VICTIMS))
def test_killing_a_node_while_the_llm_ensemble_answers_loses_and_reasks_nothing(three_nodes, llm_clean_run,
                                                                                victim_of):
    """A worker node dies while the ensemble stage runs (VICTIMS)."""
    address, workers, ray_temp = three_nodes
    # in the clean run's lake (its caches warm, as for a team's second run), under a run id of its own
    lake, run_id = llm_clean_run[0], f"llm-{list(VICTIMS).index(victim_of)}"
    job = _job(lake, run_id, address, [*SHRUNK_BACK_HALF, *ON_LLM_WORKERS])
    staged = lake / "staged" / "ko-piqa" / f"{run_id}{CRAWL}"
    deadline = time.time() + 1500
    victim, answered, scorer_sid = None, 0, None
    try:
        while time.time() < deadline and job.poll() is None and not list(staged.glob("*_ensemble/.parts/_PLAN.json")):
            scorer_sid = _actor_session("_ScoreActor") or scorer_sid  # where the prefilter scores rows
            time.sleep(0.05)
        started_with = len(answer_files(lake, f"{run_id}{CRAWL}"))  # the prefilter's labelled sample
        if VICTIMS[victim_of] == "_ScoreActor":
            victim = next((w for w in workers if w.pid == scorer_sid), None)
        # wait until the ensemble stage itself has cached an answer chunk, then kill the node its actor is on
        while time.time() < deadline and job.poll() is None and victim is None:
            if len(answer_files(lake, f"{run_id}{CRAWL}")) > started_with:
                victim = next((w for w in workers if w.pid == _actor_session("_StageActor")), None)
            time.sleep(0.05)
        assert job.poll() is None, "the job ended before the node could be killed"
        assert victim is not None, f"the {VICTIMS[victim_of]} actor was not seen on a worker node"
        answered = len(answer_files(lake, f"{run_id}{CRAWL}")) - started_with
        kill_session(victim)
        # a clean run takes ~2 min; a stage waiting for CPUs that never free up fails here, not at the timeout
        assert job.wait(timeout=900) == 0, log_tail(_log(lake, run_id))
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)

    clean_lake, (kept_clean, rejected_clean, clean_manifest) = llm_clean_run
    kept, rejected, manifest = _outputs(lake, run_id)
    assert manifest.status == "succeeded" and not conservation_errors(manifest)
    assert len(set(kept.column(C.ID).to_pylist())) == kept.num_rows
    assert kept.num_rows + rejected.num_rows == 4600
    assert_same_rows(kept, kept_clean)
    assert_same_rows(rejected, rejected_clean)
    assert [(s.name, s.rows_kept, s.rows_dropped) for s in manifest.stages] == \
        [(s.name, s.rows_kept, s.rows_dropped) for s in clean_manifest.stages]
    ensemble = next(s for s in manifest.stages if s.name == "ensemble")
    assert ensemble.rows_in > 0
    # every classifier answered every row it was asked about once, and the same answer as in the clean run
    assert _answers(lake, run_id) == _answers(clean_lake, SHRUNK_CLEAN_RUN)
    restarts = _lineage_restarts(ray_temp)
    log_text = _log(lake, run_id).read_text(errors="replace")
    exits = len(set(re.findall(rf"pid=(\d+)\).*{re.escape(ZOMBIE_EXITS)}", log_text)))
    # Ray may also fail to rebuild the restarted actor's own constructor arguments (they lived on the dead
    # node): it then dies in its creation task before our exit runs. Either way it holds no CPU.
    died = len(set(re.findall(rf"{re.escape(VICTIMS[victim_of])}\)\)\.__init__\(\).{{0,40}}\(pid=(\d+)", log_text)))
    if VICTIMS[victim_of] == "_ScoreActor" and restarts:  # Ray brought the finished stage's actor back: it left
        assert exits or died, log_tail(_log(lake, run_id))
    print(f"\nkilled the {victim_of} after {answered} answer chunks of the ensemble stage; {ensemble.rows_in} rows "
          f"judged; Ray restarted {restarts} actor(s) to rebuild lost blocks, {exits} of a finished stage left, "
          f"{died} died rebuilding their arguments; "
          f"stages {[(s.name, s.seconds) for s in manifest.stages]}")


def _lineage_restarts(ray_temp: str) -> int:
    """How many times the GCS restarted an actor to rebuild lost blocks (its log, one session per cluster)."""
    return sum(f.read_text(errors="replace").count("HandleRestartActorForLineageReconstruction")
               for f in Path(ray_temp).glob("session_2*/logs/gcs_server.out"))
