"""Job configuration: YAML defaults ← --config file ← --input/--set overrides, validated by pydantic.

Reading YAML, `--set` and secrets are transforms/flow/config_io.py's, shared with recipes (flow/recipe.py):
the same `--set` text gives the same value in both, and a repeated key is refused with its file and line.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

from jobs import JOBS
from transforms.core.stage import Resources
from transforms.flow import config_io
from transforms.flow.config_io import (  # noqa: F401  (deprecated here, kept for one release: use config_io)
    deep_merge,
    parse_set,
    read_yaml,
    set_dotted,
    warn_literal_secrets,
)
from transforms.flow.tools import ConfigError, JobConfig  # noqa: F401 (the tools' config base, re-exported)

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
log = logging.getLogger("piqaforge")


def load_job_module(job: str) -> ModuleType:
    if job not in JOBS:
        raise ConfigError(f"unknown job {job!r}; jobs are: {', '.join(sorted(JOBS))}")
    try:
        return importlib.import_module(JOBS[job])
    except ModuleNotFoundError as err:
        if err.name == JOBS[job]:
            raise ConfigError(f"job {job!r} is registered but not implemented yet ({JOBS[job]}).") from err
        raise


def resolve_config(job: str, config_file: str | None = None, overrides: dict[str, Any] | None = None,
                   *, bind_lake: bool = True) -> BaseModel:
    """The validated config; `bind_lake=False` (`piqaforge submit` checking a config) touches no lake."""
    from jobs.forwarding import receive_forwarded_secrets

    module = load_job_module(job)
    default = CONFIG_DIR / f"{module.__name__.split('.')[-1]}.yaml"
    data: dict[str, Any] = read_yaml(default) if default.exists() else {}
    if config_file:
        extra = read_yaml(config_file)
        warn_literal_secrets(extra, f"config file {config_file}")
        data = deep_merge(data, extra)
    # Under `piqaforge submit`, secrets (and --set items holding one) arrive outside Ray's job record.
    forwarded_sets = receive_forwarded_secrets()
    overrides = {**(overrides or {}), **dict(parse_set(item) for item in forwarded_sets)}
    warn_literal_secrets({k: v for k, v in overrides.items() if not isinstance(v, dict)}, "--set")
    for key, value in overrides.items():
        set_dotted(data, key, value)
    try:
        config = module.Config.model_validate(data)
    except ValidationError as err:
        lines = [f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError(f"invalid configuration for job {job!r}:\n" + "\n".join(lines)) from err
    return apply_secrets(config, bind_lake=bind_lake)


def secret_names(config: BaseModel) -> list[str]:
    """Every variable the job forwards: job-level `secrets` and every stage's `resources.secrets`."""
    named = [*getattr(config, "secrets", []), *(n for r in _resources(config) for n in r.secrets)]
    return config_io.secret_names(config, named)


def apply_secrets_env(names: list[str]) -> None:
    """A recipe's `secrets`: all must be set here; their values are scrubbed from our output."""
    config_io.require_secrets(names, "recipe")


def apply_secrets(config: BaseModel, bind_lake: bool = True) -> BaseModel:
    """Job-level secrets go to every stage; all must be set here; their values are scrubbed from our output."""
    from transforms.core.secrets import bind_fingerprint_key

    job_level = list(getattr(config, "secrets", []))
    for resources in _resources(config):
        resources.secrets = sorted(set(resources.secrets) | set(job_level))
    config_io.require_secrets(secret_names(config), "config")
    if bind_lake and isinstance(lake := getattr(config, "lake", None), str):
        bind_fingerprint_key(lake)
    return config


def _resources(obj: Any) -> list[Resources]:
    if isinstance(obj, Resources):
        return [obj]
    if isinstance(obj, BaseModel):
        return [r for name in type(obj).model_fields for r in _resources(getattr(obj, name))]
    if isinstance(obj, list | tuple):
        return [r for item in obj for r in _resources(item)]
    if isinstance(obj, dict):
        return [r for item in obj.values() for r in _resources(item)]
    return []
