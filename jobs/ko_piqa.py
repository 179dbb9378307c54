"""Ko-PIQA: filter a Korean Q&A crawl down to PIQA-style physical questions.

Front half: read → normalise → length/language filters → exact dedup → MinHash near-dup removal.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from jobs.config import JobConfig
from transforms.core.lake import Lake
from transforms.core.runner import init_ray, run_pipeline
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.text.normalize import NormalizeText


class Config(JobConfig):
    dataset: str = "ko-piqa"
    input: CrawlInput = Field(..., description="The crawl to read.")
    normalize: NormalizeText = Field(default_factory=NormalizeText)


def stages(config: Config) -> list[Any]:
    return [config.normalize]


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    init_ray(config.ray_address, config.num_cpus)
    lake = Lake(config.lake)
    manifest = run_pipeline(job="ko-piqa", dataset=config.dataset, source=CrawlSource(config.input),
                            stages=stages(config), lake=lake, config=config.model_dump(), run_id=run_id,
                            resume=resume)
    return {"run_id": manifest.run_id, **manifest.outputs}
