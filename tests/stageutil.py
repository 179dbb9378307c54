"""Every stage class the repo defines (each module of transforms/ imported once), for the tests that read them all."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import transforms
from transforms.core.stage import Stage


def stage_classes() -> list[type[Stage[Any]]]:
    for info in pkgutil.walk_packages(transforms.__path__, "transforms."):
        importlib.import_module(info.name)
    out, todo = [], list(Stage.__subclasses__())
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo += cls.__subclasses__()
    return out
