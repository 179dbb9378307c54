"""An LLM member of the ensemble (transforms/judge/ensemble.py): engine config, prompt and decision rule.

A verdict comes from comparing the log-probabilities of the answer options (`logprob`: score =
P(positive) normalised over the options, verdict = score >= threshold) or from generating a short
reply and parsing it (`generate`: one retry, then unparsable). Answers are cached by the stage
(`LLMStage.answer_cache`) under the classifier's key, keyed by the rendered prompt, model and mode;
the engine is asked through the LLM base (transforms/llm/asking.py: the stage's retries with backoff).

`views` decides what part of a row the LLM reads (transforms/text/views.py): `whole` (the text, cut
by the prompt's `max_chars`), `first` (the first segment: the text up to its first sentence end,
line break or tag, inside `view_chars`; text appended at a boundary never reaches it), or `all` (the
row is "yes" only if every prefix view is: one call per view for the rows whose whole text is "yes").
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from transforms.llm.answers import match_choice
from transforms.llm.asking import call_chat, call_option_logprobs
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams
from transforms.llm.cache import answer_key, recorded_question
from transforms.llm.call import PromptRef
from transforms.llm.prompts import PromptTemplate, prompt_variables
from transforms.llm.stage import LLMStage
from transforms.text.views import llm_views

ANSWER_SCHEMA = pa.schema([("key", pa.string()), ("id", pa.string()), ("score", pa.float64()),
                           ("option", pa.string()), ("raw", pa.string()), ("calls", pa.int32()),
                           ("question", pa.string())])

class Answer(BaseModel):
    score: float | None
    option: str | None
    raw: str | None
    calls: int


class Classifier(BaseModel):
    """An LLM member of the ensemble: asks its prompt of its engine and turns the reply into a verdict."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="Short name for columns and drop reasons; default: the "
                             "engine's short name. Must be unique within the ensemble.")
    engine: EngineConfig = Field(default_factory=EngineConfig)
    prompt: str = Field("classify_piqa/ko", description="Prompt id under prompts/ ('id' or 'id@version').")
    prompt_vars: dict[str, str] = Field(
        default_factory=dict, description="Values of the prompt's variables other than the row's `text`, the same "
        "for every row: e.g. {language: Thai} for classify_piqa/any, which names the crawl's language.")
    mode: Literal["logprob", "generate"] = Field(
        "logprob", description="logprob: compare the options' log-probabilities; generate: parse a reply.")
    threshold: float = Field(0.5, ge=0, le=1, description="logprob mode: yes when P(positive option) >= this.")
    max_tokens: int = Field(8, ge=1, description="generate mode: reply length cap.")
    views: Literal["whole", "first", "all"] = Field(
        "whole", description="What the LLM reads: the whole text; its first segment (appended text never "
        "reaches it); or every prefix view, yes only if all are (docs/judges.md, prompt injection).")
    view_chars: int = Field(400, ge=16, description="views first/all: the window (characters) views are cut from.")

    @property
    def short_name(self) -> str:
        return self.name or self.engine.short_name

    @property
    def column_key(self) -> str:
        return re.sub(r"[^0-9a-zA-Z]+", "_", self.short_name).strip("_").lower()

    @property
    def cost_order(self) -> float:
        return self.engine.params_b if self.engine.params_b is not None else math.inf

    def load_prompt(self) -> PromptTemplate:
        prompt = PromptRef.model_validate(self.prompt).load()
        missing = sorted(prompt_variables(prompt) - {"text"} - set(self.prompt_vars))
        if missing:
            raise ValueError(f"classifier {self.short_name!r}: prompt {self.prompt} uses "
                             f"{', '.join(missing)}, which its prompt_vars do not give "
                             f"(prompt_vars: {{{', '.join(f'{m}: ...' for m in missing)}}})")
        return prompt

    @model_validator(mode="after")
    def _prompt_vars_given(self) -> Classifier:
        self.load_prompt()  # a missing variable is refused when the recipe loads, not on the first row
        return self

    def cache_key(self, prompt: PromptTemplate) -> str:
        """The folder of this classifier's answers (one per model, prompt version and mode)."""
        # The threshold is applied on read, so changing it reuses the cached scores.
        ident = json.dumps([self.engine.backend, self.engine.model, self.engine.options, prompt.ref, self.mode,
                            self.max_tokens if self.mode == "generate" else None], sort_keys=True, default=str)
        return f"{self.column_key}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"

    def verdict(self, answer: Answer, prompt: PromptTemplate) -> bool:
        if self.mode == "logprob":
            return answer.score is not None and answer.score >= self.threshold
        return answer.option == prompt.options[0]

    def gen_params(self, retry_temperature: float) -> dict[str, Any]:
        if self.mode == "logprob":
            return {"member": self.short_name, "mode": "logprob"} | self._views_param()
        return {"member": self.short_name, "mode": "generate", "temperature": 0.0, "max_tokens": self.max_tokens,
                "n": 1, "seed": 0, "retry": {"temperature": retry_temperature, "seed": 1}} | self._views_param()

    def _views_param(self) -> dict[str, Any]:
        return {} if self.views == "whole" else {"views": self.views, "view_chars": self.view_chars}

    # -- asking --------------------------------------------------------------------------------------
    def ask(self, stage: LLMStage[Any], ids: Sequence[str], texts: Sequence[str],
            retry_temperature: float = 0.7) -> list[Answer]:
        """One answer per row about the view(s) `views` picks; with `all`, the row's answer is its first
        "no" (or unparsable) view, else its lowest-scoring one, and `calls` counts every view asked."""
        if self.views == "whole":
            return self.ask_texts(stage, ids, texts, retry_temperature)
        per_row = [llm_views(t, self.view_chars) for t in texts]
        if self.views == "first":
            return self.ask_texts(stage, ids, [v[0] for v in per_row], retry_temperature)
        out = self.ask_texts(stage, ids, [v[-1] for v in per_row], retry_temperature)
        prompt = self.load_prompt()
        need = [i for i, v in enumerate(per_row) if len(v) > 1 and out[i].option is not None
                and self.verdict(out[i], prompt)]
        flat = [(i, view) for i in need for view in per_row[i][:-1]]
        extra = self.ask_texts(stage, [ids[i] for i, _ in flat], [v for _, v in flat], retry_temperature)
        for (i, _), ans in zip(flat, extra, strict=True):
            decided = out[i].option is None or not self.verdict(out[i], prompt)
            lower = ans.option is None or not self.verdict(ans, prompt) or (ans.score or 0.0) < (out[i].score or 0.0)
            pick = ans if not decided and lower else out[i]
            out[i] = pick.model_copy(update={"calls": out[i].calls + ans.calls})
        return out

    def ask_texts(self, stage: LLMStage[Any], ids: Sequence[str], texts: Sequence[str],
                  retry_temperature: float = 0.7) -> list[Answer]:
        """One answer per text as given, from `stage`'s answer cache or this classifier's engine."""
        prompt = self.load_prompt()
        cache = stage.answer_cache(self.cache_key(prompt), ANSWER_SCHEMA)
        convs = [prompt.render(**self.prompt_vars, text=t).messages for t in texts]
        params = self.gen_params(retry_temperature) | {"options": prompt.options}
        keys = [answer_key(c, self.engine, params, 0) for c in convs]
        stage.counters.cache_hits += sum(k in cache for k in keys)
        todo, seen = [], set()
        for j, k in enumerate(keys):  # an equal question on two rows is asked once
            if k not in cache and k not in seen:
                seen.add(k)
                todo.append(j)
        step = stage.chunk_rows(stage.engine_for(self.short_name, self.engine)) if todo else 1
        for start in range(0, len(todo), step):
            chunk = todo[start:start + step]
            stage.counters.requests += len(chunk)
            fresh = self._answer(stage, prompt, [convs[j] for j in chunk], retry_temperature)
            cache.put([{"key": keys[j], "id": str(ids[j]), **a.model_dump(),
                        "question": recorded_question(convs[j]) if r == 0 else None}
                       for r, (j, a) in enumerate(zip(chunk, fresh, strict=True))])
        return [Answer.model_validate({f: cache.get(k)[f] for f in Answer.model_fields}) for k in keys]  # type: ignore[index]

    def _answer(self, stage: LLMStage[Any], prompt: PromptTemplate, convs: list[list[ChatMessage]],
                retry_temperature: float) -> list[Answer]:
        slot, label = self.short_name, f"classifier {self.short_name!r}"
        if self.mode == "logprob":
            lps = call_option_logprobs(stage, slot, self.engine, convs, prompt.options, label)
            answers = []
            for row in lps:
                score = _positive_share(row)
                option = None if score is None else prompt.options[int(np.nanargmax(np.asarray(row, float)))]
                answers.append(Answer(score=score, option=option,
                                      raw=None if score is not None else json.dumps(row), calls=1))
            return answers
        params = GenerationParams(max_tokens=self.max_tokens, temperature=0.0)
        replies = call_chat(stage, slot, self.engine, convs, params, label)
        options = [match_choice(r, prompt.options, prompt.aliases) for r in replies]
        retry = [j for j, o in enumerate(options) if o is None]
        calls = [1] * len(convs)
        if retry:  # a second, sampled try of the same question
            again = GenerationParams(max_tokens=self.max_tokens, temperature=retry_temperature, seed=1)
            second = call_chat(stage, slot, self.engine, [convs[j] for j in retry], again, label)
            for j, reply in zip(retry, second, strict=True):
                calls[j] = 2
                options[j] = match_choice(reply, prompt.options, prompt.aliases)
                replies[j] = reply if options[j] is None else replies[j]
        return [Answer(score=None if o is None else float(o == prompt.options[0]), option=o,
                       raw=None if o is not None else (r or ""), calls=c)
                for o, r, c in zip(options, replies, calls, strict=True)]


def _positive_share(logprobs: Sequence[float]) -> float | None:
    """P(first option) normalised over the options; None when no option has a finite log-probability."""
    arr = np.asarray(logprobs, dtype=np.float64)
    if arr.size == 0 or not np.isfinite(arr).any():
        return None
    arr = np.where(np.isfinite(arr), arr, -np.inf)
    p = np.exp(arr - arr.max())
    return float(p[0] / p.sum())
