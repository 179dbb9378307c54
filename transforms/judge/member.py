"""A cheap supervised classifier as a member of the LLM ensemble (transforms/judge/ensemble.py).

It answers like an LLM member (`ask(stage, ids, texts) -> list[Answer]`, score = P(positive)), costs
no LLM call, and orders itself first by `params_b` (multilingual-e5-small is 0.118B parameters and
reads ~60 tokens of a question once, against an LLM's ~200-token prompt). Under the unanimous rule
its "no" ends the vote before any LLM is asked.

Its identity goes into the ensemble's provenance as a prompt record: id `linear/<label>`, version
the hash of the fitted weights, so the answer cache and `ens_provenance` change when it is refitted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from transforms.judge.linear import FittedLinear, LinearJudge, embedder_for, threshold_for_recall, train
from transforms.llm.prompts import PromptTemplate


class LinearClassifier(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["linear"] = Field("linear", description="Marks a supervised member (LLM members have no kind).")
    name: str = Field("e5-linear", description="Short name for columns and drop reasons.")
    judge: LinearJudge = Field(default_factory=LinearJudge, description="Labels, embedder, recall target.")
    threshold: float | None = Field(None, ge=0, le=1, description="Yes when P(positive) >= this; null: the "
                                    "cross-validated threshold for judge.target_recall.")
    params_b: float = Field(0.118, description="Parameters in billions, for the cheapest-first order.")
    embed_cache_dir: str | None = Field(None, description="Disk cache of embeddings (the job sets it).")

    _fitted: FittedLinear | None = PrivateAttr(None)
    _embedder: Any = PrivateAttr(None)

    @property
    def short_name(self) -> str:
        return self.name

    @property
    def column_key(self) -> str:
        return re.sub(r"[^0-9a-zA-Z]+", "_", self.name).strip("_").lower()

    @property
    def cost_order(self) -> float:
        return self.params_b

    @property
    def model_label(self) -> str:
        return f"{self.judge.embedder.backend}:{self.judge.embedder.model}+logreg"

    def fitted(self) -> FittedLinear:
        if self._fitted is None:
            self._fitted = train(self.judge, self.embed_cache_dir)
        return self._fitted

    def use_fitted(self, fitted: FittedLinear) -> LinearClassifier:
        """Share a model already trained (the prefilter's, in judge-eval) instead of training again; its
        threshold is moved to this member's `target_recall` on the same out-of-fold scores."""
        if fitted.oof_scores and self.judge.target_recall != fitted.cv.get("target_recall"):
            cut = threshold_for_recall(np.asarray(fitted.oof_scores), np.asarray(fitted.oof_labels, dtype=bool),
                                       self.judge.target_recall)
            fitted = fitted.model_copy(update={"threshold": cut})
        self._fitted = fitted
        return self

    def load_prompt(self) -> PromptTemplate:
        return PromptTemplate(id=f"linear/{self.judge.label}", version=self.fitted().key(), task="classify_linear",
                              language="any", options=["yes", "no"], template="{{ text }}",
                              description="not a prompt: the supervised member's identity")

    def cut_off(self) -> float:
        return self.fitted().threshold if self.threshold is None else self.threshold

    def verdict(self, answer: Any, prompt: PromptTemplate | None = None) -> bool:
        return answer.score is not None and answer.score >= self.cut_off()

    def gen_params(self, retry_temperature: float = 0.0) -> dict[str, Any]:
        return {"member": self.name, "mode": "linear", "threshold": self.cut_off()}

    def scores(self, texts: Sequence[str]) -> list[float]:
        """P(positive) per text; with views, the minimum over its prefix views where it matters (a text
        whose window scores under the cut-off keeps that score: its verdict is "no" either way)."""
        fitted = self.fitted()
        if self._embedder is None:
            self._embedder = embedder_for(self.judge, self.embed_cache_dir)
        return fitted.score_texts(list(texts), self._embedder, lazy_below=self.cut_off()).tolist()

    def ask(self, stage: Any, ids: Sequence[str], texts: Sequence[str], retry_temperature: float = 0.0) -> list[Any]:
        from transforms.llm.classifier import Answer  # the ensemble imports this module

        cut = self.cut_off()
        return [Answer(score=s, option="yes" if s >= cut else "no", raw=None, calls=0) for s in self.scores(texts)]
