"""Kill and resume a creating recipe anywhere: the zh-piqa recipe (translation by an LLM engine, people's review
exported and imported, release) driven by tests/recipe_storm_driver.py in a subprocess, SIGKILLed at seeded
points spread over the whole graph (inside the LLM stage, between the export and the import, during the
release run, ...) and resumed each time, ends with the same release, byte for byte, as an uninterrupted run,
and the engine was asked each question as often as in that run: none twice.

    pytest -m slow tests/recipes/test_recipe_storm.py -k fixed    # three fixed points (the slow tier, in CI)
    pytest -m storm tests/recipes/test_recipe_storm.py            # the whole storm: 12 seeded points (outside CI)

The last result of the whole storm is recorded in docs/recipes.md.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "recipe_storm_driver.py"
RUN = "storm"
# The release's data files: its run id and the review batch are the same in both lakes, so these are equal byte for
# byte; run.json, RELEASED and the reports carry times and the lake's paths.
DATA = ("data/zh/test-00000-of-00001.parquet", "extras/formats/zh-piqa.jsonl", "extras/formats/zh-piqa-labels.lst",
        "extras/formats/zh-piqa.csv")

# Kill points: (the driver's event line to wait for, questions more to wait for after it, extra seconds)
FIXED = [("items start", 3, 0.0),        # inside the LLM stage: three questions answered
         ("import start", 0, 0.0),       # the batch exported, its import not yet written
         ("release start", 0, 1.5)]      # during the release run


def _env() -> dict[str, str]:
    env = dict(os.environ, PIQAFORGE_PROGRESS="0", PIQAFORGE_CONSOLE="0", PIQAFORGE_OBJECT_STORE_BYTES=str(512 * 2**20))
    env.pop("RAY_ADDRESS", None)
    return env


def _start(lake: Path, resume: bool) -> subprocess.Popen:
    cmd = [sys.executable, str(DRIVER), str(lake), RUN, "--questions", str(lake.parent / "questions.log")]
    log = (lake.parent / "driver.log").open("ab")
    return subprocess.Popen([*cmd, *(["--resume"] if resume else [])], cwd=ROOT, env=_env(), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
    proc.wait()
    subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)


def run_storm(workdir: Path, points: list[tuple[str, int, float]], timeout: float = 1500) -> dict[str, object]:
    """Run the driver to the end, killing it once at each point in turn (a point its run never reaches is
    passed over); returns the lake, the kills that landed and the questions asked."""
    lake = workdir / "lake"
    workdir.mkdir(parents=True, exist_ok=True)
    events, questions = workdir / "events.log", workdir / "questions.log"
    kills: list[str] = []
    resume = False
    deadline = time.time() + timeout
    for point in [*points, None]:
        event, more, delay = point if point is not None else (None, 0, 0.0)
        proc = _start(lake, resume)
        if event is not None:
            seen = len(_lines(events))
            asked = None
            while proc.poll() is None and time.time() < deadline:
                new = _lines(events)[seen:]
                if event in new and asked is None:
                    asked = len(_lines(questions))
                if asked is not None and len(_lines(questions)) >= asked + more:
                    time.sleep(delay)
                    break
                time.sleep(0.01)
            if proc.poll() is None:
                _kill(proc)
                kills.append(f"{event} +{more}q +{delay}s")
                resume = True
                continue
        assert proc.wait(timeout=max(1.0, deadline - time.time())) == 0, \
            (workdir / "driver.log").read_text(errors="replace")[-4000:]
        resume = True
        if event is None:
            break
    return {"lake": lake, "kills": kills, "questions": _lines(questions)}


def _release(lake: Path) -> Path:
    (folder,) = (lake / "release" / "zh-piqa").iterdir()
    assert (folder / "RELEASED").exists()
    return folder


def check_against_clean(tmp_path: Path, points: list[tuple[str, int, float]]) -> dict[str, object]:
    clean = run_storm(tmp_path / "clean", [])
    storm = run_storm(tmp_path / "storm", points)
    a, b = _release(clean["lake"]), _release(storm["lake"])  # type: ignore[arg-type]
    for name in DATA:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # every question as often as the uninterrupted run asked it: none asked twice across the kills
    assert collections.Counter(storm["questions"]) == collections.Counter(clean["questions"])  # type: ignore[arg-type]
    from transforms.core.manifest import RunManifest, conservation_errors

    lake = storm["lake"]
    for manifest in (lake / "runs").glob("*/manifest.json"):  # type: ignore[union-attr]
        m = RunManifest.load(manifest)
        assert m.status == "succeeded" and not conservation_errors(m), m.run_id
    return {"kills": storm["kills"], "questions": len(storm["questions"])}  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(3600)
def test_fixed_kill_points_resume_to_the_same_release(tmp_path):
    result = check_against_clean(tmp_path, FIXED)
    assert len(result["kills"]) == 3, result  # every kill landed where it was meant to
    print(f"\nstorm (fixed): {json.dumps(result)}", file=sys.stderr)


STORM_EVENTS = ["items start", "items end", "review start", "import start", "import end", "final start",
                "release start", "release end"]


@pytest.mark.storm
@pytest.mark.timeout(7200)
def test_the_whole_storm(tmp_path):
    rng = random.Random(20261126)
    # twelve points in the graph's order (a kill at a place the run has passed lands at the next one)
    events = sorted(rng.randrange(len(STORM_EVENTS)) for _ in range(12))
    points = [(STORM_EVENTS[i], rng.choice([0, 1, 2]) if STORM_EVENTS[i] == "items start" else 0,
               rng.choice([0.0, 0.1, 0.3])) for i in events]
    result = check_against_clean(tmp_path, points)
    assert len(result["kills"]) >= 10, result
    print(f"\nstorm (seed 20261126, {len(points)} points): {json.dumps(result)}", file=sys.stderr)
