"""Resumable runs: finished stages and finished partitions of a cut-short stage are not redone.

Fast tier: in-process runs on the bundled sample where a stage fails on its last partition, then
resumes. Slow tier (`pytest -m slow tests/test_resume.py`): the real `piqaforge run ko-piqa`
driver is SIGKILLed mid-run and resumed; its output must equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transforms.core import columns as C
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest
from transforms.core.runner import conservation_errors, run_pipeline
from transforms.core.stage import FilterStage
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.text.normalize import NormalizeText

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
# the test's stage class travels to Ray workers by value: they cannot import this test module
ray_cloudpickle = pytest.importorskip("ray.cloudpickle")
ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])
LAST_ID = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[-1])["id"]


class DropQuestionMarks(FilterStage):
    """Drops texts ending in '?', logs the ids it saw, and crashes on `fail_id` while armed."""

    name: ClassVar[str] = "drop_question_marks"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    log_dir: str
    arm_file: str
    fail_id: str

    def reasons(self, batch: pa.Table) -> pa.Array:
        ids = batch.column(C.ID).to_pylist()
        Path(self.log_dir, uuid.uuid4().hex).write_text("\n".join(ids))
        if Path(self.arm_file).exists() and self.fail_id in ids:
            raise RuntimeError("simulated crash in the last partition")
        ends = pc.ends_with(batch.column(C.TEXT), "?")
        return pc.if_else(pc.fill_null(ends, False), pa.scalar("question_mark"), pa.scalar(None, pa.string()))


def _seen(log_dir: Path) -> list[str]:
    return [i for f in log_dir.iterdir() for i in f.read_text().split("\n") if i]


def _run(lake: Lake, run_id: str, stage: DropQuestionMarks, resume: bool = False, nfkc: bool = True) -> RunManifest:
    source = CrawlSource(CrawlInput.model_validate(
        {"paths": [str(SAMPLE)], "format": "jsonl", "columns": {"id": "id", "source": "source", "url": "url"}}))
    return run_pipeline(job="resume-test", dataset="ko", source=source, stages=[NormalizeText(nfkc=nfkc), stage],
                        lake=lake, config={}, run_id=run_id, resume=resume, partition_rows=500)


def _sorted(table: pa.Table) -> pa.Table:
    return table.select(sorted(table.schema.names)).sort_by(C.ID)


def _outputs(lake: Lake, run_id: str) -> tuple[pa.Table, pa.Table]:
    curated = read_table(lake.zone("curated", "ko", run_id))
    rejected = read_table(lake.zone("rejected", "ko", run_id))
    return _sorted(curated), _sorted(rejected)


@pytest.mark.ray
def test_a_failed_stage_resumes_at_its_unfinished_partitions(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake")
    logs = tmp_path / "seen"
    arm = tmp_path / "armed"

    def stage(tag: str) -> DropQuestionMarks:
        (logs / tag).mkdir(parents=True, exist_ok=True)
        # log_dir is part of the stage's config (fingerprint), so the resumed run must use the same one
        return DropQuestionMarks(log_dir=str(logs / tag), arm_file=str(arm), fail_id=LAST_ID)

    clean = _run(lake, "clean", stage("clean"))
    assert clean.stages[-1].partitions == 10  # 4,600 rows in row groups of 500

    arm.touch()
    with pytest.raises(Exception, match="simulated crash"):
        _run(lake, "cut", stage("cut"))
    failed = RunManifest.load(lake.manifest_path("cut"))
    assert failed.status == "failed" and [s.name for s in failed.stages] == ["read", "normalize"]
    first_attempt = len(_seen(logs / "cut"))
    arm.unlink()
    for f in (logs / "cut").iterdir():
        f.unlink()

    resumed = _run(lake, "cut", stage("cut"), resume=True)
    read, normalize, last = resumed.stages
    assert read.resumed and normalize.resumed and not last.resumed
    assert last.partitions == 10 and 1 <= last.partitions_reused <= 9
    redone = _seen(logs / "cut")
    # only the unfinished partitions ran again, each row once
    assert len(redone) == len(set(redone)) < last.rows_in
    assert LAST_ID in redone and first_attempt > 0
    assert len(redone) <= last.rows_in - 500 * last.partitions_reused
    assert resumed.status == "succeeded" and not conservation_errors(resumed)
    assert [a["status"] for a in resumed.extras["attempts"]] == ["failed"]

    kept, rejected = _outputs(lake, "cut")
    kept_clean, rejected_clean = _outputs(lake, "clean")
    assert kept.num_rows + rejected.num_rows == 4600
    assert len(set(kept.column(C.ID).to_pylist())) == kept.num_rows  # no duplicates
    assert kept.equals(kept_clean) and rejected.equals(rejected_clean)
    assert rejected.column(C.DROP_REASON).to_pylist().count("question_mark") == last.rows_dropped["question_mark"]


@pytest.mark.ray
def test_a_changed_config_reruns_that_stage_and_everything_after_it(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake")
    (tmp_path / "seen").mkdir()
    stage = DropQuestionMarks(log_dir=str(tmp_path / "seen"), arm_file=str(tmp_path / "never"), fail_id="")
    _run(lake, "r", stage)
    again = _run(lake, "r", stage, resume=True)
    assert [s.resumed for s in again.stages] == [True, True, True]
    changed = _run(lake, "r", stage, resume=True, nfkc=False)
    assert [s.resumed for s in changed.stages] == [True, False, False]
    assert changed.stages[1].partitions_reused == 0 and changed.stages[2].partitions_reused == 0
    assert not conservation_errors(changed)
    # the stage directories hold exactly one copy of each row after the re-run
    kept = read_table(lake.stage_dir("staged", "ko", "r", 2, "drop_question_marks"))
    assert kept.num_rows == changed.stages[2].rows_kept == len(set(kept.column(C.ID).to_pylist()))


def front_half_only() -> list[str]:
    """--set overrides that switch off the LLM back half when the job has one (slow on CPU)."""
    from jobs.ko_piqa import Config

    return ["--set", "ensemble=null"] if "ensemble" in Config.model_fields else []


# -- slow tier: SIGKILL the real driver -----------------------------------------------------------
def _piqaforge(lake: Path, *args: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "piqaforge"), "run", "ko-piqa", "--lake", str(lake), *args]


def _env() -> dict[str, str]:
    env = dict(os.environ, PIQAFORGE_PROGRESS="0", PIQAFORGE_PARTITION_ROWS="200",
               PIQAFORGE_OBJECT_STORE_BYTES=str(512 * 2**20))
    env.pop("RAY_ADDRESS", None)
    return env


def _job_outputs(lake: Path, run_id: str) -> tuple[pa.Table, pa.Table, RunManifest]:
    manifest = RunManifest.load(lake / "runs" / run_id / "manifest.json")
    return (_sorted(read_table(Path(manifest.outputs["curated"]))),
            _sorted(read_table(Path(manifest.outputs["rejected"]))), manifest)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # three ko-piqa runs; minutes on an idle machine, far more on a busy one
def test_killed_ko_piqa_driver_resumes_to_the_same_output(tmp_path):
    lake = tmp_path / "lake"
    # 200-row partitions: 23 per stage, so the kill lands between partitions of a stage
    common = ["--set", "num_cpus=2", "--set", f"input.paths=[{SAMPLE}]", *front_half_only()]
    subprocess.run(_piqaforge(lake, "--run-id", "clean", *common), check=True, cwd=ROOT, env=_env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)

    proc = subprocess.Popen(_piqaforge(lake, "--run-id", "x", *common), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    staged = lake / "staged" / "ko-piqa" / "x"
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            if list(staged.glob("*/.parts/p*.json")):  # a partition of a stage after `read` is done
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the run finished before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()
        subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)  # anything that left the group
    killed = RunManifest.load(lake / "runs" / "x" / "manifest.json")
    assert killed.status == "running"  # a SIGKILLed driver writes nothing more
    subprocess.run(_piqaforge(lake, "--resume", "x", *common), check=True, cwd=ROOT, env=_env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)

    kept, rejected, manifest = _job_outputs(lake, "x")
    kept_clean, rejected_clean, clean = _job_outputs(lake, "clean")
    assert manifest.status == "succeeded" and not conservation_errors(manifest)
    assert manifest.stages[0].resumed  # `read` had finished before the kill
    assert [s.name for s in manifest.stages] == [s.name for s in clean.stages]
    assert [(s.rows_kept, s.rows_dropped) for s in manifest.stages] == \
        [(s.rows_kept, s.rows_dropped) for s in clean.stages]
    assert len(set(kept.column(C.ID).to_pylist())) == kept.num_rows
    assert kept.equals(kept_clean) and rejected.equals(rejected_clean)
    cut = next((s for s in manifest.stages if not s.resumed), None)
    print(f"\nkilled after {[s.name for s in killed.stages]}; first re-run stage: "
          f"{cut.name if cut else None}, partitions reused {cut.partitions_reused if cut else 0}/"
          f"{cut.partitions if cut else 0}", file=sys.stderr)
    assert parquet_files(lake / "curated" / "ko-piqa" / "x")
