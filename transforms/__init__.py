"""piqaforge transforms: columnar stages and the engines behind them.

Importing this package stays light (no torch, vllm, transformers, great_expectations): heavy
libraries load inside a stage's `setup()` or the function that needs them. The stage contract is
loaded on first use of these names, so the engines' modules also import on a bare GPU machine
without pyarrow (scripts/gpu_check.sh).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FilterStage", "GlobalStage", "Resources", "Stage", "StageError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from transforms.core import stage

        return getattr(stage, name)
    raise AttributeError(f"module 'transforms' has no attribute {name!r}")
