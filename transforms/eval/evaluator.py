"""Score an item table with one LLMEngine: generation (parse the reply) or log-likelihood.

Both return a *predictions* table, one row per item and method, in the long form the metrics and
the report read: the item's id, label and subset columns, then `model`, `method`
("generate" | "loglik_acc" | "loglik_acc_norm" | "loglik_acc_bytes"), `variant` ("original" | "swapped"), `prompt`
(id@version, the provenance of every number), `pred`, `correct`, `status` and the raw `reply` or
log-probabilities. `correct` is null when the reply was not an answer (refusal, empty, unparsable).

The model is asked through the LLM base: `engine` is an `Asker` (transforms/llm/asking.py: the answer
cache, retries with backoff, the recorded questions) or a bare engine, which gets an asker with an
in-memory cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.eval import items as I
from transforms.eval.metrics import loglik_picks
from transforms.eval.parse import UNPARSABLE, parse_answer
from transforms.eval.templates import LoglikContexts, answer_index, prompt_for
from transforms.llm.answers import REQUEST_FAILED
from transforms.llm.asking import Asker
from transforms.llm.base import GenerationParams, LLMEngine

log = logging.getLogger("piqaforge.eval")

GENERATE, LOGLIK_ACC, LOGLIK_NORM = "generate", "loglik_acc", "loglik_acc_norm"
LOGLIK_BYTES = "loglik_acc_bytes"  # lm-eval's acc_bytes (Global PIQA): normalised by UTF-8 bytes
ORIGINAL, SWAPPED = "original", "swapped"
PREDICTION_COLUMNS = ("model", "method", "variant", "prompt", "pred", "correct", "status", "reply",
                      "ll_sol1", "ll_sol2", "ntok_sol1", "ntok_sol2")
Progress = Callable[[int, int], None]


def _carry(items: pa.Table) -> dict[str, list[Any]]:
    """The item columns a prediction keeps; an item column named like a prediction column is renamed."""
    keep = [I.ID, I.LABEL, *[c for c in I.subset_columns(items) if c != I.LABEL]]
    out = {}
    for col in dict.fromkeys(keep):
        name = f"item_{col}" if col in PREDICTION_COLUMNS else col
        out[name] = items.column(col).to_pylist()
    return out


def _batches(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, max(1, size))]


def generate_predictions(engine: LLMEngine | Asker, items: pa.Table, *, model: str, params: GenerationParams,
                         prompts: dict[str, str] | None = None, variant: str = ORIGINAL, batch_size: int = 16,
                         cues: LoglikContexts | None = None, progress: Progress | None = None) -> pa.Table:
    """Ask the model to name the better solution; parse each reply exactly, then leniently.

    With `cues`, the language's answer cue ("Answer:") is appended on its own line after the
    fenced item, and the recorded prompt becomes "<prompt>@<v>+<cues>@<v>".
    """
    n = items.num_rows
    cols = items.select([I.LANG, I.GOAL, I.SOL1, I.SOL2, I.LABEL]).to_pydict()
    conversations, refs, parsers = [], [], []
    for i in range(n):
        prompt = prompt_for(cols[I.LANG][i], prompts)
        rendered = prompt.render(goal=cols[I.GOAL][i], sol1=cols[I.SOL1][i], sol2=cols[I.SOL2][i])
        messages = [dict(m) for m in rendered.messages]
        ref = rendered.ref
        cue = cues.cue_for(cols[I.LANG][i]) if cues is not None else ""
        if cue:
            messages[-1]["content"] += "\n" + cue
            ref = f"{ref}+{cues.ref}" if cues is not None else ref
        conversations.append(messages)
        refs.append(ref)
        parsers.append(answer_index(prompt))
    replies: list[str] = []
    failures: list[str | None] = []
    started = time.perf_counter()
    asker = Asker.wrap(engine, model, chunk_size=batch_size)
    ids = [f"{i}|{variant}" for i in items.column(I.ID).to_pylist()] if I.ID in items.schema.names else None
    for lo, hi in _batches(n, batch_size):
        got = asker.ask_chat_or_none(conversations[lo:hi], params, refs=refs[lo:hi],
                                     ids=ids[lo:hi] if ids is not None else None)
        failures += asker.last_failures or [None] * len(got)
        # a question the endpoint never answered: its reason is the reply, never an empty answer
        replies += [r if r is not None else str(failures[lo + j] or REQUEST_FAILED) for j, r in enumerate(got)]
        if progress:
            progress(hi, n)
    log.info("%s generate/%s: %d items in %.1fs", model, variant, n, time.perf_counter() - started)
    preds: list[int | None] = []
    statuses: list[str] = []
    correct: list[bool | None] = []
    for i, reply in enumerate(replies):
        if failures[i] is not None:
            preds.append(None)
            statuses.append(REQUEST_FAILED)
            correct.append(None)
            continue
        answers, aliases = parsers[i]
        parsed = parse_answer(reply, answers, aliases)
        preds.append(parsed.choice)
        statuses.append(parsed.status)
        correct.append(None if parsed.choice is None else parsed.choice == cols[I.LABEL][i])
    table = {**_carry(items), "model": [model] * n, "method": [GENERATE] * n, "variant": [variant] * n,
             "prompt": refs, "pred": preds, "correct": correct, "status": statuses, "reply": replies}
    return _to_table(table, n)


def loglik_scores(engine: LLMEngine | Asker, contexts: Sequence[str], sol1: Sequence[str], sol2: Sequence[str],
                  batch_size: int = 16, progress: Progress | None = None, ref: str = "") -> np.ndarray:
    """(n, 4) array: sum log P(' ' + sol | context) for sol1, sol2, then their token counts (NaN where the
    endpoint did not answer: `loglik_scores_and_failures` says why)."""
    return loglik_scores_and_failures(engine, contexts, sol1, sol2, batch_size, progress, ref)[0]


def loglik_scores_and_failures(engine: LLMEngine | Asker, contexts: Sequence[str], sol1: Sequence[str],
                               sol2: Sequence[str], batch_size: int = 16, progress: Progress | None = None,
                               ref: str = "") -> tuple[np.ndarray, list[str | None]]:
    """The scores of `loglik_scores` and, per item, why the endpoint did not answer one of its two
    requests (None where both were answered); such an item's scores are NaN."""
    n = len(contexts)
    out = np.zeros((n, 4), dtype=np.float64)
    failures: list[str | None] = [None] * n
    asker = Asker.wrap(engine, "loglik", chunk_size=2 * batch_size)
    for lo, hi in _batches(n, batch_size):
        requests = [(contexts[i], " " + sol1[i]) for i in range(lo, hi)]
        requests += [(contexts[i], " " + sol2[i]) for i in range(lo, hi)]
        res = asker.ask_loglikelihood(requests, ref=ref)
        why = asker.last_failures or [None] * len(res)
        m = hi - lo
        for j in range(m):
            a, b = res[j], res[m + j]
            if a is None or b is None:
                failures[lo + j] = why[j] or why[m + j] or REQUEST_FAILED
                out[lo + j] = [np.nan, np.nan, 0, 0]
            else:
                out[lo + j] = [a[0], b[0], a[1], b[1]]
        if progress:
            progress(hi, n)
    return out, failures


def choose(scores: np.ndarray, sol1: Sequence[str], sol2: Sequence[str], norm: str = "chars") -> dict[str, np.ndarray]:
    """acc: argmax of the summed log-probability; acc_norm: argmax of it divided by the solution's length;
    acc_bytes: divided by the UTF-8 byte length (metrics.loglik_picks), whatever `norm` is.

    lm-evaluation-harness divides by `len(choice)`, the number of characters of the solution string
    (without the leading space); for ASCII text that equals its byte length. `norm="bytes"` divides by
    the UTF-8 byte length instead. Ties go to sol1, as np.argmax does in lm-eval.
    """
    if norm not in ("chars", "bytes"):
        raise ValueError(f"norm must be 'chars' or 'bytes', not {norm!r}")

    def length(s: str) -> float:
        return float(max(1, len(s.encode("utf-8")) if norm == "bytes" else len(s)))

    lengths = np.array([[length(a), length(b)] for a, b in zip(sol1, sol2, strict=True)]).reshape(-1, 2)
    acc = np.argmax(scores[:, :2], axis=1)
    acc_norm = np.argmax(scores[:, :2] / lengths, axis=1)
    acc_bytes = loglik_picks(scores[:, :2], sol1, sol2)["acc_bytes"]
    return {LOGLIK_ACC: acc, LOGLIK_NORM: acc_norm, LOGLIK_BYTES: acc_bytes}


def loglik_predictions(engine: LLMEngine | Asker, items: pa.Table, *, model: str, contexts: LoglikContexts,
                       norm: str = "chars", batch_size: int = 16, hide_goal: bool = False,
                       progress: Progress | None = None) -> pa.Table:
    """Score both solutions as continuations of the goal's context; three methods: acc, acc_norm, acc_bytes.

    `hide_goal` renders the context with an empty goal: the solution-only baseline of the audit.
    """
    n = items.num_rows
    cols = items.select([I.LANG, I.GOAL, I.SOL1, I.SOL2, I.LABEL]).to_pydict()
    ctx = [contexts.render(cols[I.LANG][i], "" if hide_goal else cols[I.GOAL][i]) for i in range(n)]
    started = time.perf_counter()
    scores, failures = loglik_scores_and_failures(engine, ctx, cols[I.SOL1], cols[I.SOL2], batch_size, progress,
                                                  ref=contexts.ref)
    log.info("%s loglik: %d items in %.1fs", model, n, time.perf_counter() - started)
    picks = choose(scores, cols[I.SOL1], cols[I.SOL2], norm)
    labels = np.asarray(cols[I.LABEL])
    # A score that is not a number is an unusable reply: no prediction, counted as unparsable; an item
    # the endpoint did not answer is counted as request_failed, its reason in `reply`.
    usable = np.isfinite(scores[:, :2]).any(axis=1) & ~np.isnan(scores[:, :2]).any(axis=1)
    status = [REQUEST_FAILED if why else "scored" if ok else UNPARSABLE
              for ok, why in zip(usable, failures, strict=True)]
    parts = []
    for method, pred in picks.items():
        preds = [int(p) if ok else None for p, ok in zip(pred.tolist(), usable, strict=True)]
        correct = [bool(c) if ok else None for c, ok in zip((pred == labels).tolist(), usable, strict=True)]
        table = {**_carry(items), "model": [model] * n, "method": [method] * n, "variant": [ORIGINAL] * n,
                 "prompt": [contexts.ref] * n, "pred": preds, "correct": correct,
                 "status": status, "reply": failures if any(failures) else [None] * n,
                 "ll_sol1": scores[:, 0].tolist(), "ll_sol2": scores[:, 1].tolist(),
                 "ntok_sol1": scores[:, 2].astype(int).tolist(), "ntok_sol2": scores[:, 3].astype(int).tolist()}
        parts.append(_to_table(table, n))
    return pa.concat_tables(parts, promote_options="default")


_TYPES = {"pred": pa.int8(), "correct": pa.bool_(), "ll_sol1": pa.float64(), "ll_sol2": pa.float64(),
          "ntok_sol1": pa.int32(), "ntok_sol2": pa.int32(), "label": pa.int8()}


def _to_table(columns: dict[str, list[Any]], n: int) -> pa.Table:
    for name in PREDICTION_COLUMNS:
        columns.setdefault(name, [None] * n)
    arrays = {k: pa.array(v, type=_TYPES.get(k)) if k in _TYPES else pa.array(v) for k, v in columns.items()}
    for k in ("reply", "prompt", "status", "model", "method", "variant"):
        if pa.types.is_null(arrays[k].type):
            arrays[k] = arrays[k].cast(pa.string())
    return pa.table(arrays)
