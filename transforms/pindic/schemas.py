"""Reply models of the PIndicQA LLM stages (validated by transforms/llm/output.py's JsonOutput).

The paper's JSON keys are capitalised (`Domain`, ...); the models accept exactly those keys (extra
keys make a reply invalid) and store snake_case columns.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=60)]


class OpenLabels(BaseModel):
    """Open meta-labels of one item: each category a list of one to three short strings."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)

    domain: list[Label] = Field(..., alias="Domain", min_length=1, max_length=3)
    core_principle: list[Label] = Field(..., alias="Core_Principle", min_length=1, max_length=3)
    key_properties_materials: list[Label] = Field(..., alias="Key_Properties_Materials", min_length=1,
                                                  max_length=3)
    action_type: list[Label] = Field(..., alias="Action_Type", min_length=1, max_length=3)


class ClusterNames(BaseModel):
    """Candidate names of one cluster of labels."""

    model_config = ConfigDict(extra="forbid")

    names: list[Label] = Field(..., min_length=1, max_length=3)


class GeneratedItem(BaseModel):
    """One generated PIQA-style item (English, adapted to a locale)."""

    model_config = ConfigDict(extra="forbid")

    goal: str
    sol1: str
    sol2: str
    label: int


class CorrectedItem(BaseModel):
    """The corrected translation of one item."""

    model_config = ConfigDict(extra="forbid")

    goal: str
    sol1: str
    sol2: str
