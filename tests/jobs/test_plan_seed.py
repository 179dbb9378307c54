"""`piqaforge plan`'s seed is written by its benchmark, never typed: benchmarks/bench_crawl_cost.py --write-seed
measures each stage's rows per CPU-second and takes the keep shares from a finished run's manifest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jobs.plan import plan
from transforms.core.manifest import RunManifest
from transforms.flow.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"


@pytest.mark.slow  # a front-half run of the bundled sample and a measurement on 3,000 generated rows: ~40 s
def test_the_seed_is_a_results_file_of_measured_rates_and_a_real_runs_shares(tmp_path, ray_local, shared_data):
    from benchmarks.bench_crawl_cost import measure, write_seed
    from transforms.flow.orchestrator import run_recipe

    front = {"ensemble": False, "input.paths": [str(SAMPLE)]}
    run_recipe(load_recipe("ko-piqa", front), lake=tmp_path / "lake", run_id="shares")
    manifest = tmp_path / "lake" / "runs" / "shares-crawl" / "manifest.json"
    measured, _ = measure(3000, 50, shared_data, {"ensemble": False})
    seed = tmp_path / "seeds" / "ko-piqa.json"
    write_seed(seed, measured, manifest, rows=3000, embed_rows=50, load_start=[0.0, 0.0, 0.0])

    data = json.loads(seed.read_text(encoding="utf-8"))
    assert data["format"] == "piqaforge-result/1" and data["benchmark"] == "benchmarks/bench_crawl_cost.py"
    assert data["machine"]["logical_cpus"] >= 1 and data["commit"]
    run = RunManifest.load(manifest)
    stages = data["data"]["runs"]["crawl"]
    assert [(n, s["rows_in"], s["rows_kept"]) for n, s in stages.items()] == \
        [(s.name, s.rows_in or s.rows_created, s.rows_kept) for s in run.stages]  # the run's shares, stage for stage
    assert stages["read_crawl"]["rows_in"] == run.stages[0].rows_created > 0  # a source's rows in are the rows it read
    rates = {m["stage"]: m["rows_in"] / m["cpu_s"] for m in measured if m.get("cpu_s")}
    assert rates and {n: s["rows_per_cpu_second"] for n, s in stages.items() if "rows_per_cpu_second" in s} == \
        {n: round(r, 1) for n, r in rates.items()}
    assert data["data"]["inputs"] == [i["path"] for i in run.inputs]

    planned = plan(load_recipe("ko-piqa", {"ensemble": False}), 1_000_000, tmp_path / "empty-lake",
                   ROOT / "cluster.yaml", seeds=seed.parent)
    measured_stages = [p for p in planned if p.rate_from is not None]
    assert measured_stages and all(not p.rate_from.hand_written for p in measured_stages)
    assert all(str(seed) in p.rate_from.source and f"; measured: {data['command']})" in p.rate_from.source
               for p in measured_stages)
