"""`transformers` backend: a local causal LM on CPU or GPU (default: the packaged Gemma 3 270M).

Scoring is where the time goes on CPU, and with a 262k-token vocabulary the output projection
costs more than the 18 transformer layers. So the scoring paths never call `model(...)`: they run
the decoder (`model.get_decoder()`) for hidden states and apply the LM head only at the positions
whose next-token distribution is needed (one per prompt for `option_logprobs`, one per
continuation token for `loglikelihood`).

Rows of a classifier batch share a long instruction prefix, so each call tokenizes all its
sequences, takes their longest common token prefix, runs it once and hands that KV cache, repeated
along the batch, to every batch of row suffixes (right-padded, so positions stay those of the unpadded
sequence), without a copy per batch where the cache layers allow it (hf_prefix.py). Tests:
tests/llm/test_llm_engines.py (against a plain full forward), tests/llm/test_hf_prefix_reuse.py.

Structured output: a `choices` constraint is met by scoring the options after the rendered chat
(`option_logprobs`, with the shared-prefix cache) and taking the best, or sampling among them;
transformers has no constrained JSON decoding, so a `json_schema` reply is free text that the LLM
stage validates (and retries, with the error shown, under `on_invalid: retry`).

Batch sizes follow the device unless set: on CPU 16 sequences and 8,192 padded suffix tokens per
forward pass (more only adds padding and cache misses), on a GPU 256 sequences and 131,072 tokens
(measured on an H100 with a Qwen3-4B-shaped model: 224 rows/s against 142 with the CPU sizes, see
docs/gpu.md). Items are sorted longest first before they are cut into batches, so each batch pads to
similar lengths, and a batch grows until either limit is reached. The log-probabilities a batch needs
are gathered on the device and copied to the host once per batch (a per-row read would stall the GPU
at every row).

Options (`EngineConfig.options`, checked by `HFOptions` in hf_options.py): device, dtype, batch_size,
max_batch_tokens, gen_batch_size, prefix_cache, min_prefix_tokens, threads, chat_template, gguf_file.

One module over 300 lines because it is one responsibility: loading the model, the shared-prefix
scoring and generation share the engine's model, tokenizer and batch sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transforms.core.deps import require
from transforms.llm.base import (
    ChatMessage,
    EngineConfig,
    GenerationParams,
    LLMEngine,
    encode_prompt,
    render_with_tokenizer,
)
from transforms.llm.hf_options import CPU_SIZES, GPU_SIZES, HFOptions, device_sizes  # noqa: F401 (re-exported)
from transforms.llm.hf_prefix import SharedPrefixKV
from transforms.llm.prepare import resolve_model

# One scoring request: a token sequence and, per position to read, the token ids whose
# log-probability as the *next* token is wanted.
ScoreItem = tuple[list[int], list[tuple[int, list[int]]]]


class TransformersEngine(LLMEngine):
    def __init__(self, config: EngineConfig):
        super().__init__(config)
        self.options = HFOptions(**config.options)
        self.model: Any = None
        self.tokenizer: Any = None
        self._torch: Any = None
        self.device = "cpu"
        self.batch_size, self.max_batch_tokens, self.gen_batch_size = CPU_SIZES
        self.reuse_prefix_buffers = True  # False: the per-batch copy of the prefix cache (before issue 34)

    # -- loading -------------------------------------------------------------------------------
    def setup(self) -> None:
        if self.model is not None:
            return
        torch = self._torch = require("torch", "llm", "the transformers engine")
        transformers = require("transformers", "llm", "the transformers engine")
        opts = self.options
        if opts.threads:
            torch.set_num_threads(opts.threads)
        self.device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype_name = opts.dtype
        if dtype_name == "auto":
            dtype_name = "float32" if self.device == "cpu" else "bfloat16"
        path = resolve_model(self.config.model)
        kw: dict[str, Any] = {}
        if opts.gguf_file:
            require("gguf", "llm", "reading GGUF files")
            kw["gguf_file"] = opts.gguf_file
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, **kw)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype_name), **kw)
        self.use_model(model.to(self.device), tokenizer)

    def use_model(self, model: Any, tokenizer: Any) -> None:
        """Serve an already loaded model (benchmarks build one in memory); sizes follow its device."""
        self._torch = self._torch or require("torch", "llm", "the transformers engine")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.device = str(next(model.parameters()).device)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        opts = self.options
        self.batch_size, self.max_batch_tokens, self.gen_batch_size = (
            given or default for given, default in zip(
                (opts.batch_size, opts.max_batch_tokens, opts.gen_batch_size), device_sizes(self.device),
                strict=True))

    @property
    def preferred_batch(self) -> int:
        return self.batch_size

    def close(self) -> None:
        self.model = self.tokenizer = None

    def _ready(self) -> None:
        if self.model is None:
            self.setup()

    # -- text -> tokens ------------------------------------------------------------------------
    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return encode_prompt(self.tokenizer, text, special=special)

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text (with special tokens), in one batched tokenizer call per BOS case."""
        bos = self.tokenizer.bos_token
        out: list[list[int]] = [[] for _ in texts]
        for add in (True, False):
            idx = [i for i, t in enumerate(texts) if (not (bos and t.startswith(bos))) == add]
            if idx:
                ids = self.tokenizer([texts[i] for i in idx], add_special_tokens=add)["input_ids"]
                for i, row in zip(idx, ids, strict=True):
                    out[i] = list(row) or encode_prompt(self.tokenizer, texts[i])
        return out

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        self._ready()
        return render_with_tokenizer(self.tokenizer, conversation, self.options.chat_template)

    # -- scoring -------------------------------------------------------------------------------
    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        """log P(option | prompt), summed over the option's tokens.

        Each option is tokenized on its own (no special tokens) and appended to the prompt's tokens,
        so put the separating space or newline consistently at the end of the prompt or at the start
        of every option. One sequence per prompt reads every option's first token and the later
        tokens of the first multi-token option (e.g. 예/아니오 costs one forward per row); each
        further multi-token option adds a sequence that shares the cached prefix.
        """
        self._ready()
        if not prompts:
            return []
        opt_ids = [self.encode(o, special=False) for o in options]
        if any(not ids for ids in opt_ids):
            raise ValueError(f"options must not be empty strings: {list(options)!r}")
        first = [ids[0] for ids in opt_ids]
        multi = [o_idx for o_idx, o in enumerate(opt_ids) if len(o) > 1]
        items: list[ScoreItem] = []
        owners: list[tuple[int, list[int]]] = []  # per item: prompt index, option index per query (-1: all)
        for p_idx, ids in enumerate(self.encode_many(prompts)):
            # The first multi-token option rides along in the prompt's own sequence: attention is
            # causal, so appending its tokens leaves the last prompt position's distribution as is.
            host = multi[0] if multi else None
            seq = ids + (opt_ids[host][:-1] if host is not None else [])
            queries: list[tuple[int, list[int]]] = [(len(ids) - 1, first)]
            query_owner = [-1]
            for o_idx in multi:
                o = opt_ids[o_idx]
                tail = [(len(ids) + k, [o[k + 1]]) for k in range(len(o) - 1)]
                if o_idx == host:
                    queries += tail
                    query_owner += [o_idx] * len(tail)
                else:  # further multi-token options: one more sequence each, sharing the prefix
                    items.append((ids + o[:-1], tail))
                    owners.append((p_idx, [o_idx] * len(tail)))
            items.append((seq, queries))
            owners.append((p_idx, query_owner))
        scores = self._score(items)
        out: list[list[float]] = [[0.0] * len(options) for _ in prompts]
        for (p_idx, query_owner), score in zip(owners, scores, strict=True):
            for o_idx, values in zip(query_owner, score, strict=True):
                if o_idx < 0:
                    out[p_idx] = [a + b for a, b in zip(out[p_idx], values, strict=True)]
                else:
                    out[p_idx][o_idx] += values[0]
        return out

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        """Sum of log P(continuation tokens | context); the continuation is tokenized on its own."""
        self._ready()
        items: list[ScoreItem] = []
        counts: list[int] = []
        for context, continuation in requests:
            ctx = self.encode(context)
            cont = self.encode(continuation, special=False)
            counts.append(len(cont))
            seq = ctx + cont
            items.append((seq, [(len(ctx) - 1 + k, [t]) for k, t in enumerate(cont)]))
        scores = self._score([it for it in items if it[1]])
        out: list[tuple[float, int]] = []
        it = iter(scores)
        for n in counts:
            out.append((float(sum(s[0] for s in next(it))) if n else 0.0, n))
        return out

    def _score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        """For each item and each (position, token ids): log-softmax of the next-token logits."""
        torch = self._torch
        if not items:
            return []
        use_cache = self.options.prefix_cache and len(items) > 1
        prefix_len = self._shared_prefix_len(items) if use_cache else 0
        decoder = self.model.get_decoder()
        batches = self._batches(items, prefix_len)
        prefix_kv = None
        with torch.inference_mode():
            if prefix_len:
                prefix = torch.tensor([items[0][0][:prefix_len]], device=self.device)
                shapes = [(len(b), max(len(items[i][0]) for i in b) - prefix_len) for b in batches]
                prefix_kv = SharedPrefixKV(decoder(input_ids=prefix, use_cache=True).past_key_values, prefix_len,
                                           shapes, reuse=self.reuse_prefix_buffers)
            results: list[list[list[float]] | None] = [None] * len(items)
            for batch in batches:
                self._score_batch(decoder, items, batch, prefix_len, prefix_kv, results)
        return [r if r is not None else [] for r in results]

    def _shared_prefix_len(self, items: list[ScoreItem]) -> int:
        first = items[0][0]
        n = min(len(first), *(min(p for p, _ in q) for _, q in items))
        for seq, _ in items[1:]:
            i = 0
            lim = min(n, len(seq))
            while i < lim and seq[i] == first[i]:
                i += 1
            n = i
            if n < self.options.min_prefix_tokens:
                return 0
        # Keep at least one token to feed per row (and positions to read lie in the suffix).
        return n if n >= self.options.min_prefix_tokens else 0

    def _batches(self, items: list[ScoreItem], prefix_len: int) -> list[list[int]]:
        order = sorted(range(len(items)), key=lambda i: -len(items[i][0]))
        batches: list[list[int]] = []
        cur: list[int] = []
        for i in order:
            width = len(items[cur[0]][0]) - prefix_len if cur else len(items[i][0]) - prefix_len
            if cur and (len(cur) >= self.batch_size or width * (len(cur) + 1) > self.max_batch_tokens):
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
        return batches

    def _score_batch(self, decoder: Any, items: list[ScoreItem], batch: list[int], prefix_len: int,
                     prefix_kv: SharedPrefixKV | None, results: list[Any]) -> None:
        torch = self._torch
        pad = self.tokenizer.pad_token_id
        suffixes = [items[i][0][prefix_len:] for i in batch]
        width = max(len(s) for s in suffixes)
        # Built on the host as one padded list, then moved once.
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in suffixes], dtype=torch.long)
        lengths = torch.tensor([prefix_len + len(s) for s in suffixes])
        mask = (torch.arange(prefix_len + width)[None, :] < lengths[:, None]).long()
        kw: dict[str, Any] = {"use_cache": prefix_kv is not None}
        if prefix_kv is not None:
            kw["past_key_values"] = prefix_kv.for_batch(len(batch), width)
        hidden = decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                         **kw).last_hidden_state
        # One row per (position, token id) wanted: pick the hidden states, project and normalise them
        # on the device, gather the wanted entries there and copy those to the host in one transfer.
        rows, cols, query_of, token_ids = [], [], [], []
        for r, i in enumerate(batch):
            for pos, toks in items[i][1]:
                rows.append(r)
                cols.append(pos - prefix_len)
                query_of += [len(rows) - 1] * len(toks)
                token_ids += toks
        logprobs = self._logprobs(hidden[rows, cols])
        picked = logprobs[torch.tensor(query_of, device=logprobs.device),
                          torch.tensor(token_ids, device=logprobs.device)]
        flat: list[float] = picked.cpu().tolist()
        k = 0
        for i in batch:
            out = []
            for _, toks in items[i][1]:
                out.append(flat[k:k + len(toks)])
                k += len(toks)
            results[i] = out

    def _logprobs(self, hidden: Any) -> Any:
        """log-softmax of the next-token logits at `hidden` (on the model's device)."""
        torch = self._torch
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return torch.log_softmax(logits, dim=-1)

    # -- generation ----------------------------------------------------------------------------
    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        self._ready()
        if params.choices:
            # imported here: output.py needs pyarrow, which a bare GPU box (scripts/gpu_check.sh) lacks
            from transforms.llm.output import choose_from_logprobs

            texts = [self.render_chat(c) for c in conversations]
            return choose_from_logprobs(self.option_logprobs(texts, params.choices), list(params.choices),
                                        params.temperature, params.seed, texts)
        torch = self._torch
        prompts = [self.encode(self.render_chat(c)) for c in conversations]
        eos = [self.tokenizer.eos_token_id]
        end_turn = self.tokenizer.convert_tokens_to_ids("<end_of_turn>")
        if isinstance(end_turn, int) and end_turn != self.tokenizer.unk_token_id:
            eos.append(end_turn)
        sample = params.temperature > 0
        if sample and params.seed is not None:
            torch.manual_seed(params.seed)
        gen_kw: dict[str, Any] = {
            "max_new_tokens": params.max_tokens, "do_sample": sample,
            "pad_token_id": self.tokenizer.pad_token_id, "eos_token_id": eos}
        if sample:
            gen_kw.update(temperature=params.temperature, top_p=params.top_p)
        else:  # greedy: silence the sampling defaults some generation configs carry
            gen_kw.update(temperature=None, top_p=None, top_k=None)
        replies: list[str] = [""] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        step = self.gen_batch_size
        with torch.inference_mode():
            for start in range(0, len(order), step):
                idx = order[start:start + step]
                width = max(len(prompts[i]) for i in idx)
                ids = torch.full((len(idx), width), self.tokenizer.pad_token_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for r, i in enumerate(idx):  # left padding: every row ends where generation starts
                    ids[r, width - len(prompts[i]):] = torch.tensor(prompts[i])
                    mask[r, width - len(prompts[i]):] = 1
                out = self.model.generate(input_ids=ids.to(self.device),
                                          attention_mask=mask.to(self.device), **gen_kw)
                for r, i in enumerate(idx):
                    text = self.tokenizer.decode(out[r, width:], skip_special_tokens=True)
                    replies[i] = _cut_at_stop(text, params.stop)
        return replies


def _cut_at_stop(text: str, stop: list[str]) -> str:
    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text
