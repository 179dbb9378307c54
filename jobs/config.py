"""Job configuration: YAML defaults ← --config file ← --input/--set overrides, validated by pydantic."""

from __future__ import annotations

import copy
import importlib
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from jobs import JOBS
from transforms.core.secrets import literal_secrets
from transforms.core.stage import Resources
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


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: '{key}' is not a section")
    node[keys[-1]] = value


def parse_set(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return data


def resolve_config(job: str, config_file: str | None = None, overrides: dict[str, Any] | None = None,
                   *, bind_lake: bool = True) -> BaseModel:
    """The validated config; `bind_lake=False` (`piqaforge submit` checking a config) touches no lake."""
    from jobs.forwarding import receive_forwarded_secrets

    module = load_job_module(job)
    default = CONFIG_DIR / f"{module.__name__.split('.')[-1]}.yaml"
    data: dict[str, Any] = read_yaml(default) if default.exists() else {}
    if config_file:
        data = deep_merge(data, read_yaml(Path(config_file)))
        warn_literal_secrets(read_yaml(Path(config_file)), f"config file {config_file}")
    # Under `piqaforge submit`, secrets (and --set items holding one) arrive outside Ray's job record.
    forwarded_sets = receive_forwarded_secrets()
    overrides = {**(overrides or {}), **dict(parse_set(item) for item in forwarded_sets)}
    warn_literal_secrets({k: v for k, v in overrides.items() if not isinstance(v, dict)}, "--set", dotted=True)
    for key, value in overrides.items():
        set_dotted(data, key, value)
    try:
        config = module.Config.model_validate(data)
    except ValidationError as err:
        lines = [f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError(f"invalid configuration for job {job!r}:\n" + "\n".join(lines)) from err
    return apply_secrets(config, bind_lake=bind_lake)


def warn_literal_secrets(data: dict[str, Any], origin: str, dotted: bool = False) -> None:
    """A warning per literal secret, naming the field; the values are redacted wherever we record them."""
    found = literal_secrets(data) if not dotted else []
    for key, value in data.items() if dotted else ():  # `--set a.b.c=v`: nest it so env_vars and key names show
        nested: dict[str, Any] = {}
        set_dotted(nested, key, value)
        found += literal_secrets(nested)
    for field, why in found:
        log.warning("%s: %s holds a literal secret (%s). It is recorded as <redacted>, but put the value in "
                    "an environment variable and name it in `secrets: [NAME]` (job level) or the stage's "
                    "`resources.secrets` instead (docs/secrets.md)", origin, field, why)


def secret_names(config: BaseModel) -> list[str]:
    """Every variable the job forwards: job-level `secrets` and every stage's `resources.secrets`."""
    return sorted({n for r in _resources(config) for n in r.secrets} | set(getattr(config, "secrets", [])))


def apply_secrets_env(names: list[str]) -> None:
    """A recipe's `secrets`: all must be set here; their values are scrubbed from our output."""
    from transforms.core.secrets import register_environment

    if missing := [n for n in names if not os.environ.get(n)]:
        raise ConfigError(f"secret(s) {missing} are named in the recipe but not set in the environment of this "
                          "process; set them here, they are forwarded to the workers (docs/secrets.md)")
    register_environment(names)


def apply_secrets(config: BaseModel, bind_lake: bool = True) -> BaseModel:
    """Job-level secrets go to every stage; all must be set here; their values are scrubbed from our output."""
    from transforms.core.secrets import bind_fingerprint_key, register_environment

    job_level = list(getattr(config, "secrets", []))
    for resources in _resources(config):
        resources.secrets = sorted(set(resources.secrets) | set(job_level))
    names = secret_names(config)
    if missing := [n for n in names if not os.environ.get(n)]:
        raise ConfigError(f"secret(s) {missing} are named in the config but not set in the environment of this "
                          "process; set them here, they are forwarded to the workers (docs/secrets.md)")
    register_environment(names)
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
