"""PIQA items: one Arrow schema for every recipe, readers/writers, the dataset card and the release.

Import-light: nothing here imports great_expectations, torch or matplotlib at module level.
"""

from transforms.piqa.schema import ITEM_SCHEMA, REQUIRED_COLUMNS, conform_items, validate_items

__all__ = ["ITEM_SCHEMA", "REQUIRED_COLUMNS", "conform_items", "validate_items"]
