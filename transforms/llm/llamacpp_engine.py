"""`llamacpp` backend: a GGUF model run in-process by llama.cpp's own server (the `xllamacpp` wheel).

`xllamacpp.Server` starts llama.cpp's C++ server inside this process: requests go through its Python
methods (`handle_completions`, GIL released), and its HTTP side, bound to 127.0.0.1 on a free port,
serves only `/tokenize` and `/apply-template` here. Nothing is downloaded (`offline`, no web UI).

* chat / generate  -> one completion per conversation, the prompt rendered by `render_chat` and sent
                      as token ids; `parallel` slots decode conversations together (continuous
                      batching). llama.cpp's server caps `n` at 1, so `generate` uses the base class's
                      seed + k per sample. `json_schema` is sent as llama.cpp's `json_schema`
                      (constrained decoding); `choices` as a GBNF grammar of the literal strings.
                      Sampling is plain temperature + top_p (llama.cpp's top_k/min_p are switched off).
* loglikelihood    -> llama.cpp returns log-probs only for generated tokens (no prompt/echo logprobs),
                      so the continuation is *generated* under a grammar that forces its exact token
                      ids (`<[id]>` terminals) with `n_probs=1`: the log-prob reported for each sampled
                      token is taken from the raw logits before any sampler or grammar, i.e. exactly
                      log P(token | prefix). One request per pair; the context's KV is reused from the
                      previous request in the slot (`cache_prompt`).
* option_logprobs  -> loglikelihood(prompt, option) per option, options of one prompt in a row so they
                      share the prompt's cached KV; multi-token options are summed exactly.
* render_chat      -> the GGUF's chat template through llama.cpp (`/apply-template`), or plain text
                      (contents separated by blank lines) for a GGUF without one (the base Gemma).

Options (`EngineConfig.options`, checked by `LlamaCppOptions`): threads, ctx_size, parallel,
batch_size, chat_template, swa_full.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from transforms.core.deps import require
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.prepare import gguf_path

T = TypeVar("T")
R = TypeVar("R")


class LlamaCppError(RuntimeError):
    """llama.cpp answered a request with an error."""


class LlamaCppOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threads: int | None = Field(
        None, ge=1, description="CPU threads for prompt and decoding; unset: OMP_NUM_THREADS (Ray sets it "
        "to the actor's num_cpus), else 1. More threads than free cores is much slower: llama.cpp's "
        "threads spin at barriers.")
    ctx_size: int = Field(2048, ge=64, description="Context tokens per slot (prompt + reply).")
    parallel: int = Field(1, ge=1, description="Sequences decoded together (server slots); each gets ctx_size.")
    batch_size: int = Field(512, ge=1, description="Prompt tokens per forward pass (n_batch / n_ubatch).")
    chat_template: Literal["auto", "plain"] = Field(
        "auto", description="auto: the GGUF's chat template when it has one, else plain text (message "
        "contents separated by blank lines, for base models); plain: always plain text.")
    swa_full: bool = Field(True, description="Full-size KV cache for sliding-window layers (Gemma 3), so "
                           "a shared prompt prefix can be reused across requests.")


def _gbnf_literal(text: str) -> str:
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return f'"{escaped}"'


def choices_grammar(choices: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are the given strings."""
    if not choices or any(not c for c in choices):
        raise ValueError(f"choices must be non-empty strings: {list(choices)!r}")
    return "root ::= " + " | ".join(_gbnf_literal(c) for c in choices)


def token_grammar(token_ids: Sequence[int]) -> str:
    """A GBNF grammar that admits exactly this token sequence (not just its text)."""
    return "root ::= " + " ".join(f"<[{int(t)}]>" for t in token_ids)


class LlamaCppEngine(LLMEngine):
    def __init__(self, config: EngineConfig):
        super().__init__(config)
        self.options = LlamaCppOptions(**config.options)
        self.server: Any = None
        self._http: Any = None
        self._bos: int | None = None
        self.has_template = False

    # -- loading -------------------------------------------------------------------------------
    def setup(self) -> None:
        if self.server is not None:
            return
        xlc = require("xllamacpp", "llamacpp", "the llama.cpp engine")
        httpx = require("httpx", "llamacpp")
        path = gguf_path(self.config.model)
        opts = self.options
        threads = opts.threads or int(os.environ.get("OMP_NUM_THREADS") or 1)
        p = xlc.CommonParams()
        p.model.path = str(path)
        p.n_parallel = opts.parallel
        p.n_ctx = opts.ctx_size * opts.parallel
        p.n_batch = p.n_ubatch = opts.batch_size
        for cpu in (p.cpuparams, p.cpuparams_batch):
            cpu.n_threads = threads
        p.swa_full = opts.swa_full
        p.cache_prompt = True
        p.offline = True  # never fetch a model from a hub
        p.ui = False
        p.hostnames = ["127.0.0.1"]
        p.verbosity = -1
        p.warmup = False
        self.server = xlc.Server(p)
        self._http = httpx.Client(base_url=self.server.listening_address, timeout=120.0)
        self.has_template = opts.chat_template == "auto" and _gguf_has_chat_template(path)
        bos = self._post("/tokenize", {"content": "", "add_special": True})["tokens"]
        self._bos = bos[0] if bos else None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        self.server = self._http = None  # the server's destructor stops its threads and frees the model

    def _ready(self) -> None:
        if self.server is None:
            self.setup()

    def _post(self, route: str, body: dict[str, Any]) -> Any:
        resp = self._http.post(route, json=body)
        if resp.status_code != 200:
            raise LlamaCppError(f"llama.cpp {route} failed ({resp.status_code}): {resp.text[:300]}")
        return resp.json()

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.server.handle_completions(body)
        if "error" in out or "choices" not in out:
            raise LlamaCppError(f"llama.cpp completion failed: {str(out.get('error', out))[:300]}")
        return out

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Run requests on `parallel` threads: the server decodes the busy slots together."""
        if self.options.parallel == 1 or len(items) < 2:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(self.options.parallel) as pool:
            return list(pool.map(fn, items))

    # -- text -> tokens ------------------------------------------------------------------------
    def encode(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids with at most one BOS (a rendered chat may already start with one)."""
        self._ready()
        ids = [int(t) for t in self._post("/tokenize", {"content": text, "add_special": special})["tokens"]]
        if special and self._bos is not None and ids[:2] == [self._bos, self._bos]:
            ids = ids[1:]
        return ids

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        self._ready()
        if not self.has_template:
            return "\n\n".join(m["content"] for m in conversation)
        prompt: str = self._post("/apply-template", {"messages": conversation})["prompt"]
        return prompt

    # -- generation ----------------------------------------------------------------------------
    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        self._ready()
        if params.n != 1:
            raise ValueError("chat() returns one reply per conversation; use generate() for n > 1")
        if params.json_schema is not None and params.choices is not None:
            raise ValueError("json_schema and choices cannot both constrain one reply")
        body: dict[str, Any] = {
            "max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
            "top_k": 0, "min_p": 0.0, "seed": -1 if params.seed is None else params.seed,
            "stop": list(params.stop), "cache_prompt": True}
        if params.json_schema is not None:
            body["json_schema"] = params.json_schema
        if params.choices is not None:
            body["grammar"] = choices_grammar(params.choices)
        prompts = [self.encode(self.render_chat(c)) for c in conversations]

        def one(ids: list[int]) -> str:
            text: str = self._complete({**body, "prompt": ids})["choices"][0]["text"]
            return text

        return self._map(one, prompts)

    # -- scoring -------------------------------------------------------------------------------
    def _continuation_logprobs(self, item: tuple[list[int], list[int]]) -> list[float]:
        """log P(each continuation token | context and the tokens before it), from one request."""
        ctx, cont = item
        if not cont:
            return []
        out = self._complete({
            "prompt": ctx, "max_tokens": len(cont), "temperature": 0.0, "n_probs": 1,
            "grammar": token_grammar(cont), "cache_prompt": True, "seed": 0})
        content = (out["choices"][0].get("logprobs") or {}).get("content") or []
        got = [int(c["id"]) for c in content]
        if got != cont:
            raise LlamaCppError(f"forced continuation came back as tokens {got}, expected {cont}")
        return [float(c["logprob"]) for c in content]

    def _score(self, groups: list[list[tuple[list[int], list[int]]]]) -> list[list[list[float]]]:
        """Score groups of (context, continuation) pairs; a group runs in order on one thread."""
        return self._map(lambda g: [self._continuation_logprobs(x) for x in g], groups)

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        """Sum of log P(continuation tokens | context); the continuation is tokenized on its own."""
        self._ready()
        groups = [[(self.encode(ctx), self.encode(cont, special=False))] for ctx, cont in requests]
        return [(float(sum(g[0])), len(g[0])) for g in self._score(groups)]

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        """log P(option | prompt), summed over the option's tokens (options tokenized on their own,
        no BOS, appended to the prompt's tokens: put the separating space consistently)."""
        self._ready()
        if not prompts:
            return []
        opt_ids = [self.encode(o, special=False) for o in options]
        if any(not ids for ids in opt_ids):
            raise ValueError(f"options must not be empty strings: {list(options)!r}")
        groups = []
        for prompt in prompts:
            ids = self.encode(prompt)
            groups.append([(ids, o) for o in opt_ids])
        return [[float(sum(lp)) for lp in g] for g in self._score(groups)]


_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes


def gguf_metadata_keys(path: Any) -> set[str]:
    """The metadata keys of a GGUF file, read from its header alone (gguf.GGUFReader builds numpy
    views of every field and took 89 s for Qwen's 151k-token vocabulary on the loaded test machine)."""
    import mmap
    import struct

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        (n_kv,) = struct.unpack_from("<Q", buf, 16)
        pos = 24
        keys: set[str] = set()

        def skip(vtype: int, pos: int) -> int:
            if vtype in _GGUF_SCALAR:
                return pos + _GGUF_SCALAR[vtype]
            if vtype == 8:  # string: u64 length + bytes
                return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
            if vtype == 9:  # array: u32 element type, u64 count, elements
                etype, count = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                if etype in _GGUF_SCALAR:
                    return pos + count * _GGUF_SCALAR[etype]
                for _ in range(count):
                    pos = skip(etype, pos)
                return pos
            raise ValueError(f"{path}: unknown GGUF value type {vtype}")

        for _ in range(n_kv):
            (klen,) = struct.unpack_from("<Q", buf, pos)
            keys.add(buf[pos + 8:pos + 8 + klen].decode("utf-8"))
            (vtype,) = struct.unpack_from("<I", buf, pos + 8 + klen)
            pos = skip(vtype, pos + 12 + klen)
        return keys


def _gguf_has_chat_template(path: Any) -> bool:
    return "tokenizer.chat_template" in gguf_metadata_keys(path)
