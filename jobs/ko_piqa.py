"""Ko-PIQA: filter a Korean Q&A crawl down to PIQA-style physical questions.

Front half: read → normalise → length/language filters → exact dedup → MinHash near-dup removal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from jobs.config import JobConfig
from jobs.ko_piqa_items import ItemsConfig
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, StageRecord
from transforms.core.report import write_report
from transforms.core.runner import init_ray, run_pipeline
from transforms.dedup.exact import ExactDedup
from transforms.dedup.minhash import MinHashDedup
from transforms.io.crawl import CrawlInput, CrawlSource, EmptyInputError
from transforms.judge.member import LinearClassifier
from transforms.judge.run_eval import JudgesReport
from transforms.llm.cultural import CulturalTagger
from transforms.llm.ensemble import EnsembleClassify, summarise_run
from transforms.llm.prefilter import Prefilter, SupervisedPrefilter
from transforms.llm.sampling import SampleGeneralAndCultural
from transforms.text.langid import LanguageFilter
from transforms.text.normalize import NormalizeText
from transforms.text.quality import LengthFilter


class Config(JobConfig):
    dataset: str = "ko-piqa"
    input: CrawlInput = Field(..., description="The crawl to read.")
    normalize: NormalizeText = Field(default_factory=NormalizeText)
    length_filter: LengthFilter = Field(default_factory=LengthFilter, description="Empty/short/long text.")
    langid: LanguageFilter = Field(default_factory=lambda: LanguageFilter(languages=["ko"]),
                                   description="fastText language ID; keeps the job's languages.")
    exact_dedup: ExactDedup = Field(default_factory=ExactDedup, description="Exact duplicates of the text.")
    minhash_dedup: MinHashDedup = Field(default_factory=MinHashDedup,
                                        description="Near-duplicates by MinHash LSH (docs/minhash.md).")
    # Back half (docs/ensemble.md): prefilter → LLM ensemble → cultural tag → annotation sample.
    prefilter: Prefilter | None = Field(
        default_factory=SupervisedPrefilter, description="mode supervised (default: a linear judge trained on seed "
        "labels) or distilled (learns the ensemble on a sample); null sends every row to the ensemble.")
    ensemble: EnsembleClassify | None = Field(None, description="The LLM classifier ensemble (null: skip the "
                                              "back half).")
    cultural: CulturalTagger = Field(default_factory=CulturalTagger)
    sample: SampleGeneralAndCultural = Field(default_factory=SampleGeneralAndCultural)
    items: ItemsConfig | None = Field(None, description="After the crawl: refinement into items, review, dedup, "
                                      "balancing, release, evaluation (jobs/ko_piqa_items.py); null stops at the sample.")
    review: Literal["export", "auto"] | None = Field(None, description="Shorthand for items.review: export (a batch "
                                                     "for people, the default) or auto (LLM annotators, dry run).")
    judges: JudgesReport = Field(default_factory=JudgesReport, description="Labels the run report measures "
                                 "the kept rows against (docs/judges.md).")


def stages(config: Config, run_dir: Path | None = None) -> list[Any]:
    """The chain in run order; `run_dir` (runs/<run_id>) holds the LLM verdict cache and reports."""
    chain: list[Any] = [
        config.normalize,
        config.length_filter,
        config.langid,
        config.exact_dedup,
        config.minhash_dedup,
    ]
    if config.ensemble is not None:
        chain += llm_stages(config, run_dir)
    return chain


def llm_stages(config: Config, run_dir: Path | None) -> list[Any]:
    assert config.ensemble is not None
    cache = str(run_dir / "cache" / "ensemble") if run_dir else None
    embed_cache = str(Path(config.lake).resolve() / "cache" / "embeddings")
    members = [m.model_copy(update={"embed_cache_dir": embed_cache, "judge": m.judge.model_copy(
        update={"labels": _resolve(m.judge.labels), "extra_labels": [_resolve(f) for f in m.judge.extra_labels]})})
        if isinstance(m, LinearClassifier) else m for m in config.ensemble.classifiers]
    ensemble = config.ensemble.model_copy(update={"cache_dir": cache, "classifiers": members})
    chain: list[Any] = []
    if isinstance(config.prefilter, SupervisedPrefilter):
        labels = _resolve(config.prefilter.judge.labels)
        chain.append(config.prefilter.model_copy(update={
            "judge": config.prefilter.judge.model_copy(update={"labels": labels}),
            "output_dir": str(run_dir / "prefilter") if run_dir else None,
            "embed_cache_dir": str(Path(config.lake).resolve() / "cache" / "embeddings")}))
    elif config.prefilter is not None:
        chain.append(config.prefilter.model_copy(update={
            "teacher": ensemble, "output_dir": str(run_dir / "prefilter") if run_dir else None,
            "cache_dir": str(run_dir / "cache" / "prefilter") if run_dir else None}))
    chain += [ensemble, config.cultural.model_copy(update={"cache_dir": cache}),
              config.sample.model_copy(update={"output_dir": str(run_dir) if run_dir else None})]
    return chain


def _resolve(path: str) -> str:
    """A relative labels path is read from the working directory, else from the repository."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return str(p.resolve())
    return str(Path(__file__).resolve().parents[1] / p)


def _attach_llm_reports(manifest: RunManifest, run_dir: Path, path: Path) -> None:
    """Prefilter recall/pass rate, ensemble calls and the sample's counts go into the manifest extras."""
    for key, name in (("prefilter", "prefilter/report.json"), ("sample", "sampling.json")):
        if (run_dir / name).exists():
            manifest.extras[key] = json.loads((run_dir / name).read_text(encoding="utf-8"))
    for record in manifest.stages:
        if record.name == EnsembleClassify.name:
            manifest.extras["ensemble"] = summarise_run(Path(record.outputs["kept"]),
                                                        Path(record.outputs["rejected"]))
    manifest.write(path)


def _attach_judges(config: Config, manifest: RunManifest, run_dir: Path, path: Path) -> None:
    """Kept rows against the labels (+ the latest judge-eval) -> extras["judges"] and judges.html."""
    from transforms.judge.report import render_judges
    from transforms.judge.run_eval import evaluate_run

    labels = [p for p in (_resolve(x) for x in config.judges.labels) if Path(p).exists()]
    if not labels or not any(s.name == "prefilter" for s in manifest.stages):
        return
    extras: dict[str, Any] = {"run": evaluate_run(manifest, labels)}
    if config.judges.judge_eval and Path(config.judges.judge_eval).exists():
        extras["judge_eval"] = json.loads(Path(config.judges.judge_eval).read_text(encoding="utf-8"))
    manifest.extras["judges"] = extras
    manifest.write(path)
    run = extras["run"]
    for group, m in run["groups"].items():
        print(f"ko-piqa: kept vs labels, {group}: precision {m['precision']:.2f}, recall {m['recall']:.2f} "
              f"({m['tp']} of {m['positives']} physical questions kept, {m['fp']} others)", file=sys.stderr)
    print(f"ko-piqa: {run['kept_rows']} rows kept, {run['kept_from_negative_sources']} from 3i4k/chatbot",
          file=sys.stderr)
    (run_dir / "judges.html").write_text("<!doctype html><html><head><meta charset='utf-8'><title>judges</title>"
                                         "</head><body>" + render_judges(extras) + "</body></html>", encoding="utf-8")


def _stop_if_nothing_read(record: StageRecord) -> None:
    if record.name == CrawlSource.name and record.rows_created == 0:
        raise EmptyInputError("the input holds no records (files with a header or footer only?)")
    if record.name == CrawlSource.name and record.rows_kept == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(record.rows_dropped.items()))
        raise EmptyInputError(f"no usable rows in the input: all {record.rows_created} records were rejected "
                              f"({reasons}); they are in {record.outputs.get('rejected')}")


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    run_id = run_id or Lake.new_run_id("ko-piqa")
    chain = stages(config, Lake(config.lake).run_dir(run_id))
    out = run_stages(config, chain, run_id=run_id, resume=resume)
    if config.items is not None and config.ensemble is not None:
        from jobs.ko_piqa_items import run_back_half

        items = config.items if config.review is None else config.items.model_copy(update={"review": config.review})
        out.update(run_back_half(Lake(config.lake), run_id, items, config.dataset, resume))
    return out


def run_stages(config: Config, chain: list[Any], *, run_id: str | None = None,
               resume: bool = False) -> dict[str, Any]:
    """Run the crawl through `chain` (tests run a prefix of `stages(config)`)."""
    source = CrawlSource(config.input)  # checks files and column mapping before Ray starts
    init_ray(config.ray_address, config.num_cpus)
    lake = Lake(config.lake)
    run_id = run_id or Lake.new_run_id("ko-piqa")
    report = lake.run_dir(run_id) / "report.html"
    try:
        manifest = run_pipeline(job="ko-piqa", dataset=config.dataset, source=source,
                                stages=chain, lake=lake, config=config.model_dump(), run_id=run_id,
                                resume=resume, after_stage=_stop_if_nothing_read)
    except BaseException:  # a failed run gets its report too: the funnel shows where it stopped
        if lake.manifest_path(run_id).exists():
            write_report(RunManifest.load(lake.manifest_path(run_id)), report)
            print(f"ko-piqa: report of the failed run: {report}", file=sys.stderr)
        raise
    _attach_llm_reports(manifest, lake.run_dir(run_id), lake.manifest_path(run_id))
    _attach_judges(config, manifest, lake.run_dir(run_id), lake.manifest_path(run_id))
    write_report(manifest, report)
    return {"run_id": manifest.run_id, **manifest.outputs, "report": str(report)}
