"""Reading YAML, `--set` overrides and secrets: one implementation for recipes (flow/recipe.py) and the
tools' configs (jobs/config.py: `piqaforge run release|evaluate`), so the same text means the same thing in both.

* `read_yaml`: a mapping whose keys repeat is refused naming the file and the line (PyYAML would keep the
  last one silently); values come back as plain JSON-like data (a date is its text, anchors are copies).
* `parse_set("a.b=VALUE")`: VALUE is read as YAML, then made plain the same way, so `--set x=2024-01-01`
  gives what `x: 2024-01-01` in a file gives.
* `set_dotted`: `a.b.c` walks mappings; inside a list it finds the entry by its `name` (a run) or `stage`.
* `warn_literal_secrets` / `secret_names` / `require_secrets`: docs/secrets.md.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from transforms.flow.tools import ConfigError

log = logging.getLogger("piqaforge")


class YamlFileError(ConfigError):
    """A YAML file that cannot be read as a config: the file, where in it (`line 4`, `(file)`) and why."""

    def __init__(self, path: str | Path, where: str, problem: str):
        self.path, self.where, self.problem = str(path), where, problem
        super().__init__(f"{path}: {where}: {problem}")


class OverrideError(ConfigError):
    """A `--set KEY=VALUE` (or a dotted key of a `--config` file) that cannot be applied."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"--set {key}: {problem}")


# -- reading -----------------------------------------------------------------------------------------------
class _UniqueKeys(yaml.SafeLoader):
    """YAML whose mappings may not repeat a key."""


def _mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; its keys may be overridden
            continue
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", key_node.start_mark)
        seen.add(key)
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)  # type: ignore[arg-type]


def plain(value: Any) -> Any:
    """JSON-like data: a date or another YAML type becomes its text, and an anchor's values, shared objects in
    the loaded data, become a copy each (so an override changes one place)."""
    return json.loads(json.dumps(value, default=str))


def read_yaml(path: str | Path, *, empty_ok: bool = True) -> dict[str, Any]:
    """A YAML file holding a mapping; an empty file is `{}` when `empty_ok`."""
    path = Path(path)
    if not path.exists():
        raise YamlFileError(path, "(file)", "no such file")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        raise YamlFileError(path, where, f"not valid YAML: {getattr(err, 'problem', None) or err}") from err
    if data is None and empty_ok:
        return {}
    if not isinstance(data, dict):
        raise YamlFileError(path, "(file)", "must hold a mapping at the top level")
    return dict(plain(data))


# -- overrides ---------------------------------------------------------------------------------------------
def parse_set(item: str) -> tuple[str, Any]:
    """`KEY=VALUE` of `--set`: VALUE read as YAML (`1e3`, `[a, b]`, `{x: 1}`, `null`), text where it is not YAML."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), plain(value)


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested mappings, making the sections that are missing; inside a list, the entry whose
    `name` or `stage` (or `as`) is the key (`runs.crawl.stages.langid.min_score`)."""
    node: Any = data
    keys = dotted.split(".")
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            entry = next((e for e in node if isinstance(e, dict) and key in (e.get("name"), e.get("as"), e.get("stage"))),
                         None)
            if entry is None:
                raise OverrideError(dotted, f"no run or stage named {key!r}")
            if last:
                raise OverrideError(dotted, "cannot replace a whole run or stage with --set")
            node = entry
        elif not isinstance(node, dict):
            raise OverrideError(dotted, f"{keys[i - 1]!r} is a value, not a section")
        elif last:
            node[key] = value
        else:
            node = node.setdefault(key, {})


def nest_dotted(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1}` as `{"a": {"b": 1}}`, so a field's whole path shows; a clash keeps going in a fresh section."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        node = nested
        parts = str(key).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[parts[-1]] = value
    return nested


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, section by section; neither is changed."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# -- secrets (docs/secrets.md) -----------------------------------------------------------------------------
def warn_literal_secrets(data: dict[str, Any], origin: str) -> None:
    """A warning per literal secret in a recipe, a config file or `--set` items (dotted keys), naming the field;
    the values are redacted wherever they are recorded."""
    from transforms.core.secrets import literal_secrets

    for field, why in literal_secrets(nest_dotted(data)):
        log.warning("%s: %s holds a literal secret (%s). It is recorded as <redacted>, but put the value in an "
                    "environment variable and name it in `secrets: [NAME]` (at the top level) or the stage's "
                    "`resources.secrets` instead (docs/secrets.md)", origin, field, why)


def secret_names(tree: Any, named: Iterable[str] = ()) -> list[str]:
    """Every variable forwarded: `named` (the top level's `secrets`) and every `resources.secrets` in the tree
    (a recipe's runs, a tool's config; pydantic models are read as their dump)."""
    names = set(named)

    def walk(node: Any) -> None:
        if isinstance(node, BaseModel):
            node = node.model_dump()
        if isinstance(node, dict):
            res = node.get("resources")
            if isinstance(res, dict) and isinstance(res.get("secrets"), list):
                names.update(str(n) for n in res["secrets"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list | tuple):
            for value in node:
                walk(value)

    walk(tree)
    return sorted(names)


def require_secrets(names: list[str], named_in: str) -> None:
    """All must be set in this process's environment; their values are then scrubbed from our output."""
    from transforms.core.secrets import register_environment

    if missing := [n for n in names if not os.environ.get(n)]:
        raise ConfigError(f"secret(s) {missing} are named in the {named_in} but not set in the environment of this "
                          "process; set them here, they are forwarded to the workers (docs/secrets.md)")
    register_environment(names)
