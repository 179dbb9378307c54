from __future__ import annotations

import os
import signal
import sys
import time
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from transforms.core import columns as C
from transforms.core.lake import read_table
from transforms.core.stage import FilterStage, Stage, StageError, set_drop_reason
from transforms.text.normalize import NormalizeText


class DropShort(FilterStage):
    name: ClassVar[str] = "drop_short"
    drop_reasons: ClassVar[dict[str, str]] = {"too_short": "the text is shorter than the minimum (the test double)"}
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    min_chars: int = 3

    def reasons(self, batch: pa.Table) -> pa.Array:
        short = pc.less(pc.utf8_length(batch.column(C.TEXT)), self.min_chars)
        return pc.if_else(short, pa.scalar("too_short"), pa.scalar(None, pa.string()))


class Deleter(Stage):
    name: ClassVar[str] = "deleter"

    def process(self, batch: pa.Table) -> pa.Table:
        return batch.slice(1)


def test_filter_marks_rows_instead_of_deleting():
    out = DropShort()(pa.table({"text": ["ab", "abcd", "x"]}))
    assert out.num_rows == 3
    assert out.column(C.DROP_REASON).to_pylist() == ["too_short", None, "too_short"]
    assert out.column(C.DROP_STAGE).to_pylist() == ["drop_short", None, "drop_short"]
    assert out.column(C.STATUS).to_pylist() == ["rejected", "kept", "rejected"]


def test_missing_column_is_a_clear_error():
    with pytest.raises(StageError, match=r"needs column\(s\) \['text'\]"):
        DropShort()(pa.table({"question": ["abc"]}))


def test_a_stage_that_deletes_rows_is_refused():
    with pytest.raises(StageError, match="drop_reason instead of deleting"):
        Deleter()(pa.table({"text": ["a", "b"]}))


def test_first_drop_reason_wins():
    t = pa.table({"text": ["a", "b"], C.DROP_REASON: ["empty", None]})
    out = set_drop_reason(t, pa.array(["too_short", "too_short"]))
    assert out.column(C.DROP_REASON).to_pylist() == ["empty", "too_short"]


def test_config_is_validated():
    with pytest.raises(ValueError):
        DropShort(min_chars="many")
    with pytest.raises(ValueError):
        DropShort(unknown_field=1)


def test_normalize_keeps_original_and_folds_forms():
    raw = ["ｋｉｍｃｈｉ\u200b  냉장고\x07는\n\t어떻게? ", "  "]
    out = NormalizeText()(pa.table({"text": raw}))
    assert out.column("text").to_pylist() == ["kimchi 냉장고는 어떻게?", ""]
    assert out.column("text_original").to_pylist() == raw


def test_a_zone_read_back_keeps_the_columns_every_stage_added(tmp_path):
    """rejected/ holds rows of early stages (few columns) and late ones (their scores): none may vanish."""
    early = tmp_path / "rejected" / "02_length_filter"
    late = tmp_path / "rejected" / "08_ensemble"
    early.mkdir(parents=True)
    late.mkdir(parents=True)
    pq.write_table(pa.table({C.ID: ["a"], C.DROP_REASON: ["too_short"]}), early / "p0.parquet")
    pq.write_table(pa.table({C.ID: ["b"], C.DROP_REASON: ["ensemble_rejected:m"], "ens_score": [0.25],
                             "ens_calls": pa.array([1], pa.int32())}), late / "p0.parquet")
    table = read_table(tmp_path / "rejected").sort_by(C.ID)
    assert table.to_pydict() == {C.ID: ["a", "b"], C.DROP_REASON: ["too_short", "ensemble_rejected:m"],
                                 "ens_score": [None, 0.25], "ens_calls": [None, 1]}


def test_a_stage_that_can_never_be_scheduled_fails_at_once_instead_of_waiting_forever(caplog):
    from transforms.core.runner import check_schedulable
    from transforms.dedup.exact import ExactDedup
    from transforms.text.langid import LanguageFilter

    langid = LanguageFilter(languages=["ko"])  # one actor of 1 CPU, as in the ko-piqa job
    check_schedulable(langid, cluster_cpus=2, fixed=True)  # the actor takes one CPU, reads the other
    with pytest.raises(StageError, match=r"'langid' cannot run: its 1 actor\(s\) reserve 1 of this Ray's 1 CPUs"):
        check_schedulable(langid, cluster_cpus=1, fixed=True)
    wide = LanguageFilter.model_validate({"languages": ["ko"], "resources": {"cpus": 1, "concurrency": 2}})
    with pytest.raises(StageError, match=r"2 actor\(s\) reserve 2 of this Ray's 2 CPUs"):
        check_schedulable(wide, cluster_cpus=2, fixed=True)
    big_tasks = ExactDedup.model_validate({"resources": {"cpus": 4}})  # a stage of tasks: no actors to reserve
    check_schedulable(big_tasks, cluster_cpus=4, fixed=True)
    with pytest.raises(StageError, match="asks for 4 CPUs and this Ray has 2"):
        check_schedulable(big_tasks, cluster_cpus=2, fixed=True)
    # on a cluster the autoscaler may add nodes: a warning, not an error
    with caplog.at_level("WARNING", logger="piqaforge"):
        check_schedulable(langid, cluster_cpus=1, fixed=False)
    assert "'langid' cannot run" in caplog.text and "autoscaler" in caplog.text


class _PidStageActor:
    """The runner's stage actor, plus its process id, so a test can see that Ray restarted it."""

    def __init__(self, stage: Stage):
        from transforms.core.runner import _StageActor

        self.actor = _StageActor(stage)

    def run(self, batch: pa.Table) -> tuple[int, list[str]]:
        return os.getpid(), self.actor(batch).column(C.TEXT).to_pylist()


@pytest.mark.ray
def test_an_actor_ray_restarts_after_its_stage_finished_exits_and_frees_its_cpu(ray_local, tmp_path):
    """Ray restarts a dead actor to rebuild the blocks it made, even when its stage is long over.

    Such a zombie held a CPU forever after a node was lost in CI, and the next stage waited for it.
    """
    import ray
    from ray.exceptions import RayActorError

    batch = pa.table({C.ID: ["a", "b"], C.TEXT: ["ｈｅｌｌｏ", "ok"]})
    marker = tmp_path / "_CHECKPOINT.json"
    stage = NormalizeText()
    stage.set_finished_marker(marker)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import tests/
    actor_cls = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)(_PidStageActor)

    def cpus_free() -> float:
        return ray.available_resources().get("CPU", 0.0)

    def cpus_free_settles_at(want: float) -> float:
        deadline = time.time() + 30
        while cpus_free() != want and time.time() < deadline:
            time.sleep(0.2)
        return cpus_free()

    def kill_process(actor) -> int:  # as when its node dies: not a deliberate end, so Ray brings it back
        pid, _ = ray.get(actor.run.remote(batch))
        os.kill(pid, signal.SIGKILL)
        return pid

    base = cpus_free()
    # while the stage runs, a restarted actor comes back and works
    running = actor_cls.remote(stage)
    pid = kill_process(running)
    new_pid, texts = ray.get(running.run.remote(batch), timeout=60)
    assert new_pid != pid and texts == ["hello", "ok"]
    assert cpus_free_settles_at(base - 1) == base - 1
    ray.kill(running)
    assert cpus_free_settles_at(base) == base

    # once the stage has written its checkpoint, the restarted actor leaves and gives its CPU back
    zombie = actor_cls.remote(stage)
    ray.get(zombie.run.remote(batch))
    marker.write_text("{}")
    kill_process(zombie)
    with pytest.raises(RayActorError):
        ray.get(zombie.run.remote(batch), timeout=60)
    assert cpus_free_settles_at(base) == base
