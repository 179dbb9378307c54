"""Evaluate models on a release the way the seed papers do, and audit the release for shortcuts.

    piqaforge run evaluate --release <path> --models local,qwen7b

Phases: read the release → per model: generation (original and swapped order) and log-likelihood
→ summary (accuracy per subset with Wilson intervals, omitted replies, swap consistency, random
baselines) → the papers' table (Markdown, CSV) and a plot → artifact audit → lm-eval task export.
Predictions are written in parts of `chunk_size` items; `--resume <run_id>` reuses finished parts.
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

from jobs.config import ConfigError, JobConfig
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, code_version, fingerprint_file
from transforms.eval import items as I
from transforms.eval.audit import audit_markdown, audit_release
from transforms.eval.evaluator import ORIGINAL, SWAPPED, generate_predictions, loglik_predictions
from transforms.eval.lm_eval_export import export_lm_eval_task
from transforms.eval.report import markdown, paper_rows, plot, summarize, write_csv
from transforms.eval.templates import load_loglik_contexts
from transforms.llm.base import EngineConfig, GenerationParams, LLMEngine, build_engine

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
    modes: list[Literal["generate", "loglik"]] = Field(default_factory=lambda: ["generate", "loglik"])
    swap: bool = Field(True, description="Also generate with the two solutions swapped (position bias).")
    generate_limit: int | None = Field(None, ge=1, description="Fixed-seed subset size for generation (None: all).")
    loglik_limit: int | None = Field(None, ge=1, description="Fixed-seed subset size for log-likelihood (None: all).")
    seed: int = Field(0, description="Seed of the subsets.")
    prompts: dict[str, str] = Field(default_factory=dict, description="Language -> prompt id override, "
                                    "e.g. {ko: eval_ko/ko, default: eval_generic/en}.")
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


def _parts_dir(out: Path, model: str, method: str, variant: str) -> Path:
    return out / "predictions" / model / f"{method}-{variant}"


def _chunked(out_dir: Path, items: pa.Table, chunk_size: int, resume: bool, score: Any) -> pa.Table:
    """Score `items` in parts of chunk_size rows; a finished part is reused when resuming."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for k, lo in enumerate(range(0, items.num_rows, chunk_size)):
        path = out_dir / f"part-{k:05d}.parquet"
        if resume and path.exists():
            parts.append(pq.read_table(path))
            continue
        table = score(items.slice(lo, chunk_size))
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(path)
        parts.append(table)
        log.info("%s: %d/%d items", out_dir.relative_to(out_dir.parents[2]), min(lo + chunk_size, items.num_rows),
                 items.num_rows)
    return pa.concat_tables(parts, promote_options="default") if parts else pa.table({})


def evaluate_model(engine: LLMEngine, name: str, items: pa.Table, config: Config, out: Path,
                   resume: bool = False) -> list[pa.Table]:
    tables = []
    if "generate" in config.modes:
        cues = load_loglik_contexts() if config.answer_cue else None
        subset = I.sample_items(items, config.generate_limit, config.seed)
        variants = [(ORIGINAL, subset)] + ([(SWAPPED, I.swap_solutions(subset))] if config.swap else [])
        for variant, table in variants:
            def score(part: pa.Table, variant: str = variant) -> pa.Table:
                return generate_predictions(engine, part, model=name, params=config.generation,
                                            prompts=config.prompts, variant=variant, batch_size=config.batch_size,
                                            cues=cues)
            tables.append(_chunked(_parts_dir(out, name, "generate", variant), table, config.chunk_size, resume, score))
    if "loglik" in config.modes:
        subset = I.sample_items(items, config.loglik_limit, config.seed)
        contexts = load_loglik_contexts()

        def score_ll(part: pa.Table) -> pa.Table:
            return loglik_predictions(engine, part, model=name, contexts=contexts, norm=config.norm,
                                      batch_size=config.batch_size)
        tables.append(_chunked(_parts_dir(out, name, "loglik", ORIGINAL), subset, config.chunk_size, resume, score_ll))
    return tables


def load_release(config: Config) -> pa.Table:
    from transforms.piqa.formats import read_items

    path = Path(config.release)
    if not path.exists():
        raise FileNotFoundError(f"release not found: {path}")
    return I.prepare_items(read_items(path), default_lang=config.default_lang, default_source=path.stem)


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    unknown = [m for m in config.models if m not in config.engines]
    if unknown:
        raise ConfigError(f"unknown model(s) {unknown}; configured engines: {sorted(config.engines)}")
    lake = Lake(config.lake).create()
    run_id = run_id or Lake.new_run_id("evaluate")
    out = Path(config.out_dir) if config.out_dir else lake.run_dir(run_id) / "eval"
    out.mkdir(parents=True, exist_ok=True)
    name = config.name or Path(config.release).stem
    manifest = RunManifest(run_id=run_id, job="evaluate", dataset=config.dataset, config=config.model_dump(),
                           code_version=code_version())
    manifest_path = lake.manifest_path(run_id)
    timings: dict[str, float] = {}
    try:
        started = time.perf_counter()
        items = load_release(config)
        release_path = Path(config.release)
        manifest.inputs = [fingerprint_file(release_path)] if release_path.is_file() else [{"path": str(release_path)}]
        timings["read"] = time.perf_counter() - started
        log.info("release %s: %d items", config.release, items.num_rows)
        predictions: list[pa.Table] = []
        keep_for_audit = config.models[0] if config.audit and config.audit_solution_only else None
        audit_engine: LLMEngine | None = None
        for model in config.models:
            started = time.perf_counter()
            engine = build_engine(config.engines[model])
            engine.setup()
            try:
                predictions += evaluate_model(engine, model, items, config, out, resume)
            finally:
                if model == keep_for_audit:
                    audit_engine = engine
                else:
                    engine.close()
            timings[f"model:{model}"] = time.perf_counter() - started
        started = time.perf_counter()
        audit: dict[str, Any] | None = None
        if config.audit:
            try:
                audit = audit_release(items, config.audit_bound, engine=audit_engine, model=keep_for_audit or "")
            finally:
                if audit_engine is not None:
                    audit_engine.close()
        timings["audit"] = time.perf_counter() - started
        started = time.perf_counter()
        scored = [p for p in predictions if p.num_rows]
        preds = pa.concat_tables(scored, promote_options="default") if scored else pa.table({})
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
            exported = export_lm_eval_task(items, out / "lm_eval", name)
            outputs["lm_eval"] = exported["yaml"]
        timings["report"] = time.perf_counter() - started
        manifest.outputs = {**outputs, "manifest": str(manifest_path)}
        manifest.extras.update({"timings_s": {k: round(v, 2) for k, v in timings.items()},
                                "table": rows, "flagged": summary.get("audit", {}).get("flagged")})
        manifest.status = "succeeded"
    except BaseException as err:
        manifest.status = "failed"
        manifest.error = f"{type(err).__name__}: {err}"
        raise
    finally:
        import datetime as dt

        manifest.finished_at = dt.datetime.now(dt.UTC).isoformat()
        manifest.write(manifest_path)
    flagged = bool(audit and audit["flagged"])
    return {"run_id": run_id, "out": str(out), **outputs, "flagged": flagged,
            "exit_code": 3 if flagged and config.fail_on_flag else 0}
