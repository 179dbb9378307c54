"""review=auto: LLM annotators fill a review batch through the same import path as people.

Each annotator is one (engine, prompt) pair; it picks one of the prompt's six options by their
log-probabilities (`LLMEngine.choose`), mapped in order to the review verdicts. Its judgments are
written to `auto-judgments.jsonl` in the batch folder and imported exactly like a filled CSV; the
batch record says `automatic: true` (and so does every reviewed row, `review_automatic`), so a
release card can say plainly that no person reviewed the items.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.llm.base import EngineConfig
from transforms.review.batch import VERDICTS, ReviewError, batch_dir, load_batch
from transforms.review.importing import ImportResult, import_judgments, read_judgment_files, write_import


class AutoReviewConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engines: list[EngineConfig] = Field(default_factory=lambda: [EngineConfig()],
                                        description="Engines of the LLM annotators (any LLMEngine backend).")
    prompts: list[str] = Field(default_factory=lambda: ["review/en", "review/en_strict"],
                               description="Prompt ids under prompts/; annotator i uses engine i mod E and "
                               "prompt (i div E) mod P, so annotators differ in model or prompt.")
    annotators: int = Field(2, ge=1, description="How many LLM annotators judge every item.")
    batch_size: int = Field(16, ge=1, description="Items per engine call.")
    n_boot: int = Field(1000, ge=0, description="Bootstrap replicates for the agreement intervals.")


def annotator_plan(cfg: AutoReviewConfig) -> list[tuple[EngineConfig, str]]:
    combos = [(e, p) for p in cfg.prompts for e in cfg.engines]
    if cfg.annotators > len(combos):
        raise ReviewError(f"{cfg.annotators} LLM annotators need as many distinct (engine, prompt) pairs; "
                          f"{len(cfg.engines)} engine(s) x {len(cfg.prompts)} prompt(s) give {len(combos)}")
    return combos[: cfg.annotators]


def judge(engine: Any, prompt_id: str, items: list[dict[str, Any]], batch_size: int) -> list[str]:
    """One verdict per item from one (loaded) engine and prompt."""
    from transforms.llm.prompts import load_prompt

    prompt = load_prompt(prompt_id)
    if len(prompt.options) != len(VERDICTS):
        raise ReviewError(f"prompt {prompt.ref} must have {len(VERDICTS)} options mapping to {list(VERDICTS)}")
    to_verdict = dict(zip(prompt.options, VERDICTS, strict=True))
    texts = [engine.render_chat(prompt.render(goal=r["goal"], sol1=r["sol1"], sol2=r["sol2"]).messages)
             for r in items]
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        out += [to_verdict[c] for c in engine.choose(texts[start:start + batch_size], prompt.options)]
    return out


def auto_review(lake: Lake, batch: str, cfg: AutoReviewConfig) -> tuple[ImportResult, RunManifest]:
    from transforms.llm.base import build_engine
    from transforms.llm.prompts import load_prompt

    start = time.perf_counter()
    record, items = load_batch(lake, batch)
    plan = annotator_plan(cfg)
    rows = items.select(["id", "goal", "sol1", "sol2"]).to_pylist()
    names = [f"llm:{e.short_name}:{load_prompt(p).ref}" for e, p in plan]
    judgments: list[dict[str, Any]] = []
    for engine_cfg in {e.model_dump_json(): e for e, _ in plan}.values():
        engine = build_engine(engine_cfg)
        engine.setup()
        try:
            for (e, prompt_id), name in zip(plan, names, strict=True):
                if e != engine_cfg:
                    continue
                for row, verdict in zip(rows, judge(engine, prompt_id, rows, cfg.batch_size), strict=True):
                    judgments.append({"item_id": str(row["id"]), "annotator": name, "verdict": verdict,
                                      "model": e.model, "prompt": load_prompt(prompt_id).ref})
        finally:
            engine.close()
    folder = batch_dir(lake, batch)
    path = folder / "auto-judgments.jsonl"
    path.write_text("".join(json.dumps(j, ensure_ascii=False) + "\n" for j in judgments), encoding="utf-8")
    record.annotators, record.named_annotators, record.automatic = names, True, True
    record.write(folder)
    result = import_judgments(lake, batch, read_judgment_files([path]), n_boot=cfg.n_boot)
    return result, write_import(lake, result, [path], seconds=time.perf_counter() - start)
