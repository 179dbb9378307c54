"""The rehearsal's cluster on this machine: a head with `CPU: 0` and one raylet per worker type, each from
its node type's venv with the type's custom resources and declared GPUs, plus vLLM's OpenAI-compatible
server; every process started is stopped, and its temp dirs removed, by `Cluster.stop`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.rehearsal.envs import REPO, NodeType, RehearsalError

NODE_RESOURCE = "rehearsal_node:"

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
    # a raylet on a loaded two-core machine may take minutes to register (Ray gives up after this, `ray start` exits)
    env.setdefault("RAY_raylet_start_wait_time_s", "300")
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               PIQAFORGE_NODE_ENV=setup_env, RAY_TMPDIR=str(temp), RAY_AUTH_MODE="token",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return env


def start_cluster(nodes: list[NodeType], venvs: dict[str, Path], settings: dict[str, Any], logs: Path,
                  cluster: Cluster, python_paths: dict[str, str] | None = None) -> Cluster:
    """Head and workers into `cluster` (its temp dir: short, Ray's socket paths have a length limit).
    `python_paths`: a node set-up's PYTHONPATH (CI's tier: the cuML stand-in beside the shared .venv)."""
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
        if (python_paths or {}).get(node.setup_env):
            env["PYTHONPATH"] = (python_paths or {})[node.setup_env]
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


def _wait_nodes(cluster: Cluster, n: int, timeout: float = 360, watch: subprocess.Popen[bytes] | None = None) -> None:
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
            (as_dict(x) for x in state_nodes(address=cluster.address, detail=True))]


def as_dict(x: Any) -> dict[str, Any]:
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
    return _serve(cluster, cmd, env, port, logs / "vllm-server.log", "the vLLM server", timeout=600)


def start_llama_server(cluster: Cluster, venv: Path, model: str, served: dict[str, Any], logs: Path) -> str:
    """llama.cpp's OpenAI-compatible server (CI's tier: harness/rehearsal/llama_server.py), from `venv`."""
    port = int(served.get("port") or 0) or free_ports(1)[0]
    env = node_process_env(venv, "vllm", cluster.temp)
    env["PYTHONPATH"] = str(REPO)
    opts = served.get("options") or {}
    cmd = [str(venv / "bin" / "python"), "-m", "harness.rehearsal.llama_server", "--model", model,
           "--port", str(port), "--threads", str(opts.get("threads", 1)), "--ctx-size", str(opts.get("ctx_size", 4096))]
    say(f"llama.cpp's OpenAI-compatible server (xllamacpp) on 127.0.0.1:{port}: {model}")
    return _serve(cluster, cmd, env, port, logs / "llama-server.log", "llama.cpp's server", timeout=180)


def start_double_server(cluster: Cluster, venv: Path, served: dict[str, Any], logs: Path) -> str:
    """The engine double behind an OpenAI-compatible server (CI's tier: harness/rehearsal/double_server.py)."""
    port = int(served.get("port") or 0) or free_ports(1)[0]
    env = node_process_env(venv, "vllm", cluster.temp)
    env["PYTHONPATH"] = str(REPO)
    cmd = [str(venv / "bin" / "python"), "-m", "harness.rehearsal.double_server", "--port", str(port)]
    say(f"the engine double's OpenAI-compatible server on 127.0.0.1:{port}")
    return _serve(cluster, cmd, env, port, logs / "double-server.log", "the double's server", timeout=60)


def _serve(cluster: Cluster, cmd: list[str], env: dict[str, str], port: int, log: Path, what: str,
           timeout: float) -> str:
    """Start an OpenAI-compatible server and wait until it lists its models; its URL becomes the cluster's."""
    proc = _start(cmd, env, log, cluster)
    import httpx

    deadline = time.time() + timeout
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            raise RehearsalError(f"{what} did not start (see {log})")
        time.sleep(1)
    cluster.server_url = f"http://127.0.0.1:{port}/v1"
    return cluster.server_url
