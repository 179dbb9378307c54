"""Named execution environments: where a stage runs and with which Python.

vLLM and cuML pin different numba versions, so they never share one Python environment. On the
cluster (cluster.yaml) each environment is a worker *type* with its own image, and advertises a
custom resource (`env_vllm`, `env_cuml`); a stage that sets `resources.env = "vllm"` asks for one
unit of it, so Ray places it only on those nodes, and its runtime_env marks the worker. Off the
cluster (a laptop with a second venv, or a single-image cluster with several venvs), set
`PIQAFORGE_<NAME>_PYTHON=/path/to/venv/bin/python` on the driver and the preset adds
`py_executable`, so Ray starts that stage's workers with that interpreter instead.

    resources: {env: vllm, gpus: 1}            # a stage's YAML
    Resources(env="cuml", gpus=1).ray_remote_args()
"""

from __future__ import annotations

import copy
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Custom resource each worker type advertises in cluster.yaml (`resources:` of the node type).
ENV_RESOURCE_PREFIX = "env_"
ENV_MARKER = "PIQAFORGE_ENV"


class EnvPreset(BaseModel):
    """What a named environment adds to a stage's Ray arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env for the workers.")
    custom_resources: dict[str, float] = Field(
        default_factory=dict, description="Custom resources to request: routes the stage to its worker type.")
    accelerator_type: str | None = Field(None, description="Default accelerator type (a stage may override).")
    node_types: tuple[str, ...] = Field((), description="cluster.yaml worker types that provide this environment.")

    def python_override(self) -> str | None:
        return os.environ.get(f"PIQAFORGE_{self.name.upper()}_PYTHON") or None

    def resolved_runtime_env(self) -> dict[str, Any]:
        env = copy.deepcopy(self.runtime_env)
        env.setdefault("env_vars", {})[ENV_MARKER] = self.name
        if python := self.python_override():
            env["py_executable"] = python
        return env


PRESETS: dict[str, EnvPreset] = {
    "cpu": EnvPreset(
        name="cpu",
        description="The light core (readers, filters, langid, exact and MinHash dedup): any CPU worker.",
        node_types=("cpu_worker",),
    ),
    "vllm": EnvPreset(
        name="vllm",
        description="vLLM engines for the LLM ensemble (image: docker/vllm.Dockerfile).",
        runtime_env={"env_vars": {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "TOKENIZERS_PARALLELISM": "false"}},
        custom_resources={f"{ENV_RESOURCE_PREFIX}vllm": 1},
        accelerator_type="H100",
        node_types=("gpu_h100x1_vllm", "gpu_h100x8_vllm"),
    ),
    "cuml": EnvPreset(
        name="cuml",
        description="RAPIDS cuML/cuDF for embeddings clustering (image: docker/cuml.Dockerfile).",
        runtime_env={"env_vars": {"CUPY_CACHE_DIR": "/tmp/cupy"}},
        custom_resources={f"{ENV_RESOURCE_PREFIX}cuml": 1},
        accelerator_type="H100",
        node_types=("gpu_h100x1_cuml",),
    ),
}


# CPU workers advertise `env_cpu` (cluster.yaml). On a Ray that has it, a stage that names no environment
# and asks for no GPU asks for one unit, so it lands on a CPU worker and never on a GPU node, whose image
# may lack its code (the scheduler only *prefers* CPU nodes for CPU work). Switched on by init_ray when
# the cluster advertises the resource; a Ray without it (a laptop, an older cluster) is unaffected.
CPU_PIN_RESOURCE = f"{ENV_RESOURCE_PREFIX}cpu"
_PIN = {"cpu": False}


def set_cpu_pin(active: bool) -> None:
    _PIN["cpu"] = bool(active)


def cpu_pin_active() -> bool:
    return _PIN["cpu"]


def get_env(name: str) -> EnvPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown environment {name!r}; presets are {sorted(PRESETS)} "
                         f"(transforms/core/envs.py)") from None


def merge_runtime_env(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """The preset's runtime_env with a stage's own on top (env_vars are merged key by key)."""
    out = copy.deepcopy(base)
    for key, value in (extra or {}).items():
        if key == "env_vars" and isinstance(value, dict):
            out.setdefault("env_vars", {}).update(value)
        else:
            out[key] = copy.deepcopy(value)
    return out
