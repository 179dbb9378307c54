"""`piqaforge plan` (jobs/plan.py, issue 42): its arithmetic against a finished run, and what it refuses.

The run: a tiny recipe (the bundled Korean crawl's first 400 rows through the front half) on local Ray into a
temporary lake; the plan's rows must be the planned rows times that run's keep shares, and its CPU-hours the
rows over that run's rows per CPU-second, both recomputed here from the manifest. No timing is asserted: the
rates are whatever that run measured. The other tests write manifests by hand (a GPU stage, a cluster run, a
stage measured with other models, the seed file) and need no Ray.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.plan import identity, plan
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest, StageRecord
from transforms.flow.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster.yaml"
LOCAL = "driver + its local Ray processes"

TINY = """recipe: plan-tiny
description: "the front half on a few crawl rows (tests/jobs/test_plan.py)"
dataset: plan-tiny
language: {{code: ko, name: Korean}}
params:
  input: {{paths: ["{crawl}"], format: jsonl, columns: {{id: id, text: text, source: source, url: url}}}}
runs:
  - name: crawl
    source: {{stage: read_crawl, spec: "${{input}}"}}
    stages:
      - {{stage: normalize}}
      - {{stage: length_filter, min_chars: 10, max_chars: 2000}}
      - {{stage: langid, languages: [ko], method: fasttext, script_shortcut: {{ko: 0.9}}}}
      - {{stage: exact_dedup}}
"""


def _recipe_file(tmp: Path, rows: int = 400, extra: str = "") -> Path:
    crawl = tmp / "crawl.jsonl"
    lines = (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").read_text(encoding="utf-8").splitlines()[:rows]
    crawl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = tmp / "plan-tiny.yaml"
    path.write_text(TINY.format(crawl=crawl) + extra, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def finished_run(ray_local, tmp_path_factory):
    from transforms.flow.orchestrator import run_recipe

    tmp = tmp_path_factory.mktemp("plan")
    path = _recipe_file(tmp)
    lake = tmp / "lake"
    out = run_recipe(load_recipe(str(path)), lake=lake, run_id="tiny")
    manifest = RunManifest.load(Lake(lake).manifest_path(out["runs"]["crawl"]))
    assert manifest.status == "succeeded"
    return path, lake, manifest


@pytest.mark.ray
def test_the_plan_is_the_finished_runs_shares_and_rates_times_the_rows(finished_run, tmp_path):
    path, lake, manifest = finished_run
    rows = 3_010_000
    # floor=0: the arithmetic of a 400-row run's rates (the default floor refuses them: test_a_tiny_runs_rate...)
    plans = plan(load_recipe(str(path)), rows, lake, CLUSTER, {"cpu_hour": 0.5}, seeds=tmp_path, floor=0)
    assert [p.stage for p in plans] == [s.name for s in manifest.stages]
    want_in = float(rows)
    for p, rec in zip(plans, manifest.stages, strict=True):
        processed = rec.rows_created if rec.kind == "source" else rec.rows_in
        assert p.rows_in == pytest.approx(want_in, rel=1e-12), p.stage
        assert p.rows_kept == pytest.approx(want_in * rec.rows_kept / processed, rel=1e-12), p.stage
        assert p.share_from is not None and p.share_from.source == f"run {manifest.run_id}"
        assert rec.cpu_scope == LOCAL
        if rec.cpu_seconds:  # a stage too short for the CPU clock to see stays unmeasured
            assert p.unit == "CPU" and p.rate == pytest.approx(processed / rec.cpu_seconds)
            assert p.cpu_h == pytest.approx(want_in * rec.cpu_seconds / processed / 3600, rel=1e-9), p.stage
            # the crawl stages ask for one CPU a task: the whole cpu_worker type, at 70% of ideal scaling
            assert p.wall_h == pytest.approx(p.cpu_h / (32 * 32 * 0.7))
            # per node-hour: 32 nodes busy for wall_h, each at 32 CPUs x cpu_hour
            assert p.usd == pytest.approx(p.wall_h * 32 * 32 * 0.5) and p.node == "cpu_worker"
            assert p.rate_from.machine.startswith(str(manifest.machine["cpu_model"]))
        else:
            assert p.cpu_h is None and p.note.startswith("unmeasured")
        want_in = p.rows_kept
    assert any(p.rate for p in plans)  # the run's CPU clock saw its stages


@pytest.mark.ray
def test_the_command_prints_the_table_with_its_sources(finished_run, capsys):
    from jobs.cli import main

    path, lake, manifest = finished_run
    assert main(["plan", str(path), "--rows", "1000", "--lake", str(lake), "--price", "cpu_hour=0.5",
                 "--min-rate-rows", "0"]) == 0
    out = capsys.readouterr().out
    assert f"run {manifest.run_id}: {manifest.machine['cpu_model']}" in out
    assert "exact_dedup" in out and "1,000" in out and "70% of ideal scaling (assumed)" in out


def _manifest(lake: Path, run_id: str, stages: list[StageRecord], job: str = "plan-tiny:crawl",
              machine: dict | None = None) -> None:
    m = RunManifest(run_id=run_id, job=job, dataset="plan-tiny", status="succeeded",
                    finished_at="2026-12-01T00:00:00+00:00", stages=stages)
    m.machine = machine or {"cpu_model": "Test CPU", "logical_cpus": 8, "gpus": ["NVIDIA H100 80GB HBM3"]}
    m.write(Lake(lake).manifest_path(run_id))


def _record(index: int, name: str, rows_in: int, kept: int, cpu_s: float | None, seconds: float = 10.0,
            scope: str = LOCAL, **config) -> StageRecord:
    source = index == 0
    return StageRecord(index=index, name=name, kind="source" if source else "filter", rows_in=0 if source else rows_in,
                       rows_created=rows_in if source else 0, rows_kept=kept, rows_dropped={"x": rows_in - kept},
                       seconds=seconds, cpu_seconds=cpu_s, cpu_scope=scope, config=config)


def test_a_gpu_stage_is_planned_from_its_rows_per_gpu_second_and_priced_per_node_hour(tmp_path):
    gpu = {"gpus": 1, "env": "vllm", "concurrency": 2}
    path = _recipe_file(tmp_path, extra="")
    text = path.read_text(encoding="utf-8").replace("- {stage: exact_dedup}",
                                                    "- {stage: exact_dedup, resources: {gpus: 1, env: vllm, concurrency: 2}}")
    path.write_text(text, encoding="utf-8")
    recipe = load_recipe(str(path))
    lake = tmp_path / "lake"
    _manifest(lake, "gpu-run", [_record(0, "read_crawl", 1000, 1000, 2.0), _record(1, "normalize", 1000, 1000, 1.0),
                                _record(2, "length_filter", 1000, 800, 1.0), _record(3, "langid", 800, 600, 4.0),
                                _record(4, "exact_dedup", 600, 300, 9.0, seconds=30.0, resources=gpu)])
    plans = plan(recipe, 100_000, lake, CLUSTER, {"gpu_h100x1_vllm": 10.0}, seeds=tmp_path, floor=0)
    dedup = plans[-1]
    assert dedup.rows_in == pytest.approx(100_000 * 0.8 * 0.75) and dedup.rows_kept == pytest.approx(30_000)
    # 600 rows in 2 actors x 1 GPU x 30 s held: 10 rows per GPU-second
    assert dedup.unit == "GPU" and dedup.rate == pytest.approx(10.0) and dedup.node == "gpu_h100x1_vllm"
    assert dedup.gpu_h == pytest.approx(60_000 / 10 / 3600) and dedup.cpu_h == 0
    assert dedup.wall_h == pytest.approx(dedup.gpu_h / (2 * 0.7))  # two actors of one GPU each
    assert dedup.usd == pytest.approx(dedup.wall_h * 2 * 10.0)  # two 1xH100 nodes busy
    assert "NVIDIA H100" in dedup.rate_from.machine
    assert plans[0].usd is None  # no price for cpu_worker or per CPU-hour: no price


def test_a_cluster_runs_driver_only_cpu_and_other_models_are_unmeasured(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    lake = tmp_path / "lake"
    driver = "driver only (the stage ran on cluster workers)"
    _manifest(lake, "cluster-run", [_record(0, "read_crawl", 1000, 1000, 2.0, scope=driver),
                                    _record(1, "normalize", 1000, 1000, 1.0, engine={"model": "other"})])
    plans = plan(recipe, 5000, lake, CLUSTER, seeds=tmp_path)
    read, normalize = plans[0], plans[1]
    # the share holds (rows are rows wherever they ran), the driver's CPU is not the workers'
    assert read.rows_kept == 5000 and read.rate is None and "measured its driver only" in read.note
    assert normalize.rows_kept is None and normalize.note.startswith("unmeasured")
    assert "model=other" in normalize.note
    assert all(p.rows_in is None and p.cpu_h is None for p in plans[2:])  # nothing is guessed after a gap


def test_without_a_run_the_seed_file_is_used_and_named(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "plan-tiny.json").write_text(json.dumps({
        "measured_at": "2026-11-28", "machine": {"cpu_model": "Seed CPU", "logical_cpus": 2},
        "runs": {"crawl": {"read_crawl": {"rows_in": 100, "rows_kept": 50, "rows_per_cpu_second": 1000.0,
                                          "rate_rows": 100_000}}}}))
    plans = plan(recipe, 10_000, tmp_path / "empty-lake", CLUSTER, seeds=seeds)
    assert plans[0].rows_kept == 5000 and plans[0].cpu_h == pytest.approx(10_000 / 1000 / 3600)
    assert "plan-tiny.json (2026-11-28" in plans[0].rate_from.source and plans[0].rate_from.machine.startswith("Seed")
    assert "seed: hand-written, not measured" in plans[0].rate_from.source
    assert plans[1].note.startswith("unmeasured")


def test_identity_is_the_models_and_backends_anywhere_in_a_config():
    config = {"judge": {"embedder": {"backend": "e5-torch", "model": "m"}}, "classifiers": [{"engine": {"model": "q"}}]}
    assert identity(config) == ["backend=e5-torch", "model=m", "model=q"]
