"""The plan's forecast against a run ten times larger, on local Ray (jobs/plan.py; the full-size check is
benchmarks/bench_forecast.py, a million rows planned from runs of at most 50,000).

A generated Korean crawl (benchmarks/common.build_crawl: real question pieces from ../shared/data, 10% near and 3%
exact copies, each size on its own seed) goes through crawl-filter's front half (read, clean-up, length, language,
exact and MinHash dedup) in three runs: 5,000 and 10,000 rows into one lake, from which `plan` fits each stage's
fixed cost and cost per row, and 100,000 rows into another, which the plan forecasts. A second 10,000-row run on
another crawl measures how far two runs of one size differ: a stage's forecast must be within 25% of the large
run's CPU-seconds, or within three times that spread where the stage's CPU clock is that noisy. Only stages that
cost more than 5% of the large run are held to it, as in the benchmark. No CPU-second figure of this machine is
written here: the band comes from the runs the test makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.plan import plan
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.flow.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster.yaml"

FRONT = """recipe: plan-forecast
description: "crawl-filter's front half on a generated crawl (tests/jobs/test_plan_forecast.py)"
dataset: plan-forecast
language: {{code: ko, name: Korean}}
params:
  input: {{paths: ["{crawl}"], format: jsonl, columns: {{id: id, text: text, source: source}}}}
runs:
  - name: crawl
    source: {{stage: read_crawl, spec: "${{input}}"}}
    stages:
      - {{stage: normalize}}
      - {{stage: length_filter, min_chars: 4, max_chars: 2000}}
      - {{stage: langid, languages: [ko]}}
      - {{stage: exact_dedup}}
      - {{stage: minhash_dedup, ngram: 5, num_perm: 128, threshold: 0.7}}
"""


def _crawl(tmp: Path, rows: int, seed: int) -> Path:
    import polars as pl

    from benchmarks.common import build_crawl

    path = tmp / f"crawl-{rows}-s{seed}.jsonl"
    table = build_crawl(rows, seed=seed).table.select(["id", "text", "source"])

    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    frame.write_ndjson(path)
    return path


def _run(tmp: Path, lake: Path, rows: int, seed: int, run_id: str) -> RunManifest:
    from transforms.flow.orchestrator import run_recipe

    recipe = tmp / f"{run_id}.yaml"
    recipe.write_text(FRONT.format(crawl=_crawl(tmp, rows, seed)), encoding="utf-8")
    out = run_recipe(load_recipe(str(recipe)), lake=lake, run_id=run_id)
    manifest = RunManifest.load(Lake(lake).manifest_path(out["runs"]["crawl"]))
    assert manifest.status == "succeeded"
    return manifest


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.ray
def test_a_forecast_from_runs_of_10k_rows_holds_for_a_run_ten_times_larger(ray_local, tmp_path):
    fit_lake, big_lake, spare_lake = tmp_path / "fit", tmp_path / "big", tmp_path / "spare"
    _run(tmp_path, fit_lake, 1_000, 9, "warm")  # the crawl files' pieces, fastText and numba loaded once
    for rows, seed in ((5_000, 1), (10_000, 2)):
        _run(tmp_path, fit_lake, rows, seed, f"small{rows}")
    again = {s.name: s for s in _run(tmp_path, spare_lake, 10_000, 3, "again").stages}
    small = {s.name: s for s in RunManifest.load(Lake(fit_lake).manifest_path("small10000-crawl")).stages}
    big = _run(tmp_path, big_lake, 100_000, 4, "big")

    recipe = load_recipe(str(tmp_path / "big.yaml"))
    planned = {p.stage: p for p in plan(recipe, 100_000, fit_lake, CLUSTER, seeds=tmp_path, floor=0)}
    total = sum(s.cpu_seconds or 0.0 for s in big.stages)
    held = 0
    for stage in big.stages:
        if not stage.cpu_seconds or stage.cpu_seconds < 0.05 * total:
            continue
        p = planned[stage.name]
        assert p.cpu_h is not None, f"{stage.name}: not forecast ({p.note})"
        # the fit came from the two small runs, not one run's start-up stretched to 100k rows
        assert p.rate_from is not None and p.rate_from.fixed_cpu_seconds is not None, stage.name
        a, b = small[stage.name].cpu_seconds or 0.0, again[stage.name].cpu_seconds or 0.0
        spread = abs(a - b) / max((a + b) / 2, 1e-9)
        band = max(0.25, 3 * spread)
        ratio = p.cpu_h * 3600 / stage.cpu_seconds
        assert abs(ratio - 1) <= band, (f"{stage.name}: forecast {p.cpu_h * 3600:.2f} CPU-s against "
                                        f"{stage.cpu_seconds:.2f} measured (ratio {ratio:.2f}, band {band:.2f})")
        held += 1
    assert held >= 2, "fewer than two stages cost more than 5% of the run: nothing was checked"
