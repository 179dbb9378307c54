"""The prefilter's config type: `mode` picks the class.

* `supervised` (default, transforms/judge/gate.py): a linear judge trained on seed labels.
* `distilled` (transforms/judge/distilled.py): a prefilter distilled from the LLM ensemble's verdicts.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Discriminator, Tag

from transforms.judge.distilled import DROP, DistilledPrefilter
from transforms.judge.gate import SupervisedPrefilter
from transforms.llm.distil_fit import (
    DegenerateSampleError,
    FittedPrefilter,
    fit_prefilter,
    recall_and_pass_rate,
    sample_indices,
    sample_keys,
    split_holdout,
    threshold_for_recall,
)


def _prefilter_mode(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("mode", "supervised"))
    return str(getattr(value, "mode", "supervised"))


def _drop_other_modes_settings(value: Any) -> Any:
    """`--set prefilter.mode=distilled` over the default YAML (which holds the supervised settings)
    must work: the supervised-only fields are dropped. The other way round is an error, so a distilled
    knob such as `prefilter.sample_size` on the supervised default is never silently ignored."""
    if not isinstance(value, dict) or _prefilter_mode(value) != "distilled":
        return value
    foreign = set(SupervisedPrefilter.model_fields) - set(DistilledPrefilter.model_fields)
    return {k: v for k, v in value.items() if k not in foreign}


Prefilter = Annotated[Annotated[SupervisedPrefilter, Tag("supervised")] | Annotated[DistilledPrefilter, Tag("distilled")],
                      Discriminator(_prefilter_mode), BeforeValidator(_drop_other_modes_settings)]
__all__ = ["DROP", "DegenerateSampleError", "DistilledPrefilter", "FittedPrefilter", "Prefilter", "SupervisedPrefilter",
           "fit_prefilter", "recall_and_pass_rate", "sample_indices", "sample_keys", "split_holdout",
           "threshold_for_recall"]
