"""What one copy of a stage costs on a cluster (`Resources`), and the Ray arguments it becomes."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator


class StageError(RuntimeError):
    """A stage could not run on its input (wrong columns, broken contract)."""


class Resources(BaseModel):
    """What one copy of a stage needs; the runner turns this into Ray Data arguments."""

    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(1.0, ge=0, description="CPUs per task or actor.")
    gpus: float = Field(0.0, ge=0, description="GPUs per actor (fractions share a GPU).")
    memory_gb: float | None = Field(None, ge=0, description="Memory to reserve per task/actor, in GiB.")
    concurrency: int | None = Field(
        None, ge=1, description="Number of actors for stateful stages; tasks are scheduled freely when unset."
    )
    batch_size: int | None = Field(4096, ge=1, description="Rows per batch handed to the stage.")
    runtime_env: dict[str, Any] | None = Field(
        None,
        description="Ray runtime_env for this stage's workers (e.g. a vLLM or cuML environment); "
        "lets one job mix stages whose dependencies cannot share one Python environment.",
    )
    accelerator_type: str | None = Field(None, description="Ray accelerator type, e.g. 'H100'.")
    env: str | None = Field(None, description="Named environment preset (transforms/core/envs.py: cpu, vllm, "
                            "cuml): its runtime_env, plus a custom resource that places the stage on the "
                            "cluster worker type built for it; `runtime_env` above is merged on top.")
    custom_resources: dict[str, float] | None = Field(None, description="Extra Ray custom resources per copy.")
    secrets: list[str] = Field(default_factory=list, description="Names of environment variables (e.g. "
                               "OPENAI_API_KEY) forwarded from the process that starts the job to this stage's "
                               "workers; the values are never recorded (docs/secrets.md).")

    # Values of `secrets` (and of credential-named literal runtime_env env_vars) taken when the stage is
    # pickled to be shipped to a worker, and put into the worker's environment when it is unpickled there:
    # they travel with the stage object, never in a config field or a Ray runtime_env, which Ray logs.
    _forwarded: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("secrets")
    @classmethod
    def _names_not_values(cls, names: list[str]) -> list[str]:
        from transforms.core.secrets import valid_variable_name

        if bad := [i for i, n in enumerate(names) if not valid_variable_name(n)]:  # never echo the value
            raise ValueError(f"secrets lists environment variable names (letters, digits, _); item(s) {bad} "
                             "are not names: put the value in the environment and list its name")
        return names

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        forwarded = {n: os.environ[n] for n in self.secrets if n in os.environ}
        forwarded.update(self._credential_env_vars())
        if forwarded:
            state = {**state, "__pydantic_private__": {**(state.get("__pydantic_private__") or {}),
                                                       "_forwarded": forwarded}}
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        for name, value in (self.__pydantic_private__ or {}).get("_forwarded", {}).items():
            os.environ.setdefault(name, value)

    def _credential_env_vars(self) -> dict[str, str]:
        from transforms.core.secrets import credential_name

        env = (self.runtime_env or {}).get("env_vars") or {}
        return {str(k): str(v) for k, v in env.items() if credential_name(str(k)) and v not in (None, "")}

    def missing_secrets(self) -> list[str]:
        return [n for n in self.secrets if not os.environ.get(n)]

    def ray_remote_args(self) -> dict[str, Any]:
        if missing := self.missing_secrets():
            raise StageError(f"secret(s) {missing} named in resources.secrets are not set in the environment of "
                             "the process that starts the job (docs/secrets.md)")
        args: dict[str, Any] = {"num_cpus": self.cpus}
        if self.gpus:
            args["num_gpus"] = self.gpus
        if self.memory_gb:
            args["memory"] = int(self.memory_gb * 2**30)
        runtime_env, resources, accelerator = self.runtime_env, dict(self.custom_resources or {}), None
        if self.env:
            from transforms.core.envs import get_env, merge_runtime_env

            preset = get_env(self.env)
            runtime_env = merge_runtime_env(preset.resolved_runtime_env(), self.runtime_env)
            resources = {**preset.custom_resources, **resources}
            # the preset's accelerator only matters where the stage asks for a GPU
            accelerator = preset.accelerator_type if self.gpus else None
        if not self.gpus and (self.env in (None, "cpu")):
            from transforms.core.envs import CPU_PIN_RESOURCE, cpu_pin_active

            if cpu_pin_active() and not resources:
                resources = {CPU_PIN_RESOURCE: 1}
        if runtime_env and (credentials := self._credential_env_vars()):
            # forwarded with the pickled stage instead (see _forwarded): Ray would log them in plain text
            runtime_env = {**runtime_env, "env_vars": {k: v for k, v in runtime_env["env_vars"].items()
                                                       if k not in credentials}}
            if not runtime_env["env_vars"]:
                del runtime_env["env_vars"]
        if runtime_env:
            args["runtime_env"] = runtime_env
        if resources:
            args["resources"] = resources
        if self.accelerator_type or accelerator:
            args["accelerator_type"] = self.accelerator_type or accelerator
        return args


def placement_args(place: dict[str, Any] | None) -> dict[str, Any]:
    """Ray remote args for work placed as a stage with these `resources` fields would be (an engine profile's
    `resources`: automatic review's annotators, the audit's model, an embedder actor)."""
    known = {k: v for k, v in (place or {}).items() if k in Resources.model_fields}
    return Resources.model_validate(known).ray_remote_args()
