"""The plan's forecast against a larger run, on local Ray (jobs/plan.py; the full-size check is
benchmarks/bench_forecast.py: a million rows planned from runs of 10,000 and 50,000).

crawl-filter as it ships (the front half, the static tier, the judge), with the bundled Korean seed labels, on
generated Korean crawls (benchmarks/common.build_crawl: real question pieces from ../shared/data, 10% near and 3%
exact copies, each run on its own seed). Two runs of 500 and 1,250 rows go into one lake, from which `plan` fits
each stage's fixed cost and cost per row; a run of 5,000 rows, ten times the smaller and four times the larger, goes
into another lake and is forecast (sizes kept small: on a 2-core CPU without bfloat16 instructions the judge embeds
a few dozen rows a second; this test runs alone, in the extended tier). A second 1,250-row run on another crawl measures how
far two runs of one size differ (sigma), and the
band follows from it: a forecast through two points extrapolated by k times their distance moves by
sqrt((1 + k)^2 + k^2) sigma when each point moves by sigma. A stage costing more than 5% of the large run (the judge,
here as at a million rows) must be forecast within 25% plus three times that. No CPU-second figure of this machine
is written here: the band comes from the runs the test makes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jobs.plan import plan
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.flow.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster.yaml"
KOREAN = {"language.code": "ko", "language.name": "Korean", "label": "physical",
          "data.labels": str(ROOT / "lake" / "samples" / "ko_seed_labels.jsonl")}
SMALL, BIG = (500, 1_250), 5_000


def _crawl(tmp: Path, rows: int, seed: int) -> Path:
    from benchmarks.bench_scale import build_crawl_file

    path = tmp / f"crawl-{rows}-s{seed}.jsonl"
    if not path.exists():  # the run and the plan read the same file
        build_crawl_file(rows, path, seed)
    return path


def _recipe(tmp: Path, rows: int, seed: int):
    return load_recipe("crawl-filter", KOREAN | {"input.paths": [str(_crawl(tmp, rows, seed))]})


def _run(tmp: Path, lake: Path, rows: int, seed: int, run_id: str) -> dict:
    from transforms.flow.orchestrator import run_recipe

    out = run_recipe(_recipe(tmp, rows, seed), lake=lake, run_id=run_id)
    manifest = RunManifest.load(Lake(lake).manifest_path(out["runs"]["crawl"]))
    assert manifest.status == "succeeded"
    return {s.name: s for s in manifest.stages}


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.ray
def test_a_forecast_from_two_small_runs_holds_for_a_run_ten_times_the_smaller(ray_local, tmp_path):
    fit_lake, spare_lake, big_lake = tmp_path / "fit", tmp_path / "spare", tmp_path / "big"
    _run(tmp_path, spare_lake, 300, 9, "warm")  # fastText, numba, the model and the static table loaded once
    fits = [_run(tmp_path, fit_lake, rows, 1 + i, f"small{rows}") for i, rows in enumerate(SMALL)]
    again = _run(tmp_path, spare_lake, SMALL[1], 3, "again")
    big = _run(tmp_path, big_lake, BIG, 4, "big")
    planned = {p.stage: p for p in plan(_recipe(tmp_path, BIG, 4), BIG, fit_lake, CLUSTER, seeds=tmp_path,
                                        floor=0) if p.run == "crawl"}

    total = sum(s.cpu_seconds or 0.0 for s in big.values())
    lines, bad, held = [], [], 0
    for name, stage in big.items():
        p = planned[name]
        a, b = fits[1][name].cpu_seconds or 0.0, again[name].cpu_seconds or 0.0
        x1, x2 = (fits[i][name].rows_in or fits[i][name].rows_created for i in (0, 1))
        xb = stage.rows_in or stage.rows_created
        k = (xb - x2) / max(x2 - x1, 1)
        sigma = abs(a - b) / math.sqrt(2)
        allowed = 0.25 * (stage.cpu_seconds or 0.0) + 3 * sigma * math.sqrt((1 + k) ** 2 + k ** 2)
        want = p.cpu_h * 3600 if p.cpu_h is not None else None
        lines.append(f"{name:22} {SMALL[0]}: {fits[0][name].cpu_seconds} {SMALL[1]}: {a} again: {b} {BIG}: "
                     f"{stage.cpu_seconds} forecast: {want} allowed: +-{allowed:.2f} ({p.note})")
        if not stage.cpu_seconds or stage.cpu_seconds < 0.05 * total:
            continue
        held += 1
        fitted = p.rate_from is not None and p.rate_from.fixed_cpu_seconds is not None  # both small runs, fitted
        if not fitted or want is None or abs(want - stage.cpu_seconds) > allowed:
            bad.append(name)
    table = "\n".join(lines)
    print(table)  # shown with -s, and under a failure
    assert held >= 1 and "supervised_prefilter" in big, f"no stage costs more than 5% of the run:\n{table}"
    assert not bad, f"forecast outside its band for {bad}:\n{table}"
