"""scripts/tier_budget.py: a tier over its budget by more than 10% fails and names its ten slowest tests; one
within it passes and says how much of the budget it used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "tier_budget.py"


def _junit(path: Path, times: dict[str, list[float]]) -> Path:
    cases = "".join(f'<testcase classname="tests.mod" name="{name}" time="{t}"/>'
                    for name, ts in times.items() for t in ts)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # never record: a measured run (PIQAFORGE_RECORD_TIERS=1 bash .ci/run) runs these tests too
    env = {k: v for k, v in os.environ.items()
           if k not in ("PIQAFORGE_RECORD_TIERS", "PIQAFORGE_RESULTS_DIR", "PIQAFORGE_STRICT_BUDGETS")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_tier_within_its_budget_passes_and_prints_its_share(tmp_path):
    xml = _junit(tmp_path / "a.xml", {"test_a": [1.0]})
    out = _run("default", "300", str(xml))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tier default: 300 s of its 600 s budget (50%)" in out.stdout and "test_a" not in out.stdout
    # up to 10% over is slack, not a failure
    assert _run("default", "659", str(xml)).returncode == 0


def test_a_tier_over_its_budget_fails_naming_its_ten_slowest_tests(tmp_path):
    times = {f"test_{i:02d}": [float(i)] for i in range(15)}
    times["test_twice"] = [20.0, 30.0]  # a test in two JUnit files (both other-CPU passes) counts once, summed
    first = _junit(tmp_path / "a.xml", {k: v[:1] for k, v in times.items()})
    second = _junit(tmp_path / "b.xml", {"test_twice": [30.0]})
    out = _run("default", "661", str(first), str(second))
    assert out.returncode == 3, out.stdout
    listed = [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("  ")]
    assert listed[0] == "tests.mod::test_twice" and "50.0 s" in out.stdout
    assert listed[1:] == [f"tests.mod::test_{i:02d}" for i in range(14, 5, -1)]
    assert "over its budget" in out.stdout
    # reported but not failed where budgets are not yet enforced (.ci/run until they are measured)
    env = dict(os.environ, PIQAFORGE_STRICT_BUDGETS="0")
    lax = subprocess.run([sys.executable, str(SCRIPT), "default", "661", str(first)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert lax.returncode == 0 and "over its budget" in lax.stdout and "test_twice" in lax.stdout


def test_an_unknown_tier_is_refused_with_the_known_ones(tmp_path):
    out = _run("nightly", "10")
    assert out.returncode == 2 and "default, default+slow, slow-alone, other-cpu, extended, slow" in out.stderr
    # and is not recorded, even in a measured run
    env = dict(os.environ, PIQAFORGE_RECORD_TIERS="1", PIQAFORGE_RESULTS_DIR=str(tmp_path))
    subprocess.run([sys.executable, str(SCRIPT), "nightly", "10"], capture_output=True, env=env, timeout=60)
    assert not list(tmp_path.iterdir())


def test_recorded_tiers_of_one_run_land_in_one_results_file(tmp_path):
    import json

    from transforms.core.results import read_result

    env = dict(os.environ, PIQAFORGE_RECORD_TIERS="1", PIQAFORGE_RESULTS_DIR=str(tmp_path), PIQAFORGE_TIER_RUN="r1",
               PIQAFORGE_TIER_COMMAND="bash scripts/test.sh --slow")
    for tier, seconds in (("set-up", "95"), ("default", "412")):
        out = subprocess.run([sys.executable, str(SCRIPT), tier, seconds], capture_output=True, text=True, env=env,
                             timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    record = read_result("test-tiers", tmp_path)
    assert {k: v["value"] for k, v in record["figures"].items()} == {"set_up_s": 95, "default_s": 412,
                                                                   "default_budget_s": 600}
    assert record["command"] == "PIQAFORGE_RECORD_TIERS=1 bash scripts/test.sh --slow" and record["machine"]["cpu_model"]
    # another run starts the file afresh: a figure never mixes two runs
    env["PIQAFORGE_TIER_RUN"] = "r2"
    subprocess.run([sys.executable, str(SCRIPT), "slow", "1500"], capture_output=True, text=True, env=env, timeout=60)
    fresh = json.loads((tmp_path / "test-tiers.json").read_text())
    assert set(fresh["figures"]) == {"slow_s", "slow_budget_s"} and fresh["data"]["run"] == "r2"
