"""review=auto: LLM annotators fill a review batch through the same import path as people.

Each annotator is one (engine, prompt) pair; it picks one of the prompt's six options by their
log-probabilities (`LLMEngine.option_logprobs`), mapped in order to the review verdicts. Small models
prefer whichever solution is shown first (Qwen2.5 1.5B picked solution 1 in 43 of 44 J-PIQA judgments),
so by default every item is also shown with its solutions swapped and the two readings are averaged
(`both_orders`): the option probabilities of the swapped reading have A and B exchanged back before
the average, so a pure position preference cancels out and only a preference for the content stays. Its judgments are
written to `auto-judgments.jsonl` in the batch folder and imported exactly like a filled CSV; the
batch record says `automatic: true` (and so does every reviewed row, `review_automatic`), so a
release card can say plainly that no person reviewed the items.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from transforms.core.accounting import read_ledgers
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.llm.answers import REQUEST_FAILED
from transforms.llm.base import EngineConfig
from transforms.review.batch import VERDICTS, ReviewError, batch_dir, load_batch
from transforms.review.import_run import write_import
from transforms.review.judgment_files import read_judgment_files
from transforms.review.validate import ImportResult, import_judgments


class AutoReviewConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engines: list[EngineConfig] = Field(default_factory=lambda: [EngineConfig()],
                                        description="Engines of the LLM annotators (any LLMEngine backend).")
    prompts: list[str] = Field(default_factory=lambda: ["review/en", "review/en_strict"],
                               description="Prompt ids under prompts/; annotator i uses engine i mod E and "
                               "prompt (i div E) mod P, so annotators differ in model or prompt.")
    annotators: int = Field(2, ge=1, description="How many LLM annotators judge every item.")
    batch_size: int = Field(16, ge=1, description="Items per engine call.")
    cache_dir: str | None = Field(None, description="Answer cache of the annotators (one row per item x "
                                  "annotator x solution order); unset: <lake>/cache/llm, so a rerun of the "
                                  "review asks nothing twice.")
    n_boot: int = Field(1000, ge=0, description="Bootstrap replicates for the agreement intervals.")
    both_orders: bool = Field(True, description="Also judge every item with its solutions swapped and average "
                              "the two readings' option probabilities (cancels a preference for the first "
                              "solution); doubles the calls.")
    inconsistent: Literal["count", "abstain"] = Field(
        "count", description="A judgment whose two readings disagree (both_orders): 'count' keeps the averaged "
        "verdict; 'abstain' withholds it (written to auto-abstained.jsonl), so the item lacks that annotator "
        "and is dropped as not reviewed / no consensus, for people to judge, instead of a near coin toss.")


def annotator_plan(cfg: AutoReviewConfig) -> list[tuple[EngineConfig, str]]:
    combos = [(e, p) for p in cfg.prompts for e in cfg.engines]
    if cfg.annotators > len(combos):
        raise ReviewError(f"{cfg.annotators} LLM annotators need as many distinct (engine, prompt) pairs; "
                          f"{len(cfg.engines)} engine(s) x {len(cfg.prompts)} prompt(s) give {len(combos)}")
    return combos[: cfg.annotators]


def invalid_scores(logprobs: list[float], n_options: int) -> str | None:
    """Why an engine's option scores cannot be used as a judgment, or None."""
    if len(logprobs) != n_options:
        return f"expected {n_options} option log-probabilities, got {len(logprobs)}"
    if not any(math.isfinite(v) for v in logprobs) or any(math.isnan(v) for v in logprobs):
        return "no finite option log-probability"
    return None


def _probs(logprobs: list[float]) -> list[float]:
    top = max(logprobs)
    exp = [math.exp(v - top) for v in logprobs]
    total = sum(exp)
    return [v / total for v in exp]


def _swapped_back(logprobs: list[float]) -> list[float]:
    """Probabilities of the swapped reading in the item's own terms: its "solution 1 is correct" is the
    item's sol2, so the first two are exchanged."""
    q = _probs(logprobs)
    q[0], q[1] = q[1], q[0]
    return q


def combine_orders(as_shown: list[float], swapped: list[float]) -> list[float]:
    """Verdict probabilities from the two readings of one item, in VERDICTS order: the average of the
    as-shown probabilities and the swapped reading's, exchanged back (`as_shown` / `swapped` are the six
    options' log-probabilities with the solutions in their order and exchanged)."""
    return [(a + b) / 2 for a, b in zip(_probs(as_shown), _swapped_back(swapped), strict=True)]


def judge_detailed(engine: Any, prompt_id: str, items: list[dict[str, Any]], batch_size: int,
                   both_orders: bool = True, *, asker: Any = None) -> list[dict[str, Any]]:
    """One judgment per item from one (loaded) engine and prompt: the verdict, its probability, every
    verdict's probability and, with `both_orders`, the verdict each reading alone would give
    (`position_consistent` when they are the same).

    The engine is asked through the LLM base (`asker`, an `Asker`; by default one around `engine`
    with an in-memory answer cache): one question per item and solution order, cached by what was
    asked, retried with backoff."""
    from transforms.llm.asking import Asker
    from transforms.llm.prompts import load_prompt

    if asker is None:
        asker = Asker.for_engine(engine, label="review", chunk_size=batch_size)

    prompt = load_prompt(prompt_id)
    if len(prompt.options) != len(VERDICTS):
        raise ReviewError(f"prompt {prompt.ref} must have {len(VERDICTS)} options mapping to {list(VERDICTS)}")
    verdicts = list(VERDICTS)

    def logprobs(swap: bool) -> tuple[list[list[float] | None], list[str | None]]:
        convs = [prompt.render(goal=r["goal"], sol1=r["sol2" if swap else "sol1"],
                               sol2=r["sol1" if swap else "sol2"]).messages for r in items]
        order = "swapped" if swap else "shown"
        ids = [f"{r.get('id', i)}|{order}" for i, r in enumerate(items)]
        scores = asker.ask_option_logprobs(convs, prompt.options, ref=prompt.ref, ids=ids)
        return scores, list(getattr(asker, "last_failures", None) or [None] * len(scores))

    def top(p: list[float]) -> str:
        return verdicts[p.index(max(p))]

    def judgment(p: list[float]) -> dict[str, Any]:
        return {"verdict": top(p), "p": round(max(p), 4),
                "probs": {v: round(x, 4) for v, x in zip(verdicts, p, strict=True)}}

    shown, why_shown = logprobs(swap=False)
    swapped, why_swapped = logprobs(swap=True) if both_orders else (shown, why_shown)
    result: list[dict[str, Any]] = []
    for lp, lq, w1, w2 in zip(shown, swapped, why_shown, why_swapped, strict=True):
        if lp is None or lq is None:  # the endpoint never answered: withheld with its reason, never a guess
            result.append({"verdict": None, "invalid": f"{REQUEST_FAILED}: {w1 or w2}", "raw": None})
            continue
        bad = invalid_scores(lp, len(verdicts)) or (invalid_scores(lq, len(verdicts)) if both_orders else None)
        if bad:  # withheld (auto-abstained.jsonl) with the raw scores and the reason, never a guess
            result.append({"verdict": None, "invalid": bad, "raw": json.dumps([lp, lq] if both_orders else lp)})
            continue
        if not both_orders:
            result.append(judgment(_probs(lp)))
            continue
        v_shown, v_swapped = top(_probs(lp)), top(_swapped_back(lq))
        result.append({**judgment(combine_orders(lp, lq)), "verdict_as_shown": v_shown,
                       "verdict_swapped": v_swapped, "position_consistent": v_shown == v_swapped})
    return result


def position_summary(judgments: list[dict[str, Any]]) -> dict[str, Any]:
    """Per LLM annotator: how often it chose solution 1 / solution 2, and (both orders) how often the
    two readings agreed: a position-biased judge shows a low `position_consistent` share."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(j["annotator"] for j in judgments):
        mine = [j for j in judgments if j["annotator"] == name]
        entry: dict[str, Any] = {"judgments": len(mine), "sol1": sum(j["verdict"] == "sol1" for j in mine),
                                 "sol2": sum(j["verdict"] == "sol2" for j in mine)}
        if mine and "verdict_as_shown" in mine[0]:
            entry["as_shown_sol1"] = sum(j["verdict_as_shown"] == "sol1" for j in mine)
            entry["position_consistent"] = sum(bool(j["position_consistent"]) for j in mine)
        out[name] = entry
    return out


def _judge_with(engine: Any, engine_cfg: EngineConfig, mine: list[tuple[str, str]], rows: list[dict[str, Any]],
                batch_size: int, both_orders: bool, cache_dir: str, requests_dir: str | None = None) -> list[dict[str, Any]]:
    """One engine's judgments of every row, for each (prompt, annotator name) it plays; an HTTP engine's
    requests are accounted under `requests_dir` (the review run's, as a stage's are)."""
    from transforms.llm.asking import Asker
    from transforms.llm.prompts import load_prompt

    out: list[dict[str, Any]] = []
    try:
        for prompt_id, name in mine:
            # The engine loads at the first question the cache cannot answer.
            asker = Asker.for_engine(engine, label=name, chunk_size=batch_size, cache_dir=cache_dir)
            asker.record_requests_to(requests_dir)
            detailed = judge_detailed(engine, prompt_id, rows, batch_size, both_orders, asker=asker)
            for row, j in zip(rows, detailed, strict=True):
                out.append({"item_id": str(row["id"]), "annotator": name, **j,
                            "model": engine_cfg.model, "prompt": load_prompt(prompt_id).ref})
    finally:
        engine.close()
    return out


def _on_ray() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return bool(ray.is_initialized())


def _judge_remote(engine_cfg: EngineConfig, mine: list[tuple[str, str]], rows: list[dict[str, Any]],
                  batch_size: int, both_orders: bool, cache_dir: str, requests_dir: str) -> list[dict[str, Any]]:
    from transforms.llm import base

    return _judge_with(base.build_engine(engine_cfg), engine_cfg, mine, rows, batch_size, both_orders, cache_dir,
                       requests_dir)


def _placed(engine_cfg: EngineConfig, mine: list[tuple[str, str]], rows: list[dict[str, Any]], batch_size: int,
            both_orders: bool, cache_dir: str, requests_dir: str) -> list[dict[str, Any]]:
    """`_judge_with` in a Ray task placed by the engine's `resources` (env, GPUs), as a stage would be."""
    import ray

    from transforms.core.stage import placement_args

    task = ray.remote(**placement_args(engine_cfg.resources))(_judge_remote)
    out: list[dict[str, Any]] = ray.get(task.remote(engine_cfg, mine, rows, batch_size, both_orders, cache_dir,
                                                    requests_dir))
    return out


def auto_review(lake: Lake, batch: str, cfg: AutoReviewConfig,
                engine_factory: Any = None) -> tuple[ImportResult, RunManifest]:
    """LLM annotators fill the batch. `engine_factory(config) -> engine` builds each annotator's engine
    (default: the configured backend; the orchestrator passes test doubles this way)."""
    from transforms.llm import base

    build = engine_factory or base.build_engine
    from transforms.llm.prompts import load_prompt

    start = time.perf_counter()
    record, items = load_batch(lake, batch)
    plan = annotator_plan(cfg)
    rows = items.select(["id", "goal", "sol1", "sol2"]).to_pylist()
    names = [f"llm:{e.short_name}:{load_prompt(p).ref}" for e, p in plan]
    judgments: list[dict[str, Any]] = []
    cache_dir = cfg.cache_dir or str(lake.root / "cache" / "llm")
    run_id = Lake.new_run_id("review")  # the review run: its folder holds the annotators' request ledgers
    requests_dir = str(lake.run_dir(run_id) / "requests" / "00-review_import")
    for engine_cfg in {e.model_dump_json(): e for e, _ in plan}.values():
        mine = [(prompt_id, name) for (e, prompt_id), name in zip(plan, names, strict=True) if e == engine_cfg]
        if engine_cfg.resources and _on_ray() and engine_factory is None:
            # on a cluster the engine runs where its profile places it (a vLLM worker), never in the driver
            judgments += _placed(engine_cfg, mine, rows, cfg.batch_size, cfg.both_orders, cache_dir, requests_dir)
        else:
            judgments += _judge_with(build(engine_cfg), engine_cfg, mine, rows, cfg.batch_size,
                                     cfg.both_orders, cache_dir, requests_dir)
    folder = batch_dir(lake, batch)
    abstained = [j for j in judgments if j.get("invalid")]
    judgments = [j for j in judgments if not j.get("invalid")]
    if cfg.both_orders and cfg.inconsistent == "abstain":
        abstained += [j for j in judgments if not j["position_consistent"]]
        judgments = [j for j in judgments if j["position_consistent"]]
    (folder / "auto-abstained.jsonl").write_text(
        "".join(json.dumps(j, ensure_ascii=False) + "\n" for j in abstained), encoding="utf-8")
    path = folder / "auto-judgments.jsonl"
    path.write_text("".join(json.dumps(j, ensure_ascii=False) + "\n" for j in judgments), encoding="utf-8")
    record.annotators, record.named_annotators, record.automatic = names, True, True
    record.write(folder)
    result = import_judgments(lake, batch, read_judgment_files([path]), n_boot=cfg.n_boot)
    result.stats["position"] = position_summary(judgments + [j for j in abstained if not j.get("invalid")])
    result.stats["position_abstained"] = sum(not j.get("invalid") for j in abstained)
    failed = [j for j in abstained if str(j.get("invalid") or "").startswith(REQUEST_FAILED)]
    result.stats["invalid_output"] = sum(bool(j.get("invalid")) for j in abstained) - len(failed)
    result.stats[REQUEST_FAILED] = len(failed)
    manifest = write_import(lake, result, [path], run_id=run_id, seconds=time.perf_counter() - start)
    asked = read_ledgers(requests_dir)
    if asked:  # what the annotators asked of their endpoints, in the review run's record like a stage's
        manifest.stages[0].requests = asked
        manifest.write(lake.manifest_path(run_id))
    return result, manifest
