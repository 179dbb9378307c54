"""Deprecated (kept for one release): the generic labelled-rows loader is transforms/judge/labels.py; the KiN
seed split (`kin_parity`, `load_labels(..., allow_held_out=...)`) is Ko-PIQA's, transforms/recipes/ko_piqa/seeds.py."""

from transforms.judge.labels import LabelError, LabelledRow  # noqa: F401
from transforms.recipes.ko_piqa.seeds import DOC_ID, kin_parity, load_labels  # noqa: F401
