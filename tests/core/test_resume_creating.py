"""kill -9 a creating job (LLM generation, then an LLM transform) mid-stage and resume it.

The job is tests/creating_job.py on real Korean questions. A clean run gives the reference; two more
runs are SIGKILLed (process group: driver and Ray workers) once the engine has answered some
conversations of the expand stage, resp. of the transform, and then resumed. Each must end with the
clean run's rows and ids in every zone, and no conversation answered before the kill may be asked
again after it (the engine logs every conversation it is asked).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from transforms.core.lake import read_table
from transforms.core.manifest import RunManifest
from transforms.core.runner import conservation_errors

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "creating_job.py"

GEN = """id: gen/ko
version: "1"
task: gen
language: ko
system: |-
  GENERATE. 질문을 읽고, 물리적 상식을 묻는 PIQA 문항(목표, 두 해결책)을 JSON 목록으로 만드세요.
template: |-
  <question>
  {{ text }}
  </question>
"""
REFINE = """id: refine/ko
version: "1"
task: refine
language: ko
system: |-
  REFINE. 문항의 목표를 자연스러운 한국어 한 문장으로 다듬어 JSON으로 답하세요.
template: |-
  <question>
  {{ text }}
  </question>
"""


def _prompts(tmp: Path) -> Path:
    for rel, text in (("gen/ko.yaml", GEN), ("refine/ko.yaml", REFINE)):
        (tmp / "prompts" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "prompts" / rel).write_text(text, encoding="utf-8")
    return tmp / "prompts"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PIQAFORGE_PROGRESS="0", PIQAFORGE_OBJECT_STORE_BYTES=str(2**29))
    return env


def _run(lake: Path, run_id: str, prompts: Path, log: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(lake), run_id, str(prompts), str(log), *extra],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)


def _log(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split("\t")) for line in path.read_text().splitlines() if "\t" in line]  # type: ignore[misc]


def _zone_ids(lake: Path, zone: str, run_id: str) -> Counter:
    ids: Counter = Counter()
    for folder in sorted((lake / zone / "creating" / run_id).glob("*")):
        table = read_table(folder)
        if table.num_rows:
            col = "parent_id" if zone == "lineage" else "id"
            ids.update(f"{folder.name}:{x}" for x in table.column(col).to_pylist())
    return ids


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clean")
    prompts, lake, log = _prompts(tmp), tmp / "lake", tmp / "engine.log"
    proc = _run(lake, "clean", prompts, log)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return lake, _log(log)


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.parametrize("stage,after", [pytest.param("GENERATE", 8, marks=pytest.mark.ci), ("REFINE", 8)])
def test_kill_during_a_creating_stage_then_resume_repeats_no_answer(clean, tmp_path, stage, after):
    clean_lake, clean_log = clean
    prompts, lake, log = _prompts(tmp_path), tmp_path / "lake", tmp_path / "engine.log"
    clean_asks = {h for kind, h in clean_log if kind == "end"}
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(lake), "run", str(prompts), str(log)], cwd=ROOT,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            ended = [h for kind, h in _log(log) if kind == "end"]
            if stage == "GENERATE" and len(ended) >= after:
                break
            if stage == "REFINE" and _generated(lake) and len(ended) >= after + _generated(lake):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the job ended before the kill point"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)
    killed = RunManifest.load(lake / "runs" / "run" / "manifest.json")
    assert killed.status == "running"
    before = _log(log)
    answered_before = {h for kind, h in before if kind == "end"}
    resumed = _run(lake, "run", prompts, log, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after_resume = _log(log)[len(before):]
    asked_again = {h for kind, h in after_resume if kind == "begin"} & answered_before
    assert not asked_again, f"{len(asked_again)} answered conversations were asked again"
    # same rows, same ids, in every zone, as the uninterrupted run
    for zone in ("staged", "rejected", "lineage", "curated"):
        mine = _zone_ids(lake, zone, "run")
        theirs = Counter({k: v for k, v in _zone_ids(clean_lake, zone, "clean").items()})
        assert mine == theirs, zone
    manifest = RunManifest.load(lake / "runs" / "run" / "manifest.json")
    assert conservation_errors(manifest) == [] and manifest.status == "succeeded"
    clean_manifest = RunManifest.load(clean_lake / "runs" / "clean" / "manifest.json")
    assert [(s.rows_in, s.rows_created, s.rows_kept, s.rows_dropped, s.rows_consumed) for s in manifest.stages] == \
        [(s.rows_in, s.rows_created, s.rows_kept, s.rows_dropped, s.rows_consumed) for s in clean_manifest.stages]
    # every conversation of the clean run was asked exactly once across the killed and the resumed attempt,
    # except those cut off in flight at the kill (begun, never ended)
    ends = Counter(h for kind, h in _log(log) if kind == "end")
    assert set(ends) == clean_asks and max(ends.values()) == 1
    print(f"\nkill during {stage}: {len(answered_before)} answered before the kill, "
          f"{sum(1 for k, _ in after_resume if k == 'begin')} asked after it, 0 asked again "
          f"(clean run: {len(clean_asks)} conversations)")


def _generated(lake: Path) -> int:
    """Conversations of the generate stage (its parents), once its checkpoint is written."""
    marker = lake / "staged" / "creating" / "run" / "01_llm_generate" / "_CHECKPOINT.json"
    return int(json.loads(marker.read_text())["rows_in"]) if marker.exists() else 0
