"""The cluster rehearsal: cluster.yaml's Ray cluster on this one machine, every recipe submitted to it.

    bash scripts/cluster_rehearsal.sh [--recipes ko-piqa,zh-piqa] [--keep]

1. One virtualenv per node set-up, built only from what the cluster runs on that node type
   (jobs/rehearsal_envs.py: the image's pip lines, then cluster/setup_node.sh unchanged; CUDA-only
   packages swapped for their CPU builds, each swap printed).
2. A head with `CPU: 0` (the driver, GCS and dashboard only) and one raylet per worker type, each
   started from its node type's venv with the type's custom resources (`env_vllm`, `env_cuml`,
   `env_cpu`, `accelerator_type:H100`) and its declared GPUs (`--num-gpus`), so Ray places stages as
   it would on the cluster although no GPU is here; plus `rehearsal_node:<type>` to name each node.
   A shared lake folder plays the shared file system; vLLM's OpenAI-compatible server runs from the
   vLLM node's venv for the roles cluster/rehearsal.yaml says are served.
3. Every recipe through `piqaforge submit <recipe> --address http://127.0.0.1:<dashboard>` with its
   cluster config and the models swapped in one place (cluster/rehearsal.yaml). Each must finish (a
   review batch or a release) with the lineage law holding in every run, counted from disk.
4. From Ray's state API: every stage's worker (each stage notes its actor or task id when it sets
   up, PIQAFORGE_PLACEMENT_LOG) ran on a node of a type whose resources its demand names (LLM stages
   on vLLM nodes, clustering on the cuML node, CPU stages on CPU workers), nothing on the head, and the
   driver on the head.
Everything it started is stopped and its temp dirs removed on exit, failed or not (`--keep` leaves the
cluster up for a look: it prints how to stop it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobs.rehearsal_envs import REPO, NodeType, RehearsalError, build_env, read_cluster

CONFIG = REPO / "cluster" / "rehearsal.yaml"
NODE_RESOURCE = "rehearsal_node:"
RECIPES = ["ko-piqa", "zh-piqa", "ta-piqa", "j-piqa", "ru-piqa", "pindic"]


def say(line: str) -> None:
    print(f"rehearsal: {line}", flush=True)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass
class Cluster:
    """The processes the rehearsal started (each in its own session, so a group kill takes its children)."""

    temp: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    gcs: int = 0
    dashboard: int = 0
    server_url: str | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard}"

    def descendants(self) -> set[int]:
        """Every process below the ones started here (vLLM's engine processes may leave their session)."""
        out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout.split()
        children: dict[int, list[int]] = {}
        for pid, ppid in zip(out[::2], out[1::2], strict=True):
            children.setdefault(int(ppid), []).append(int(pid))
        found: set[int] = set()
        todo = [p.pid for p in self.procs]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, []):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found

    def stop(self) -> None:
        below = self.descendants()
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 20
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.time()))
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp, ignore_errors=True)


def _start(cmd: list[str], env: dict[str, str], log: Path, cluster: Cluster) -> subprocess.Popen[bytes]:
    fh = open(log, "ab")  # noqa: SIM115 (the child holds it)
    proc = subprocess.Popen(cmd, env=env, cwd=cluster.temp, stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True)
    cluster.procs.append(proc)
    return proc


def node_process_env(venv: Path, setup_env: str, temp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS", "VIRTUAL_ENV", "PYTHONPATH")}
    env.setdefault("RAY_raylet_start_wait_time_s", "120")
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               PIQAFORGE_NODE_ENV=setup_env, RAY_TMPDIR=str(temp), RAY_AUTH_MODE="token",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return env


def start_cluster(nodes: list[NodeType], venvs: dict[str, Path], settings: dict[str, Any], logs: Path,
                  cluster: Cluster) -> Cluster:
    """Head and workers into `cluster` (its temp dir: short, Ray's socket paths have a length limit)."""
    temp = cluster.temp
    head = next(n for n in nodes if n.head)
    ports = free_ports(9)
    cluster.gcs, cluster.dashboard = ports[0], ports[1]
    store = str(int(settings.get("object_store_mb", 400)) * 2**20)
    cmd = ["ray", "start", "--head", "--block", f"--temp-dir={temp}", "--node-ip-address=127.0.0.1",
           f"--port={ports[0]}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
           f"--dashboard-port={ports[1]}", f"--ray-client-server-port={ports[2]}",
           f"--dashboard-agent-listen-port={ports[3]}", f"--dashboard-agent-grpc-port={ports[4]}",
           f"--metrics-export-port={ports[5]}", f"--runtime-env-agent-port={ports[6]}",
           f"--node-manager-port={ports[7]}", f"--object-manager-port={ports[8]}",
           f"--num-cpus={int(head.resources.get('CPU', 0))}", "--num-gpus=0",
           f"--resources={json.dumps({NODE_RESOURCE + head.name: 1})}",
           f"--object-store-memory={store}", "--disable-usage-stats"]
    say(f"head ({head.name}, {head.setup_env} env): CPU {int(head.resources.get('CPU', 0))}, dashboard "
        f"{cluster.address}")
    _start([str(venvs[head.setup_env] / "bin" / cmd[0]), *cmd[1:]],
           node_process_env(venvs[head.setup_env], head.setup_env, temp), logs / "head.log", cluster)
    _wait_jobs_api(cluster)
    cpus = settings.get("cpus", {})
    for node in nodes:
        if node.head:
            continue
        p = free_ports(7)
        resources = {**node.custom, NODE_RESOURCE + node.name: 1}
        # each node its own temp dir, as each machine of a cluster has its own disk: raylets sharing one
        # session folder share one runtime_resources/, and one node's runtime-env agent then removes a working
        # dir another node's job is reading
        node_temp = temp / f"n{len(cluster.procs)}"
        node_temp.mkdir(exist_ok=True)
        n_cpus = int(cpus.get(node.name, 2))
        cmd = ["ray", "start", "--block", f"--address=127.0.0.1:{cluster.gcs}", "--node-ip-address=127.0.0.1",
               f"--temp-dir={node_temp}",
               f"--num-cpus={n_cpus}", f"--num-gpus={int(node.gpus)}", f"--resources={json.dumps(resources)}",
               f"--node-manager-port={p[0]}", f"--object-manager-port={p[1]}",
               f"--dashboard-agent-listen-port={p[2]}", f"--dashboard-agent-grpc-port={p[3]}",
               f"--metrics-export-port={p[4]}", f"--runtime-env-agent-port={p[5]}",
               f"--min-worker-port={20000 + 1000 * len(cluster.procs)}",
               f"--max-worker-port={20000 + 1000 * len(cluster.procs) + 999}",
               f"--object-store-memory={store}", "--disable-usage-stats"]
        env = node_process_env(venvs[node.setup_env], node.setup_env, node_temp)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.get("kv_cache_gb", 1))
        say(f"worker {node.name} ({node.setup_env} env, {venvs[node.setup_env].name} venv): CPU {n_cpus} "
            f"(cluster: {node.resources.get('CPU', 0):g}), GPU {node.gpus:g} declared, "
            f"{', '.join(f'{k}: {v:g}' for k, v in node.custom.items()) or 'no custom resources'}")
        # one at a time, each waited for: four raylets starting at once on two cores miss Ray's registration
        # window ("The current node timed out during startup"); a start that fails is tried once more
        for attempt in (1, 2):
            proc = _start([str(venvs[node.setup_env] / "bin" / "ray"), *cmd[1:]], env, logs / f"{node.name}.log",
                          cluster)
            try:
                _wait_nodes(cluster, len(cluster.procs), watch=proc)
                break
            except RehearsalError:
                if attempt == 2:
                    raise
                say(f"worker {node.name} did not register; starting it again")
                cluster.procs.remove(proc)
                _kill(proc)
    return cluster


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)
    proc.wait()


def _wait_jobs_api(cluster: Cluster, timeout: float = 180) -> None:
    from ray.job_submission import JobSubmissionClient

    deadline = time.time() + timeout
    while True:
        try:
            JobSubmissionClient(cluster.address).list_jobs()
            return
        except Exception as err:  # noqa: BLE001
            if time.time() > deadline or any(p.poll() is not None for p in cluster.procs):
                raise RehearsalError(f"the head's Jobs API did not come up: {err}") from err
            time.sleep(1)


def _wait_nodes(cluster: Cluster, n: int, timeout: float = 240, watch: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.time() + timeout
    while True:
        alive = [x for x in list_nodes(cluster) if x["state"] == "ALIVE"]
        if len(alive) >= n:
            say(f"{len(alive)} nodes alive: " + ", ".join(sorted(node_type_of(x) for x in alive)))
            return
        dead = [p for p in ([watch] if watch else cluster.procs) if p.poll() is not None]
        if dead or time.time() > deadline:
            raise RehearsalError(f"{len(alive)} of {n} nodes came up (see the logs under .rehearsal/logs)")
        time.sleep(2)


def list_nodes(cluster: Cluster) -> list[dict[str, Any]]:
    from ray.util.state import list_nodes as state_nodes

    return [n if isinstance(n, dict) else n.__dict__ for n in
            (_as_dict(x) for x in state_nodes(address=cluster.address, detail=True))]


def _as_dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {k: getattr(x, k) for k in dir(x) if not k.startswith("_")
                                          and not callable(getattr(x, k))}


def node_type_of(node: dict[str, Any]) -> str:
    for key in node.get("resources_total") or {}:
        if key.startswith(NODE_RESOURCE):
            return key[len(NODE_RESOURCE):]
    return "?"


def start_server(cluster: Cluster, venv: Path, model: str, served: dict[str, Any], logs: Path) -> str:
    """vLLM's OpenAI-compatible server (CPU build), from the vLLM node's environment."""
    port = int(served.get("port") or 0) or free_ports(1)[0]
    env = node_process_env(venv, "vllm", cluster.temp)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(served.get("kv_cache_gb", 1))
    # the module, not the `vllm serve` script: the CPU build's distribution is named vllm-cpu, and the script
    # looks up the version of a distribution named vllm
    cmd = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", "rehearsal-served", "--max-model-len", "4096", "--dtype", "float32",
           # the stand-in is a base model without a chat template: render as the in-process engines do
           "--chat-template", str(REPO / "cluster" / "rehearsal" / "plain_chat_template.jinja")]
    say(f"vLLM OpenAI server (CPU build) on 127.0.0.1:{port}: {model}")
    proc = _start(cmd, env, logs / "vllm-server.log", cluster)
    import httpx

    deadline = time.time() + 600
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            raise RehearsalError(f"the vLLM server did not start (see {logs / 'vllm-server.log'})")
        time.sleep(3)
    cluster.server_url = f"http://127.0.0.1:{port}/v1"
    return cluster.server_url


# -- the model swap, in one place ---------------------------------------------------------------------------
def swapped_roles(recipe_name: str, models: dict[str, Any], model_path: str, server_url: str | None) -> list[str]:
    """`--set engine_profiles.vllm-cluster.<role>=...` items: every role of the recipe's cluster profile with
    its model swapped for the local one; served roles through the OpenAI-compatible server."""
    from transforms.flow.engines import profiles
    from transforms.flow.recipe import load_recipe

    roles = profiles(load_recipe(recipe_name))["vllm-cluster"]
    served = set(models.get("served") or [])
    options = dict(models.get("options") or {})

    def swap(engine: dict[str, Any], role: str) -> dict[str, Any]:
        out = {**engine, "model": model_path, "options": dict(options)}
        if role in served and server_url:
            out = {"backend": "openai", "model": "rehearsal-served", "name": engine.get("name"),
                   "params_b": engine.get("params_b"),
                   "options": {"base_url": server_url}}
        return out

    items = []
    for role, value in roles.items():
        if isinstance(value, list):
            new: Any = [swap(e, role) for e in value]
        elif isinstance(value, dict) and "backend" not in value:
            new = {k: swap(e, role) for k, e in value.items()}
        else:
            new = swap(value, role)
        items.append(f"engine_profiles.vllm-cluster.{role}={json.dumps(new, ensure_ascii=False)}")
    return items


# -- one recipe ------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    recipe: str
    ok: bool
    seconds: float
    status: str = ""
    lines: list[str] = field(default_factory=list)


def run_recipe(name: str, cluster: Cluster, lake: Path, conf: dict[str, Any], model_path: str, logs: Path) -> Outcome:
    started = time.time()
    run_id = f"rh-{name}"
    placement = lake / "placement" / run_id
    shutil.rmtree(placement, ignore_errors=True)
    args = ["submit", name, "--address", cluster.address, "--lake", str(lake), "--run-id", run_id]
    cfg = REPO / "jobs" / "configs" / f"{name}-cluster.yaml"
    if not cfg.exists():
        raise RehearsalError(f"{name}: no cluster config {cfg.relative_to(REPO)}")
    items = ["engines=vllm-cluster", *swapped_roles(name, conf.get("models", {}), model_path, cluster.server_url)]
    for key, value in ((conf.get("recipes") or {}).get(name, {}).get("set") or {}).items():
        items.append(f"{key}={json.dumps(value, ensure_ascii=False)}")
    args += ["--config", str(cfg.relative_to(REPO))]
    for item in items:
        args += ["--set", item]
    from jobs.config import parse_set

    # where each stage may run, from the same recipe, config and --set items the job gets (a served role's
    # stage is an HTTP client and belongs on a CPU worker)
    _EXPECTED[name] = expected_types(name, dict(parse_set(i) for i in items), read_cluster())
    args += ["--env", f"PIQAFORGE_PLACEMENT_LOG={placement}", "--env",
             f"VLLM_CPU_KVCACHE_SPACE={conf.get('nodes', {}).get('kv_cache_gb', 1)}",
             "--env", "HF_HUB_OFFLINE=1", "--env", "TRANSFORMERS_OFFLINE=1"]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["RAY_AUTH_MODE"] = "token"
    say(f"{name}: piqaforge {shlex.join(a if len(a) < 120 else a[:117] + '...' for a in args)}")
    log = logs / f"{name}.log"
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, stdout=fh,
                              stderr=subprocess.STDOUT, text=True)
    text = log.read_text(encoding="utf-8", errors="replace")
    out = Outcome(name, proc.returncode == 0 and "SUCCEEDED" in text, time.time() - started)
    record_path = lake / "runs" / run_id / "recipe.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    out.status = str(record.get("status", "no record"))
    if out.status == "nothing_to_release":
        # the graph ran to its end, but the stand-in model's items were all dropped by the checks (a 270M base
        # model writes no valid item): the job exits 1 by design (no release); the rehearsal says so and goes on
        out.ok = True
        out.lines.append("completed with nothing to release: the stand-in model's items were all dropped "
                         "(the runs' drop reasons below)")
    if not out.ok or out.status not in ("succeeded", "awaiting_review", "nothing_to_release"):
        out.ok = False
        out.lines.append(f"job exit {proc.returncode}, recipe status {out.status}; last lines of {log}:")
        out.lines += ["    " + x for x in text.strip().splitlines()[-25:]]
        return out
    out.lines += law_lines(lake, record)
    out.lines += placement_lines(name, cluster, placement, lake, run_id)
    out.ok = not any(x.startswith("FAIL") for x in out.lines)
    return out


def refusal_check(cluster: Cluster, lake: Path, logs: Path) -> Outcome:
    """A recipe asking for what no node has (8 GPUs on a cuML node) is refused before any stage runs."""
    started = time.time()
    args = ["submit", "zh-piqa", "--address", cluster.address, "--lake", str(lake), "--run-id", "rh-refused",
            "--config", "jobs/configs/zh-piqa-cluster.yaml", "--set",
            'runs.items.stages.translate.resources={"env": "cuml", "gpus": 8, "cpus": 1}']
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)
    text = proc.stdout + proc.stderr
    (logs / "refused.log").write_text(text, encoding="utf-8")
    line = next((x.strip() for x in text.splitlines() if "'translate'" in x), "")
    ran = (lake / "runs" / "rh-refused-items" / "manifest.json").exists()
    ok = proc.returncode != 0 and "cannot run the recipe" in text and "GPU" in line and not ran
    return Outcome("refusal", ok, time.time() - started, "refused" if ok else "not refused",
                   [f"zh-piqa with translate on {{env: cuml, gpus: 8}}: {line or text.strip()[-300:]}",
                    "no run started" if not ran else "FAIL a run started"])


def law_lines(lake: Path, record: dict[str, Any]) -> list[str]:
    from transforms.core.manifest import RunManifest
    from transforms.core.runner import conservation_errors

    lines = []
    for name, entry in (record.get("runs") or {}).items():
        path = lake / "runs" / entry["run_id"] / "manifest.json"
        if entry.get("status") in ("skipped",) or not path.exists():
            continue
        manifest = RunManifest.load(path)
        errors = conservation_errors(manifest)
        stages = manifest.stages
        rows_in = (stages[0].rows_in + stages[0].rows_created) if stages else 0
        kept = stages[-1].rows_kept if stages else 0
        reasons: dict[str, int] = {}
        for st in stages:
            for reason, n in st.rows_dropped.items():
                reasons[reason] = reasons.get(reason, 0) + int(n)
        top = ", ".join(f"{r} {n}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:3])
        lines.append(("FAIL law " if errors else "law holds ") + f"{name}: {entry['status']}, {rows_in} in -> {kept} "
                     f"kept{' (dropped: ' + top + ')' if top else ''}{'; ' + '; '.join(errors) if errors else ''}")
    return lines


def expected_types(recipe_name: str, overrides: dict[str, Any], nodes: list[NodeType]) -> dict[str, set[str]]:
    """Stage name -> node types whose resources hold its demand (the CPU pin on, as the cluster has env_cpu)."""
    from transforms.core.envs import set_cpu_pin
    from transforms.flow.placement import demand, missing_on, recipe_stages
    from transforms.flow.recipe import load_recipe

    set_cpu_pin(True)
    try:
        recipe = load_recipe(recipe_name, overrides,
                             config_file=str(REPO / "jobs" / "configs" / f"{recipe_name}-cluster.yaml"))
        out: dict[str, set[str]] = {}
        for _, _, stage in recipe_stages(recipe):
            want = demand(stage)
            fits = {n.name for n in nodes if not missing_on(want, n.resources)}
            out.setdefault(getattr(stage, "name", "?"), set()).update(fits)
        return out
    finally:
        set_cpu_pin(False)


def placement_lines(name: str, cluster: Cluster, folder: Path, lake: Path, run_id: str) -> list[str]:
    """Each stage's noted worker checked against Ray's state API: the node it ran on, of the expected type."""
    from ray.util.state import get_actor, list_tasks

    by_id = {n["node_id"]: node_type_of(n) for n in list_nodes(cluster)}
    expected = _EXPECTED.get(name, {})
    seen: dict[str, set[str]] = {}
    lines: list[str] = []
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []
    if not records:
        return [f"FAIL placement: no stage noted where it ran ({folder})"]
    unconfirmed = 0
    for rec in records:
        if rec.get("stage") == "driver":
            continue
        node = rec.get("node_id")
        confirmed = None
        if rec.get("actor_id"):
            actor = get_actor(rec["actor_id"], address=cluster.address)
            confirmed = _as_dict(actor).get("node_id") if actor is not None else None
        elif rec.get("task_id") and not rec.get("driver"):
            tasks = list_tasks(address=cluster.address, filters=[("task_id", "=", rec["task_id"])], limit=5,
                               raise_on_missing_output=False)
            confirmed = _as_dict(tasks[0]).get("node_id") if tasks else None
        if confirmed is None:
            unconfirmed += 1
        elif confirmed != node:
            lines.append(f"FAIL placement: {rec['stage']} noted node {node} but Ray's state API says {confirmed}")
        kind = by_id.get(confirmed or node, "?")
        where = "driver" if rec.get("driver") else kind
        seen.setdefault(rec["stage"], set()).add(where)
    for stage, places in sorted(seen.items()):
        allowed = expected.get(stage)
        bad = {p for p in places if p == "driver" or p == "head" or (allowed is not None and p not in allowed)}
        mark = "FAIL placement" if bad else "ran on"
        lines.append(f"{mark} {stage}: {', '.join(sorted(places))}"
                     + (f" (expected {', '.join(sorted(allowed))})" if bad and allowed else ""))
    lines.append(_driver_on_head(cluster, by_id, run_id, records))
    if unconfirmed:
        lines.append(f"note: {unconfirmed} of {len(records)} workers' ids were no longer in Ray's state API "
                     "(finished tasks are pruned); their noted node ids were used")
    return lines


_EXPECTED: dict[str, dict[str, set[str]]] = {}


def _driver_on_head(cluster: Cluster, by_id: dict[str, str], run_id: str, records: list[dict[str, Any]]) -> str:
    """The job's driver: its own note (the orchestrator writes one as it joins the cluster), its job found in
    Ray's state API, and the node it noted being the head."""
    from ray.util.state import list_jobs

    jobs = [_as_dict(j) for j in list_jobs(address=cluster.address)]
    if not [j for j in jobs if str(j.get("submission_id") or "").startswith(run_id)]:
        return "FAIL placement: the job is not in Ray's state API"
    drivers = [r for r in records if r.get("stage") == "driver"]
    if not drivers:
        return "FAIL placement: the driver noted nothing"
    kinds = sorted({by_id.get(r.get("node_id") or "", "?") for r in drivers})
    return ("driver on " if kinds == ["head"] else "FAIL placement: driver on ") + ", ".join(kinds)


# -- the whole rehearsal ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster_rehearsal", description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated (default: all)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    parser.add_argument("--root", default=str(REPO / ".rehearsal"), help="venvs, lake and logs (default .rehearsal)")
    args = parser.parse_args(argv)

    def stop_on_term(signum: int, frame: Any) -> None:  # `timeout`, `kill`: clean up as on any failure
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_on_term)
    conf = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    names = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [r for r in names if r not in RECIPES]
    if unknown:
        print(f"cluster_rehearsal: unknown recipe(s) {unknown}; recipes: {', '.join(RECIPES)}", file=sys.stderr)
        return 2
    root = Path(args.root)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lake = root / "lake"
    shutil.rmtree(lake, ignore_errors=True)  # a fresh shared file system for a fresh cluster
    t0 = time.time()
    nodes = read_cluster()
    venvs: dict[str, Path] = {}
    for node in nodes:
        if node.setup_env not in venvs:
            venvs[node.setup_env] = build_env(node, root / "venvs", log=say)
    say(f"environments ready in {time.time() - t0:.0f} s")
    from transforms.llm.prepare import resolve_model

    model_path = resolve_model(conf["models"]["model"])
    say(f"substitution on every vLLM role: the cluster's models -> {conf['models']['model']} ({model_path}); "
        f"served through vLLM's OpenAI server: {', '.join(conf['models'].get('served') or []) or 'none'}")
    outcomes: list[Outcome] = []
    cluster = Cluster(temp=Path(tempfile.mkdtemp(prefix="pfr", dir="/tmp")))
    try:
        cluster = start_cluster(nodes, venvs, conf.get("nodes") or {}, logs, cluster)
        if conf["models"].get("served"):
            start_server(cluster, venvs["vllm"], model_path, conf["models"].get("server") or {}, logs)
        for name in names:
            outcome = run_recipe(name, cluster, lake, conf, model_path, logs)
            outcomes.append(outcome)
            say(f"{name}: {'OK' if outcome.ok else 'FAILED'} ({outcome.status}) in {outcome.seconds:.0f} s")
            for line in outcome.lines:
                print(f"    {line}", flush=True)
        outcomes.append(refusal_check(cluster, lake, logs))
        say(f"refusal check: {'OK' if outcomes[-1].ok else 'FAILED'}")
        for line in outcomes[-1].lines:
            print(f"    {line}", flush=True)
    finally:
        if args.keep:
            say(f"--keep: the cluster stays up at {cluster.address}; stop it with: "
                f"pkill -9 -s {','.join(str(p.pid) for p in cluster.procs)}; rm -rf {cluster.temp}")
        else:
            cluster.stop()
            say("cluster stopped, temp dirs removed")
    total = time.time() - t0
    say("summary: " + "; ".join(f"{o.recipe} {'ok' if o.ok else 'FAILED'} {o.seconds:.0f} s" for o in outcomes)
        + f"; total {total:.0f} s")
    return 0 if outcomes and all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
