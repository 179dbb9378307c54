"""Reply models of the PIndicQA LLM stages (validated by transforms/llm/output.py's JsonOutput).

The paper's JSON keys are capitalised (`Domain`, ...); the models accept exactly those keys (extra
keys make a reply invalid) and store snake_case columns.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

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


class GeneratedEdit(BaseModel):
    """One generated item as a goal, its correct solution and one word edit that makes it fail: the
    wrong solution is built in code (transforms/piqa/edit_pairs.py:MinimalPairFromEdit), so the two
    solutions always differ, where the model said."""

    model_config = ConfigDict(extra="forbid")

    goal: str
    answer: str = Field(..., description="The correct solution.")
    word: str = Field(..., description="A word or short phrase of `answer`.")
    wrong_word: str = Field(..., description="Its replacement, which makes the solution fail.")


INDIC = ("hi", "bn", "ta", "kn", "ml")  # the five locales' languages


def indic_share(text: str) -> float:
    """Share of the letters in the text's most used script of the five locales (0 for Latin text)."""
    from transforms.text.textcheck import script_share

    return max(script_share(text, lang) for lang in INDIC)


class CorrectedItem(BaseModel):
    """The corrected translation of one item: every text in one Indic script (a reply left in English
    is invalid, so the stage retries it once with the reason shown) and without a decoding loop (the
    release gate's rule, transforms/piqa/degenerate.py, so a reply that passes here passes there)."""

    model_config = ConfigDict(extra="forbid")

    goal: str
    sol1: str
    sol2: str

    @field_validator("goal", "sol1", "sol2")
    @classmethod
    def _indic_and_no_loop(cls, value: str) -> str:
        if indic_share(value) < 0.8:
            raise ValueError("this text is not in the target language's script (it is English or mixed); "
                             "write it in the target language")
        from transforms.piqa.degenerate import degenerate_reason

        # the language only picks word or character tokens, and the five locales all put spaces between words
        loop = degenerate_reason(value, "hi")
        if loop is not None:
            raise ValueError(f"this text repeats one phrase again and again ({loop}); write each phrase once")
        return value
