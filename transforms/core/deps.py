"""Fail fast, with the extra to install, when an optional heavy dependency is missing."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


class MissingDependencyError(ImportError):
    pass


def require(module: str, extra: str, purpose: str = "") -> ModuleType:
    """Import `module` or raise an error naming the pip extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        what = f" for {purpose}" if purpose else ""
        raise MissingDependencyError(
            f"'{module}' is needed{what} but is not installed: run `pip install -e .[{extra}]` "
            f"(or scripts/setup.sh, which installs every extra this machine can run)."
        ) from err


def is_available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
