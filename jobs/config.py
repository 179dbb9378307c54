"""Job configuration: YAML defaults ← --config file ← --input/--set overrides, validated by pydantic."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobs import JOBS

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


class ConfigError(ValueError):
    """A configuration problem, reported to the user as one readable message."""


class JobConfig(BaseModel):
    """Fields every job has."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(..., description="Dataset name: the folder under each lake zone.")
    lake: str = Field("lake", description="Root directory of the Parquet lake.")
    ray_address: str | None = Field(None, description="Ray address to join; unset starts Ray locally "
                                    "(or joins the cluster when run under `ray job submit`).")
    num_cpus: int | None = Field(None, description="CPUs for a local Ray instance (default: all).")


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


def resolve_config(job: str, config_file: str | None = None, overrides: dict[str, Any] | None = None) -> BaseModel:
    module = load_job_module(job)
    default = CONFIG_DIR / f"{module.__name__.split('.')[-1]}.yaml"
    data: dict[str, Any] = read_yaml(default) if default.exists() else {}
    if config_file:
        data = deep_merge(data, read_yaml(Path(config_file)))
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    try:
        return module.Config.model_validate(data)
    except ValidationError as err:
        lines = [f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError(f"invalid configuration for job {job!r}:\n" + "\n".join(lines)) from err
