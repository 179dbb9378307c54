"""`piqaforge plan` is right or says why not (issue 50 §1, §2): totals that name what they leave out, price keys
checked, no input needed, shares that carry their language and input, rates that carry their rows (a tiny run's
refused), shared stages' rates reused, one pricing model, GPU stages modelled until measured. Manifests and seeds
are written by hand here; nothing runs Ray.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_plan import CLUSTER, ROOT, _manifest, _recipe_file, _record

from jobs.cli import main
from jobs.plan import GPU_PEAK_FLOPS, MIN_RATE_ROWS, PROMPT_TOKENS, UTILISATION, plan
from jobs.plan_cli import render
from transforms.flow.recipe import load_recipe

KO_SEED = json.loads((ROOT / "benchmarks" / "rates" / "ko-piqa.json").read_text(encoding="utf-8"))["data"]


def _seed(folder: Path, recipe: str, stages: dict, **top) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"{recipe}.json"
    path.write_text(json.dumps({"measured_at": "2026-12-01", "machine": {"cpu_model": "Seed CPU", "logical_cpus": 2},
                                **top, "runs": {"crawl": stages}}), encoding="utf-8")
    return path


def test_totals_never_print_0_for_what_is_unmeasured_and_name_what_they_leave_out(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    plans = plan(recipe, 20_000_000, tmp_path / "empty-lake", CLUSTER, {"cpu_hour": 0.05}, seeds=tmp_path)
    assert all(p.cpu_h is None for p in plans)
    out = render(plans, recipe.recipe, 20_000_000, 0.7, True)
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert "0.000" not in total and "0.00" not in total and total.split()[1:] == ["unmeasured"] * 4
    assert "the totals leave out 5 stage(s)" in out and "crawl.read_crawl, crawl.normalize" in out
    # one stage measured: its figure with a '+', the others named
    _seed(tmp_path / "seeds", "plan-tiny", {"read_crawl": {"rows_in": 10, "rows_kept": 10, "rows_per_cpu_second": 100.0,
                                                           "rate_rows": 100_000}})
    plans = plan(recipe, 360_000, tmp_path / "empty-lake", CLUSTER, seeds=tmp_path / "seeds")
    total = next(line for line in render(plans, recipe.recipe, 360_000, 0.7, False).splitlines()
                 if line.startswith("total"))
    assert total.split()[1] == "1.000+"


def test_a_price_key_that_matches_no_node_type_or_resource_is_refused_with_the_valid_keys(tmp_path, capsys):
    path = _recipe_file(tmp_path)
    assert main(["plan", str(path), "--rows", "1000", "--lake", str(tmp_path / "lake"), "--price", "h100=3"]) == 2
    err = capsys.readouterr().err
    assert "--price h100: no such node type or resource" in err
    for key in ("cpu_worker", "gpu_h100x1_vllm", "gpu_h100x8_vllm", "cpu_hour", "gpu_hour"):
        assert key in err


def test_one_pricing_model_per_node_hour_whichever_key_gives_the_price(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    seeds = tmp_path / "seeds"
    _seed(seeds, "plan-tiny", {"read_crawl": {"rows_in": 10, "rows_kept": 10, "rows_per_cpu_second": 100.0,
                                              "rate_rows": 100_000}})
    by_cpu = plan(recipe, 10_000_000, tmp_path / "lake", CLUSTER, {"cpu_hour": 0.05}, seeds=seeds)[0]
    by_node = plan(recipe, 10_000_000, tmp_path / "lake", CLUSTER, {"cpu_worker": 0.05 * 32}, seeds=seeds)[0]
    assert by_cpu.usd == pytest.approx(by_node.usd)
    # node-hours: the wall time x the 32 cpu_worker nodes the stage keeps busy
    assert by_node.usd == pytest.approx(by_node.wall_h * 32 * 1.6)


def test_the_input_path_is_not_needed_to_plan(capsys):
    assert main(["plan", "crawl-filter", "--rows", "20000000", "--config", "jobs/configs/crawl-filter-cluster.yaml",
                 "--set", 'input.paths=["/mnt/lake/raw/th_crawl/"]']) == 0
    out = capsys.readouterr().out
    assert "20,000,000" in out and "input not read here (input not found: /mnt/lake/raw/th_crawl/)" in out


def test_a_keep_share_carries_its_language_and_input_and_the_plan_warns_when_they_differ(tmp_path):
    path = _recipe_file(tmp_path)  # a Korean recipe reading tmp_path/crawl.jsonl
    seeds = tmp_path / "seeds"
    _seed(seeds, "plan-tiny", {"read_crawl": {"rows_in": 100, "rows_kept": 90}}, language="ko",
          inputs=[str(tmp_path / "crawl.jsonl")])
    same = plan(load_recipe(str(path)), 1000, tmp_path / "lake", CLUSTER, seeds=seeds)[0]
    assert same.rows_kept == 900 and same.warnings == []
    thai = plan(load_recipe(str(path), {"language.code": "th"}), 1000, tmp_path / "lake", CLUSTER, seeds=seeds)[0]
    assert any("measured on language ko, the recipe's is th" in w for w in thai.warnings)
    other = tmp_path / "other.jsonl"
    other.write_text((tmp_path / "crawl.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    moved = plan(load_recipe(str(path), {"input.paths": [str(other)]}), 1000, tmp_path / "lake", CLUSTER,
                 seeds=seeds)[0]
    assert any(f"the recipe reads {other}" in w for w in moved.warnings)
    # a lake run carries the language its langid kept and the files it read
    lake = tmp_path / "lake"
    _manifest(lake, "ja-run", [_record(0, "read_crawl", 1000, 1000, 2.0), _record(1, "normalize", 1000, 1000, 1.0),
                               _record(2, "length_filter", 1000, 800, 1.0),
                               _record(3, "langid", 800, 600, 4.0, languages=["ja"])])
    from_run = plan(load_recipe(str(path)), 1000, lake, CLUSTER, seeds=seeds)
    assert any("measured on language ja, the recipe's is ko" in w for w in from_run[3].warnings)


def test_a_tiny_runs_rate_is_refused_with_the_reason_and_a_large_runs_is_used(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    lake = tmp_path / "lake"
    _manifest(lake, "tiny", [_record(0, "read_crawl", 800, 800, 4.0)])  # 200 rows per CPU-second: start-up
    tiny = plan(recipe, 20_000_000, lake, CLUSTER, seeds=tmp_path)[0]
    assert tiny.rate is None and tiny.cpu_h is None and tiny.rows_kept == 20_000_000  # the share still holds
    assert f"rests on 800 rows, below the floor of {MIN_RATE_ROWS:,}" in tiny.note
    big = tmp_path / "big-lake"
    _manifest(big, "big", [_record(0, "read_crawl", 200_000, 200_000, 4.0)])
    used = plan(recipe, 20_000_000, big, CLUSTER, seeds=tmp_path)[0]
    assert used.rate == pytest.approx(50_000) and used.rate_from.rate_rows == 200_000
    # a seed's rate says the rows it rests on, or it is refused; a benchmark's warm rate is taken at any size
    seeds = tmp_path / "seeds"
    _seed(seeds, "plan-tiny", {"read_crawl": {"rows_in": 10, "rows_kept": 10, "rows_per_cpu_second": 100.0}})
    assert "the rows its rate rests on are not recorded" in plan(recipe, 10, tmp_path / "x", CLUSTER,
                                                                 seeds=seeds)[0].note
    _seed(seeds, "plan-tiny", {"read_crawl": {"rows_in": 10, "rows_kept": 10, "rows_per_cpu_second": 100.0,
                                              "rate_rows": 200, "startup": "excluded"}})
    assert plan(recipe, 10, tmp_path / "x", CLUSTER, seeds=seeds)[0].rate == 100.0


def test_shared_stages_reuse_the_rates_another_recipe_measured_for_the_same_stage_and_config(tmp_path):
    # crawl-filter without its own seed (a seeds folder holding only ko-piqa's): ko-piqa's seed measured the same
    # front-half stages
    recipe = load_recipe("crawl-filter")
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "ko-piqa.json").write_text((ROOT / "benchmarks" / "rates" / "ko-piqa.json").read_text(encoding="utf-8"),
                                        encoding="utf-8")
    plans = {p.stage: p for p in plan(recipe, 1_000_000, tmp_path / "empty-lake", CLUSTER, seeds=seeds)}
    seeded = KO_SEED["runs"]["crawl"]
    for stage in ("read_crawl", "normalize", "exact_dedup", "minhash_dedup"):
        assert plans[stage].rate == seeded[stage]["rows_per_cpu_second"], stage
        assert plans[stage].rate_from.recipe == "ko-piqa"
        assert any("rate from recipe ko-piqa" in w for w in plans[stage].warnings)
    # another config is another stage: named, not borrowed
    assert plans["length_filter"].rate is None
    assert "recipe ko-piqa measured it with another config (min_chars: 10, not 4)" in plans["length_filter"].note


def test_a_results_file_seed_says_its_command_and_the_bundled_seed_is_one(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "plan-tiny.json").write_text(json.dumps({
        "format": "piqaforge-result/1", "name": "plan-tiny", "benchmark": "benchmarks/bench_crawl_cost.py",
        "command": "python benchmarks/bench_crawl_cost.py --rows 200000", "commit": "0" * 40,
        "date": "2026-12-01T22:00:00Z", "machine": {"cpu_model": "Bench CPU", "logical_cpus": 16}, "figures": {},
        "data": {"language": "ko", "runs": {"crawl": {"read_crawl": {
            "rows_in": 200_000, "rows_kept": 200_000, "rows_per_cpu_second": 300_000.0, "rate_rows": 200_000}}}}}))
    first = plan(recipe, 600_000, tmp_path / "lake", CLUSTER, seeds=seeds)[0]
    assert first.rate == 300_000.0 and first.rate_from.machine.startswith("Bench CPU")
    assert "measured: python benchmarks/bench_crawl_cost.py --rows 200000" in first.rate_from.source
    assert not first.rate_from.hand_written
    ko = plan(load_recipe("ko-piqa"), 1000, tmp_path / "lake", CLUSTER)[0]  # the bundled seed: its benchmark wrote it
    assert not ko.rate_from.hand_written and "measured: python benchmarks/bench_crawl_cost.py" in ko.rate_from.source


def test_a_gpu_stage_without_a_measured_rate_is_modelled_and_counted_in_the_totals(tmp_path):
    recipe = load_recipe("ko-piqa", config_file="jobs/configs/ko-piqa-cluster.yaml")
    plans = {p.stage: p for p in plan(recipe, 3_010_000, tmp_path / "empty-lake", CLUSTER)}
    vote = plans["ensemble"]  # Qwen3-4B and the e5-small members on a 1xH100 vLLM worker
    assert vote.modelled and vote.unit == "GPU" and vote.node == "gpu_h100x1_vllm"
    params = 4e9 + 118e6
    tokens = PROMPT_TOKENS + 8  # the classifier's max_tokens (a one-word vote), read from the stage's config
    assert f"x {tokens} tokens a row" in vote.note
    assert vote.rate == pytest.approx(UTILISATION * GPU_PEAK_FLOPS["H100"] / (2 * params * tokens))
    assert vote.note.startswith("modelled:") and vote.gpu_h == pytest.approx(vote.rows_in / vote.rate / 3600)
    out = render(list(plans.values()), "ko-piqa", 3_010_000, 0.7, False)
    assert "ensemble" in out and "m" in next(line for line in out.splitlines() if " ensemble " in line).split()
    assert "modelled (m): no GPU rate measured" in out
    # the prefilter on its GPU is modelled too, not planned on 4 CPUs at the laptop's rate: an embedder reads its
    # window of embed_chars characters (at most a token each, with <s> and </s>) and writes nothing
    prefilter = plans["supervised_prefilter"]
    assert prefilter.modelled and prefilter.node == "gpu_h100x1_vllm"
    stage = next(s for r in recipe.runs if r.name == "crawl" for s in r.stages if s.get("stage") == "supervised_prefilter")
    window = stage["judge"]["embed_chars"] + 2
    assert f"x {window} tokens a row" in prefilter.note
    assert prefilter.rate == pytest.approx(UTILISATION * GPU_PEAK_FLOPS["H100"] / (2 * 118e6 * window))


def test_a_measured_gpu_rate_replaces_the_modelled_one(tmp_path):
    recipe = load_recipe("crawl-filter", config_file="jobs/configs/crawl-filter-cluster.yaml")
    lake = tmp_path / "lake"
    gpu = {"gpus": 1, "env": "vllm", "concurrency": 1}
    config = {"judge": {"embedder": {"backend": "e5-torch", "model": "multilingual-e5-small"}}, "resources": gpu}
    _manifest(lake, "gpu-run", [_record(6, "supervised_prefilter", 100_000, 5_000, 50.0, seconds=20.0, **config)],
              job="crawl-filter:crawl")
    prefilter = next(p for p in plan(recipe, 1_000_000, lake, CLUSTER) if p.stage == "supervised_prefilter")
    assert not prefilter.modelled and prefilter.rate == pytest.approx(100_000 / 20.0)  # rows per GPU-second held
    assert prefilter.rate_from.source == "run gpu-run"


def test_runs_of_several_sizes_separate_the_fixed_cost_from_the_per_row_cost(tmp_path):
    recipe = load_recipe(str(_recipe_file(tmp_path)))
    lake = tmp_path / "lake"
    # 11 CPU-seconds of start-up and a millisecond a row: both runs are below the floor, the fit is not
    _manifest(lake, "small", [_record(0, "read_crawl", 1_000, 1_000, 12.0)])
    _manifest(lake, "larger", [_record(0, "read_crawl", 11_000, 11_000, 22.0)])
    read = plan(recipe, 1_000_000, lake, CLUSTER, seeds=tmp_path)[0]
    assert read.rate == pytest.approx(1_000.0) and read.rate_from.fixed_cpu_seconds == pytest.approx(11.0)
    assert read.cpu_h == pytest.approx((11.0 + 1_000_000 / 1_000) / 3600)
    assert "fitted" in read.rate_from.source and "11.0 CPU-s fixed" in read.note


def test_plot_draws_cost_against_rows_and_says_what_doubling_the_crawl_costs(tmp_path, capsys):
    """`plan --plot`: the totals from a quarter to eight times --rows, in a PNG; the printed factor for doubling is
    the plan's own totals at 2 x rows over those at rows, with a run's fixed cost making it less than 2."""
    lake = tmp_path / "lake"
    # two runs of another size: a fixed cost of 10 CPU-s and 1 ms a row, fitted by the plan
    _manifest(lake, "small", [_record(0, "read_crawl", 60_000, 60_000, 70.0)])
    _manifest(lake, "larger", [_record(0, "read_crawl", 160_000, 160_000, 170.0)])
    recipe_file = _recipe_file(tmp_path)
    png = tmp_path / "cost.png"
    assert main(["plan", str(recipe_file), "--rows", "100000", "--lake", str(lake), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    line = next(x for x in out.splitlines() if x.startswith("plot: "))
    recipe = load_recipe(str(recipe_file))

    def cpu(rows: int) -> float:
        return sum(p.cpu_h for p in plan(recipe, rows, lake, CLUSTER) if p.cpu_h is not None)

    assert f"CPU-hours x{cpu(200_000) / cpu(100_000):.2f}" in line
    assert cpu(200_000) / cpu(100_000) < 2  # the fixed cost is paid once


def test_crawl_filter_plans_from_an_empty_lake_with_its_benchmark_written_seed(tmp_path):
    """benchmarks/bench_forecast.py wrote crawl-filter's seed from its million-row run: every stage of the crawl run
    gets a measured rate and a share from an empty lake, the totals leave nothing out, and the Korean shares are
    warned about for the recipe's Japanese default."""
    seed_path = ROOT / "benchmarks" / "rates" / "crawl-filter.json"
    seed = json.loads(seed_path.read_text(encoding="utf-8"))
    assert seed["format"] == "piqaforge-result/1" and seed["benchmark"] == "benchmarks/bench_forecast.py"
    stages = seed["data"]["runs"]["crawl"]
    planned = [p for p in plan(load_recipe("crawl-filter"), 20_000_000, tmp_path / "empty-lake", CLUSTER)
               if p.run == "crawl"]
    assert [p.stage for p in planned] == list(stages)
    for p in planned:
        assert p.cpu_h is not None and p.rate == stages[p.stage]["rows_per_cpu_second"], p.stage
        assert p.rate_from.recipe == "crawl-filter" and "measured: " in p.rate_from.source, p.stage
        assert p.rate_from.rate_rows >= MIN_RATE_ROWS
    assert all(any("measured on language ko, the recipe's is ja" in w for w in p.warnings) for p in planned)
