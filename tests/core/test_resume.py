"""Resumable runs: finished stages and finished partitions of a cut-short stage are not redone.

Fast tier: in-process runs on the bundled sample where a stage fails on its last partition, then
resumes. Slow tier (`pytest -m slow tests/core/test_resume.py`): the real `piqaforge run ko-piqa`
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
from jobutil import (
    CRAWL,
    SHRUNK_CLEAN_RUN,
    answer_files,
    assert_same_rows,
    popen_logged,
    run_logged,
    shrunk_job,
    shrunk_job_env,
)

from transforms.core import columns as C
from transforms.core import rowcache
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest
from transforms.core.runner import conservation_errors, run_pipeline
from transforms.core.stage import FilterStage
from transforms.flow.recipe import load_recipe
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.text.normalize import NormalizeText

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
# the test's stage class travels to Ray workers by value: they cannot import this test module
ray_cloudpickle = pytest.importorskip("ray.cloudpickle")
ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])
LAST_ID = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[-1])["id"]


class DropQuestionMarks(FilterStage):
    """Drops texts ending in '?', logs the ids it saw, and crashes on `fail_id` while armed."""

    name: ClassVar[str] = "drop_question_marks"
    drop_reasons: ClassVar[dict[str, str]] = {"question_mark": "the text holds a question mark (the test double)"}
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
    assert failed.status == "failed" and [s.name for s in failed.stages] == ["read_crawl", "normalize"]
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


def test_row_caches_hold_whole_chunks_in_write_order_even_under_a_hidden_folder(tmp_path):
    folder = tmp_path / ".cache" / "runs" / "r1" / "cache" / "scores"  # e.g. a lake under ~/.cache
    assert rowcache.load(folder).num_rows == 0
    assert rowcache.append(folder, pa.table({"id": pa.array([], pa.string())})) is None
    rowcache.append(folder, pa.table({"id": ["a", "b"], "score": [0.1, 0.2]}))
    rowcache.append(folder, pa.table({"id": ["c"], "score": [0.3]}))
    (folder / ".123-half-written.parquet").write_bytes(b"PAR1")  # what a killed writer leaves behind
    assert rowcache.load(folder).to_pydict() == {"id": ["a", "b", "c"], "score": [0.1, 0.2, 0.3]}
    assert parquet_files(tmp_path / ".cache") == sorted(folder.glob("[0-9]*.parquet"))


# -- slow tier: SIGKILL the real driver -----------------------------------------------------------
# The whole ko-piqa job, LLM back half included, shrunk to fit a test (jobutil.SHRUNK_JOB_ARGS): the prefilter
# has the ensemble label 96 rows and passes 1% of the rest on to the ensemble stage.
VERDICTS = ("ens_pass", "ens_calls", C.DROP_REASON)  # plus every ens_<classifier>_verdict column


def _job_outputs(lake: Path, run_id: str) -> tuple[pa.Table, pa.Table, RunManifest]:
    manifest = RunManifest.load(lake / "runs" / f"{run_id}{CRAWL}" / "manifest.json")
    return (_sorted(read_table(Path(manifest.outputs["curated"]))),
            _sorted(read_table(Path(manifest.outputs["rejected"]))), manifest)


def _cached_answers(lake: Path, run_id: str) -> dict[str, list[str]]:
    """Row ids answered per classifier (cache key), over every answer file the run wrote."""
    out: dict[str, list[str]] = {}
    for f in answer_files(lake, f"{run_id}{CRAWL}"):
        out.setdefault(f.parent.name, []).extend(read_table(f).column("id").to_pylist())
    return out


def _answers(lake: Path, run_id: str) -> tuple[dict[str, str], dict[str, float]]:
    """The option and the score each classifier gave each row, over the run's verdict cache."""
    options, scores = {}, {}
    for f in answer_files(lake, f"{run_id}{CRAWL}"):
        for r in read_table(f).to_pylist():
            options[f"{f.parent.name}/{r['id']}"] = r["option"]
            scores[f"{f.parent.name}/{r['id']}"] = r["score"]
    return options, scores


# Kill points: what must be on disk before the driver is killed.
def _partition_done(lake: Path, run_id: str) -> bool:
    """A partition of a stage after `read` has finished: the cut lands between partitions of a stage."""
    return bool(list((lake / "staged" / "ko-piqa" / f"{run_id}{CRAWL}").glob("*/.parts/p*.json")))


def _llm_answers_cached(lake: Path, run_id: str) -> bool:
    """Two chunks of LLM answers are in the verdict cache: the cut lands inside the LLM back half."""
    return len(answer_files(lake, f"{run_id}{CRAWL}")) >= 2


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(3600)  # minutes on an idle machine, far more on a busy one
@pytest.mark.parametrize("kill_when", [_partition_done, _llm_answers_cached], ids=["front-half", "llm-back-half"])
def test_killed_ko_piqa_driver_resumes_to_the_same_output(shrunk_clean_lake, kill_when):
    """Killed in the lake of the session's clean run (tests/conftest.py), so the lake's caches are warm as
    for a team's second run; the comparison is with that clean run."""
    lake, run_id = shrunk_clean_lake, f"cut-{kill_when.__name__.strip('_')}"
    proc = popen_logged(shrunk_job(lake, "--run-id", run_id), lake.parent / f"{run_id}.log", cwd=ROOT,
                        env=shrunk_job_env(),
                        start_new_session=True)
    deadline = time.time() + 1200
    try:
        while time.time() < deadline and proc.poll() is None and not kill_when(lake, run_id):
            time.sleep(0.005)
        assert proc.poll() is None, "the run finished before it could be killed"
        assert kill_when(lake, run_id), "the kill point was never reached"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()
        subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)  # anything that left the group
    killed = RunManifest.load(lake / "runs" / f"{run_id}{CRAWL}" / "manifest.json")
    assert killed.status == "running"  # a SIGKILLed driver writes nothing more
    answers_before = _cached_answers(lake, run_id)
    run_logged(shrunk_job(lake, "--resume", run_id), lake.parent / f"{run_id}-resume.log", timeout=1800, cwd=ROOT,
               env=shrunk_job_env())

    kept, rejected, manifest = _job_outputs(lake, run_id)
    kept_clean, rejected_clean, clean = _job_outputs(lake, SHRUNK_CLEAN_RUN)
    assert manifest.status == "succeeded" and not conservation_errors(manifest)
    assert [a["status"] for a in manifest.extras["attempts"]] == ["running"]
    assert [s.name for s in manifest.stages] == [s.name for s in clean.stages]
    assert [(s.rows_in, s.rows_kept, s.rows_dropped) for s in manifest.stages] == \
        [(s.rows_in, s.rows_kept, s.rows_dropped) for s in clean.stages]
    # same kept rows, same rejected rows with the same reasons, no duplicates
    assert len(set(kept.column(C.ID).to_pylist())) == kept.num_rows
    assert kept.num_rows + rejected.num_rows == 4600
    assert_same_rows(kept, kept_clean)
    assert_same_rows(rejected, rejected_clean)
    # same verdicts, row by row, for every row the ensemble stage saw (kept or rejected) ...
    judged = pa.concat_tables([kept, rejected], promote_options="default")
    judged_clean = pa.concat_tables([kept_clean, rejected_clean], promote_options="default")
    verdicts = [*VERDICTS, *(n for n in kept.schema.names if n.endswith("_verdict"))]
    crawl = load_recipe("ko-piqa").run("crawl")
    classifiers = next(s for s in crawl.stages if s.stage == "ensemble").fields["classifiers"]  # a verdict column each
    assert len(verdicts) == len(VERDICTS) + len(classifiers) > len(VERDICTS)
    mine = {r[C.ID]: r for r in judged.select([C.ID, *verdicts]).to_pylist() if r["ens_calls"] is not None}
    theirs = {r[C.ID]: r for r in judged_clean.select([C.ID, *verdicts]).to_pylist() if r["ens_calls"] is not None}
    ensemble = next(s for s in clean.stages if s.name == "ensemble")
    assert mine == theirs and len(mine) == ensemble.rows_in > 0
    # ... and for every answer a classifier gave, the prefilter's labelled sample included
    (options, scores), (options_clean, scores_clean) = _answers(lake, run_id), _answers(lake, SHRUNK_CLEAN_RUN)
    assert options == options_clean
    assert scores == pytest.approx(scores_clean, abs=1e-3)  # the batch's padding moves P(yes): assert_same_rows

    # the resumed run did not redo finished work
    assert manifest.stages[0].resumed  # `read` had finished before the kill
    answers = _cached_answers(lake, run_id)
    for key, ids in answers.items():  # no model was asked twice about a row ...
        assert len(ids) == len(set(ids)), key
        assert sorted(ids) == sorted(_cached_answers(lake, SHRUNK_CLEAN_RUN)[key])  # ... nor about a different row
    cut = next(s for s in manifest.stages if not s.resumed)
    if kill_when is _llm_answers_cached:
        assert cut.name in ("supervised_prefilter", "ensemble", "cultural_tag", "sample")
        # two chunks of answers were on disk before the kill (a chunk holds the rows of 16 that the cheaper
        # e5 member passed on to Gemma under the unanimous rule), and every one of them was reused
        assert sum(map(len, answers_before.values())) >= 2
        assert all(set(ids) <= set(answers[key]) for key, ids in answers_before.items())
    else:  # the first stage after `read` had finished a partition (or all of them) before the kill
        assert manifest.stages[1].resumed or manifest.stages[1].partitions_reused > 0
    print(f"\nkilled after {[s.name for s in killed.stages]}; first re-run stage: {cut.name}, partitions "
          f"reused {cut.partitions_reused}/{cut.partitions}, LLM answers reused "
          f"{sum(map(len, answers_before.values()))}/{sum(map(len, answers.values()))}", file=sys.stderr)
