"""Fused stages (transforms/core/fusion.py): one pass over the input gives what the stages give one by one.

The front half's cheap stages (normalize, length_filter, langid) run fused by default. These tests run them on the
bundled crawl sample fused and alone and compare every record and every row, kept and dropped; kill a fused step
in its last partition and resume it; and check which neighbours fuse.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transforms.core import columns as C
from transforms.core.fusion import FUSED_MEMBER, FusedStages, StatefulFusedStages, fuse_groups, fusion_enabled
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest, conservation_errors
from transforms.core.runner import run_pipeline
from transforms.core.stage import FilterStage, Stage
from transforms.dedup.exact import ExactDedup
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.text.langid import LanguageFilter
from transforms.text.normalize import NormalizeText
from transforms.text.quality import LengthFilter

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
# the last row of the sample that length_filter(min_chars=20, max_chars=400) keeps: it reaches the third member
LAST_ID = next(r["id"] for r in map(json.loads, reversed(SAMPLE.read_text(encoding="utf-8").splitlines()))
               if 30 <= len(" ".join(str(r["text"]).split())) <= 300)
ray_cloudpickle = pytest.importorskip("ray.cloudpickle")
ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test stage travels to Ray workers by value


class DropLongQuestions(FilterStage):
    """A fusable test double: drops texts over 60 characters that end in '?'; logs the ids it saw; crashes on
    `fail_id` while `arm_file` exists."""

    name: ClassVar[str] = "drop_long_questions"
    fuse: ClassVar[bool] = True
    drop_reasons: ClassVar[dict[str, str]] = {"long_question": "a question over 60 characters (the test double)"}
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    log_dir: str = ""
    arm_file: str = ""
    fail_id: str = ""

    def reasons(self, batch: pa.Table) -> pa.Array:
        ids = batch.column(C.ID).to_pylist()
        if self.log_dir:
            Path(self.log_dir, uuid.uuid4().hex).write_text("\n".join(ids))
        if self.arm_file and Path(self.arm_file).exists() and self.fail_id in ids:
            raise RuntimeError("simulated crash in a fused step")
        text = batch.column(C.TEXT)
        long_q = pc.and_(pc.greater(pc.utf8_length(text), 60), pc.ends_with(text, "?"))
        return pc.if_else(pc.fill_null(long_q, False), pa.scalar("long_question"), pa.scalar(None, pa.string()))


def _source() -> CrawlSource:
    return CrawlSource(CrawlInput.model_validate(
        {"paths": [str(SAMPLE)], "format": "jsonl", "columns": {"id": "id", "source": "source", "url": "url"}}))


def _front() -> list[Stage]:
    return [NormalizeText(), LengthFilter(min_chars=20, max_chars=400), DropLongQuestions(),
            LanguageFilter(languages=["ko"]), ExactDedup()]


def _counts(manifest: RunManifest) -> list[tuple[str, int, int, dict[str, int]]]:
    return [(s.name, s.rows_in, s.rows_kept, s.rows_dropped) for s in manifest.stages]


@pytest.mark.ray
@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_fused_stages_give_the_rows_and_records_of_the_stages_run_one_by_one(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake").create()
    runs = {}
    for fuse in (True, False):
        runs[fuse] = run_pipeline(job="fusion", dataset="ko", source=_source(), stages=_front(), lake=lake, config={},
                                  run_id=f"fuse-{fuse}", fuse=fuse, partition_rows=1000)
        assert runs[fuse].status == "succeeded" and not conservation_errors(runs[fuse])
    fused, alone = runs[True], runs[False]
    assert _counts(fused) == _counts(alone)
    by_name = {s.name: s for s in fused.stages}
    members = ["normalize", "length_filter", "drop_long_questions", "langid"]
    assert all(by_name[n].fused_with == members for n in members)
    assert by_name["exact_dedup"].fused_with == [] and all(s.fused_with == [] for s in alone.stages)
    for name in ("length_filter", "drop_long_questions", "langid"):  # every member dropped rows
        assert by_name[name].dropped_total > 0, name
    # one write: the members before the last leave no kept rows, only their checkpoint
    for name in members[:-1]:
        assert "kept" not in by_name[name].outputs
        assert not parquet_files(Path(by_name[name].outputs["rejected"]).parents[2] / "staged" / "ko" /
                                 "fuse-True" / Path(by_name[name].outputs["rejected"]).name)
    # the step's time is shared out among its members
    assert all(by_name[n].seconds > 0 for n in members)
    assert sum(by_name[n].cpu_seconds or 0 for n in members) > 0

    def rows(run: str, zone: str, stage: str | None = None) -> pa.Table:
        folder = lake.zone(zone, "ko", run)
        if stage is not None:
            folder = next(folder.glob(f"*_{stage}"))
        table = read_table(folder)
        return table.sort_by(C.ID)

    assert rows("fuse-True", "curated").equals(rows("fuse-False", "curated"))
    assert not by_name["normalize"].rows_dropped
    for name in members[1:]:
        mine, theirs = rows("fuse-True", "rejected", name), rows("fuse-False", "rejected", name)
        assert mine.num_rows == theirs.num_rows > 0
        assert mine.select(theirs.schema.names).equals(theirs), name
        later = [c for c in mine.schema.names if c not in theirs.schema.names]  # what later members add: null
        assert all(mine.column(c).null_count == mine.num_rows for c in later), (name, later)
        assert set(mine.column(C.DROP_STAGE).to_pylist()) <= {name}


@pytest.mark.ray
def test_a_fused_step_killed_in_its_last_partition_resumes_there(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake").create()
    logs, arm = tmp_path / "seen", tmp_path / "armed"

    def stages(tag: str) -> list[Stage]:
        (logs / tag).mkdir(parents=True, exist_ok=True)
        return [NormalizeText(), LengthFilter(min_chars=20, max_chars=400),
                DropLongQuestions(log_dir=str(logs / tag), arm_file=str(arm), fail_id=LAST_ID)]

    def run(run_id: str, tag: str, resume: bool = False) -> RunManifest:
        return run_pipeline(job="fusion", dataset="ko", source=_source(), stages=stages(tag), lake=lake, config={},
                            run_id=run_id, resume=resume, partition_rows=500)

    clean = run("clean", "clean")
    arm.touch()
    with pytest.raises(Exception, match="simulated crash in a fused step"):
        run("cut", "cut")
    arm.unlink()
    for f in (logs / "cut").iterdir():
        f.unlink()
    resumed = run("cut", "cut", resume=True)
    assert resumed.status == "succeeded" and not conservation_errors(resumed)
    assert _counts(resumed) == _counts(clean)
    step = resumed.stages[1:]
    assert all(s.partitions == 10 and 1 <= s.partitions_reused <= 9 and not s.resumed for s in step)
    redone = [i for f in (logs / "cut").iterdir() for i in f.read_text().split("\n") if i]
    assert LAST_ID in redone and len(redone) == len(set(redone)) < step[-1].rows_in  # unfinished partitions only
    for zone in ("curated", "rejected"):
        mine, theirs = read_table(lake.zone(zone, "ko", "cut")), read_table(lake.zone(zone, "ko", "clean"))
        assert mine.sort_by(C.ID).equals(theirs.sort_by(C.ID)), zone
    again = run("cut", "cut", resume=True)  # all checkpoints there: every member reused
    assert all(s.resumed for s in again.stages) and _counts(again) == _counts(clean)
    # resumed with fusion off: a member that wrote no kept rows of its own cannot be reused alone (it runs again);
    # the step's last member wrote them, so its checkpoint stands
    alone = run_pipeline(job="fusion", dataset="ko", source=_source(), stages=stages("cut"), lake=lake, config={},
                         run_id="cut", resume=True, partition_rows=500, fuse=False)
    assert [s.resumed for s in alone.stages] == [True, False, False, True]
    assert _counts(alone) == _counts(clean) and not conservation_errors(alone)
    assert read_table(lake.zone("curated", "ko", "cut")).sort_by(C.ID).equals(
        read_table(lake.zone("curated", "ko", "clean")).sort_by(C.ID))


def _table(texts: list[str | None]) -> pa.Table:
    return pa.table({C.ID: [f"r{i}" for i in range(len(texts))], C.TEXT: pa.array(texts, pa.string())})


def test_a_fused_batch_keeps_its_rows_in_order_and_names_the_member_that_dropped_each():
    fused = FusedStages.of([NormalizeText(), LengthFilter(min_chars=5, max_chars=30), DropLongQuestions()])
    texts = ["short", "  a fine  sentence ", "tiny", None, "x" * 70 + "?", "a" * 40, "ok ok ok"]
    out = fused(_table(texts))
    assert out.column(C.ID).to_pylist() == [f"r{i}" for i in range(len(texts))]
    assert out.column(C.DROP_REASON).to_pylist() == [None, None, "too_short", "empty", "too_long", "too_long", None]
    assert out.column(FUSED_MEMBER).to_pylist() == [None, None, 1, 1, 1, 1, None]
    assert out.column(C.STATUS).to_pylist() == ["kept", "kept", "rejected", "rejected", "rejected", "rejected", "kept"]
    assert out.column(C.TEXT).to_pylist()[1] == "a fine sentence"
    # a batch the first members empty: the last is not asked to invent its columns on no rows
    emptied = fused(_table(["no", "nope"]))
    assert emptied.column(FUSED_MEMBER).to_pylist() == [1, 1] and emptied.num_rows == 2


def test_which_neighbours_fuse(monkeypatch):
    stages: list[Stage] = [NormalizeText(), LengthFilter(), ExactDedup(), LanguageFilter(languages=["ko"]),
                           DropLongQuestions(), NormalizeText(resources={"gpus": 1}), LengthFilter(),
                           LanguageFilter(languages=["ko"], resources={"env": "vllm"})]
    assert fuse_groups(stages) == [[0, 1], [2], [3, 4], [5], [6], [7]]  # a global stage, a GPU, another env
    assert fuse_groups(stages, enabled=False) == [[i] for i in range(len(stages))]
    assert isinstance(FusedStages.of(stages[3:5]), StatefulFusedStages)  # langid loads a model: actors
    assert not isinstance(FusedStages.of(stages[:2]), StatefulFusedStages)
    monkeypatch.setenv("PIQAFORGE_FUSE", "0")
    assert not fusion_enabled() and fusion_enabled(True)
    monkeypatch.delenv("PIQAFORGE_FUSE")
    assert fusion_enabled()


def test_a_fused_step_asks_what_its_members_set_not_their_defaults():
    from transforms.core.fusion import merged_resources

    langid = LanguageFilter(languages=["ko"], resources={"cpus": 0.5, "concurrency": 2})
    merged = merged_resources([NormalizeText(), LengthFilter(resources={"batch_size": 1024}), langid])
    assert (merged.cpus, merged.concurrency, merged.batch_size) == (0.5, 2, 1024)
    assert merged_resources([NormalizeText(), LengthFilter()]).cpus == 1.0  # nobody asked: the default
    assert merged_resources([NormalizeText(resources={"cpus": 2}), langid]).cpus == 2


def test_on_a_local_ray_a_fused_step_on_actors_uses_every_cpu_unless_a_member_says_otherwise():
    from transforms.core.fusion import merged_resources

    chain = [NormalizeText(), LengthFilter(), LanguageFilter(languages=["ko"])]
    two = merged_resources(chain, local_cpus=2)
    assert (two.cpus, two.concurrency) == (0.5, 2)  # one logical CPU stays for the reads
    sixteen = merged_resources(chain, local_cpus=16)
    assert (sixteen.concurrency, sixteen.cpus * sixteen.concurrency) == (16, pytest.approx(15, abs=0.01))
    assert merged_resources(chain, local_cpus=1).concurrency is None  # one CPU: as before (check_schedulable says)
    assert merged_resources(chain).concurrency is None  # a cluster: its profile decides
    assert merged_resources(chain[:2], local_cpus=2).concurrency is None  # tasks, not actors: Ray spreads them
    told = [*chain[:2], LanguageFilter(languages=["ko"], resources={"concurrency": 1})]
    assert merged_resources(told, local_cpus=2).concurrency == 1
