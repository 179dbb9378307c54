"""Ko-PIQA: filter a Korean Q&A crawl down to PIQA-style physical questions.

Front half: read → normalise → length/language filters → exact dedup → MinHash near-dup removal.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import Field

from jobs.config import JobConfig
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, StageRecord
from transforms.core.report import write_report
from transforms.core.runner import init_ray, run_pipeline
from transforms.dedup.exact import ExactDedup
from transforms.dedup.minhash import MinHashDedup
from transforms.io.crawl import CrawlInput, CrawlSource, EmptyInputError
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


def stages(config: Config) -> list[Any]:
    # In run order; later stages (near-dup, LLM filters) append after exact_dedup.
    return [
        config.normalize,
        config.length_filter,
        config.langid,
        config.exact_dedup,
        config.minhash_dedup,
    ]


def _stop_if_nothing_read(record: StageRecord) -> None:
    if record.name == CrawlSource.name and record.rows_in == 0:
        raise EmptyInputError("the input holds no records (files with a header or footer only?)")
    if record.name == CrawlSource.name and record.rows_kept == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(record.rows_dropped.items()))
        raise EmptyInputError(f"no usable rows in the input: all {record.rows_in} records were rejected "
                              f"({reasons}); they are in {record.outputs.get('rejected')}")


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    return run_stages(config, stages(config), run_id=run_id, resume=resume)


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
    write_report(manifest, report)
    return {"run_id": manifest.run_id, **manifest.outputs, "report": str(report)}
