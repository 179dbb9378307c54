"""Deprecated (kept for one release): the Ko-PIQA cascade evaluation is transforms/recipes/ko_piqa/cascade_eval.py."""

from transforms.recipes.ko_piqa.cascade_eval import (  # noqa: F401
    by_group,
    curve,
    evaluate,
    injection,
    llm_tokens,
    prefilter_scores,
)
