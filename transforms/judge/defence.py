"""Deprecated (kept for one release): the injection defence's figures are transforms/recipes/ko_piqa/defence.py."""

from transforms.recipes.ko_piqa.defence import (  # noqa: F401
    LABELS,
    ROOT,
    WITHOUT,
    cost,
    flips,
    measure_defence,
    recipe_judges,
)
