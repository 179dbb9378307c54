"""Deprecated (kept for one release): what a ko-piqa run kept, against labels, is transforms/recipes/ko_piqa/run_eval.py."""

from transforms.recipes.ko_piqa.run_eval import (  # noqa: F401
    NEGATIVE_SOURCES,
    PREFILTERS,
    JudgesReport,
    evaluate_run,
    member_figures,
)
