"""piqaforge transforms: columnar stages and the engines behind them.

Importing this package stays light (no torch, vllm, transformers, great_expectations): heavy
libraries load inside a stage's `setup()` or the function that needs them.
"""

from transforms.core.stage import FilterStage, GlobalStage, Resources, Stage, StageError

__all__ = ["FilterStage", "GlobalStage", "Resources", "Stage", "StageError"]
