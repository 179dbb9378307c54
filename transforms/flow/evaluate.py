"""Evaluate models on a release the way the seed papers do, and audit the release for shortcuts.

    piqaforge run evaluate --release <path> --models local,qwen7b

Phases: read the release → per model: generation (original and swapped order) and log-likelihood
→ summary (accuracy per subset with Wilson intervals, omitted replies, swap consistency, random
baselines) → the papers' table (Markdown, CSV) and a plot → artifact audit → lm-eval task export.
Predictions are a run of stages (read_table → mark_subsets → predict, transforms/eval/stages.py) with
resumable partitions of `chunk_size` items; `--resume <run_id>` skips the partitions already scored.
Everything lands in <lake>/runs/<run_id>/eval/ (or `out_dir`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, field_validator

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.eval import items as I
from transforms.eval.audit import audit_markdown, audit_release
from transforms.eval.lm_eval_export import export_lm_eval_task
from transforms.eval.report import markdown, paper_rows, plot, summarize, write_csv
from transforms.eval.templates import prompts_for_style
from transforms.flow.tools import ConfigError, JobConfig
from transforms.llm.asking import Asker
from transforms.llm.base import EngineConfig, GenerationParams, build_engine
from transforms.report.run_report import write_report

log = logging.getLogger("piqaforge.evaluate")


def _default_engines() -> dict[str, EngineConfig]:
    return {"local": EngineConfig(backend="transformers", model="gemma3-270m", name="local", params_b=0.27)}


class Config(JobConfig):
    dataset: str = "eval"
    release: str = Field(..., description="The release to evaluate: a Parquet file/folder, a PIQA/COPA JSONL, "
                         "an XCOPA or PARus folder (anything transforms.piqa.formats.read_items reads).")
    name: str | None = Field(None, description="Name used in titles and the lm-eval task (default: the path's stem).")
    models: list[str] = Field(default_factory=lambda: ["local"], description="Names from `engines` to evaluate.")
    engines: dict[str, EngineConfig] = Field(default_factory=_default_engines,
                                             description="Model name -> engine config (backend, model, options).")
    modes: list[Literal["generate", "loglik"]] = Field(default_factory=lambda: list[Literal["generate", "loglik"]](
        ["generate", "loglik"]))
    swap: bool = Field(True, description="Also generate with the two solutions swapped (position bias).")
    generate_limit: int | None = Field(None, ge=1, description="Fixed-seed subset size for generation (None: all).")
    loglik_limit: int | None = Field(None, ge=1, description="Fixed-seed subset size for log-likelihood (None: all).")
    seed: int = Field(0, description="Seed of the subsets.")
    prompts: dict[str, str] = Field(default_factory=dict, description="Language -> prompt id override, "
                                    "e.g. {ko: eval_ko/ko, default: eval_generic/en}.")
    prompt_style: Literal["paper", "global_piqa"] = Field(
        "paper", description="Generation prompt: each paper's own per language (paper) or the Global-PIQA-style A/B "
        "prompt for every language (global_piqa, prompts/eval_global/en.yaml); `prompts` still overrides.")
    generation: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=8))
    answer_cue: bool = Field(True, description="Append the language's answer cue ('Answer:') after the item; "
                             "base models without a chat template continue the item text otherwise.")
    norm: Literal["chars", "bytes"] = Field("chars", description="acc_norm length unit (lm-eval: chars).")
    batch_size: int = Field(8, ge=1, description="Conversations / requests per engine call.")
    chunk_size: int = Field(64, ge=1, description="Items per checkpointed predictions part.")
    default_lang: str = Field("en", description="Language of items without one.")
    out_dir: str | None = Field(None, description="Output folder (default <lake>/runs/<run_id>/eval).")
    audit: bool = Field(True, description="Run the artifact audit on the release.")
    audit_bound: float = Field(0.6, gt=0, lt=1, description="Flag the release when a shortcut baseline beats this.")
    audit_solution_only: bool = Field(False, description="Add the model solution-only baseline (first model).")
    fail_on_flag: bool = Field(False, description="Exit with code 3 when the audit flags the release.")
    export_lm_eval: bool = Field(True, description="Write an lm-evaluation-harness task for the release.")

    @field_validator("models", "modes", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        # `--models a,b` arrives as the string "a,b".
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value


def load_release(config: Config) -> pa.Table:
    from transforms.piqa.formats import read_items

    path = Path(config.release)
    if not path.exists():
        raise FileNotFoundError(f"release not found: {path}")
    return I.prepare_items(read_items(path), default_lang=config.default_lang, default_source=path.stem)


def predict_on_runner(config: Config, items: pa.Table, lake: Lake, run_id: str, resume: bool) -> pa.Table:
    """Items → subsets → predictions as a run of stages; the predictions come back from its output."""
    from transforms.core.lake import read_table
    from transforms.core.runner import init_ray, run_pipeline
    from transforms.eval.stages import MarkEvalSubsets, PredictItems, predictions_for_summary
    from transforms.flow.context import engine_placement
    from transforms.io.sources import TableSource
    from transforms.release.writer import find_manifest

    engines = {m: config.engines[m] for m in config.models}
    predict = PredictItems(engines=engines, modes=list(config.modes), swap=config.swap, generation=config.generation,
                           prompts=prompts_for_style(config.prompt_style, config.prompts),
                           answer_cue=config.answer_cue, norm=config.norm,
                           batch_size=config.batch_size, cache_dir=str(answer_cache(lake, run_id)))
    placed = engine_placement({"engines": {m: c.model_dump() for m, c in engines.items()}}).get("resources")
    if placed:  # on a cluster: where the evaluated engines' profile places them (a vLLM worker)
        predict.resources = type(predict.resources).model_validate({**predict.resources.model_dump(), **placed})
    predict.attach_engines({m: build_engine(cfg) for m, cfg in engines.items()})  # built here, loaded in setup
    marks = MarkEvalSubsets(generate_limit=config.generate_limit if "generate" in config.modes else 0,
                            loglik_limit=config.loglik_limit if "loglik" in config.modes else 0, seed=config.seed)
    upstream = find_manifest(config.release)
    init_ray(config.ray_address, config.num_cpus)
    manifest = run_pipeline(job="evaluate", dataset=config.dataset, source=TableSource(items, label=str(config.release)),
                            stages=[marks, predict], lake=lake, config=config.model_dump(), run_id=run_id,
                            resume=resume, partition_rows=config.chunk_size,
                            parents=[upstream.run_id] if upstream else [])
    curated = Path(manifest.outputs["curated"])
    return predictions_for_summary(read_table(curated)) if curated.exists() else pa.table({})


def _on_ray() -> bool:
    import ray

    return bool(ray.is_initialized())


def _audit_task(items: pa.Table, config: Config, model: str, cache_dir: str) -> dict[str, Any]:
    engine = Asker.for_engine(build_engine(config.engines[model]), label=f"audit-{model}",
                              chunk_size=2 * config.batch_size, cache_dir=cache_dir)
    try:
        return audit_release(items, config.audit_bound, engine=engine, model=model)
    finally:
        engine.close()


def _audit_placed(items: pa.Table, config: Config, model: str, cache_dir: str) -> dict[str, Any]:
    """The audit with the model's solution-only baseline, in a Ray task placed by the engine's `resources`."""
    import ray

    from transforms.core.stage import placement_args

    task = ray.remote(**placement_args(config.engines[model].resources))(_audit_task)
    out: dict[str, Any] = ray.get(task.remote(items, config, model, cache_dir))
    return out


def answer_cache(lake: Lake, run_id: str) -> Path:
    """The evaluated models' answers: a resumed run asks only the questions not answered yet."""
    return lake.run_dir(run_id) / "cache" / "llm"


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    unknown = [m for m in config.models if m not in config.engines]
    if unknown:
        raise ConfigError(f"unknown model(s) {unknown}; configured engines: {sorted(config.engines)}")
    lake = Lake(config.lake).create()
    run_id = run_id or Lake.new_run_id("evaluate")
    out = Path(config.out_dir) if config.out_dir else lake.run_dir(run_id) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    name = config.name or Path(config.release).stem
    manifest_path = lake.manifest_path(run_id)
    timings: dict[str, float] = {}
    try:
        started = time.perf_counter()
        items = load_release(config)
        release_path = Path(config.release)
        inputs = [fingerprint_file(release_path)] if release_path.is_file() else [{"path": str(release_path)}]
        timings["read"] = time.perf_counter() - started
        log.info("release %s: %d items", config.release, items.num_rows)
        keep_for_audit = config.models[0] if config.audit and config.audit_solution_only else None
        started = time.perf_counter()
        preds = predict_on_runner(config, items, lake, run_id, resume)
        timings["predict"] = time.perf_counter() - started
        audit_engine: Asker | None = None
        audit: dict[str, Any] | None = None
        placed_audit = bool(keep_for_audit and config.engines[keep_for_audit].resources and _on_ray())
        if placed_audit:  # on a cluster the evaluated model is loaded where its profile places it, not here
            audit = _audit_placed(items, config, str(keep_for_audit), str(answer_cache(lake, run_id)))
        elif keep_for_audit:  # asked through the LLM base, its answers cached beside the predictions'
            audit_engine = Asker.for_engine(build_engine(config.engines[keep_for_audit]),
                                            label=f"audit-{keep_for_audit}", chunk_size=2 * config.batch_size,
                                            cache_dir=str(answer_cache(lake, run_id)))
        started = time.perf_counter()
        if config.audit and not placed_audit:
            try:
                audit = audit_release(items, config.audit_bound, engine=audit_engine, model=keep_for_audit or "")
            finally:
                if audit_engine is not None:
                    audit_engine.close()
        timings["audit"] = time.perf_counter() - started
        started = time.perf_counter()
        if preds.num_rows:
            pq.write_table(preds, out / "predictions.parquet")
            summary = summarize(preds, items)
        else:
            summary = {"n_items": items.num_rows, "runs": [], "swap_consistency": {}, "random_baseline": {}}
        summary["release"] = str(config.release)
        if audit is not None:
            summary["audit"] = audit
        (out / "results.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str), "utf-8")
        rows = paper_rows(summary) if preds.num_rows else []
        write_csv(rows, out / "results.csv")
        md = markdown(summary, title=f"{name}: evaluation") if preds.num_rows else f"## {name}\n\nNo predictions.\n"
        if audit is not None:
            md += "\n" + audit_markdown(audit, title=f"{name}: artifact audit")
        (out / "results.md").write_text(md, "utf-8")
        outputs = {"results": str(out / "results.md"), "csv": str(out / "results.csv"),
                   "json": str(out / "results.json")}
        if preds.num_rows:
            outputs["plot"] = str(plot(summary, out / "accuracy.png", title=name))
            outputs["predictions"] = str(out / "predictions.parquet")
        if config.export_lm_eval:
            release_dir = Path(config.release) if Path(config.release).is_dir() else Path(config.release).parent
            version = release_dir.name if (release_dir / "RELEASED").exists() else "1.0"  # the release's own version
            exported = export_lm_eval_task(items, out / "lm_eval", name, version=version)
            outputs["lm_eval"] = exported["yaml"]
        timings["report"] = time.perf_counter() - started
        manifest = RunManifest.load(manifest_path)
        manifest.inputs = inputs
        manifest.outputs.update({**outputs, "manifest": str(manifest_path)})
        manifest.extras.update({"timings_s": {k: round(v, 2) for k, v in timings.items()},
                                "table": rows, "flagged": summary.get("audit", {}).get("flagged")})
        manifest.write(manifest_path)
        report = write_report(manifest, lake.run_dir(run_id) / "report.html")
    except BaseException as err:
        if manifest_path.exists():  # the runner wrote it; record what failed after the stages too
            failed = RunManifest.load(manifest_path)
            failed.status, failed.error = "failed", f"{type(err).__name__}: {err}"
            failed.write(manifest_path)
            write_report(failed, lake.run_dir(run_id) / "report.html")
        raise
    flagged = bool(audit and audit["flagged"])
    return {"run_id": run_id, "out": str(out), **outputs, "report": str(report), "flagged": flagged,
            "exit_code": 3 if flagged and config.fail_on_flag else 0}
