"""Execution: a stage on Ray Data — a task per batch, or an actor pool when it loads a model.

The partition bookkeeping (`_part`, `_row`) rides along every row: the stage never sees it, and
it is put back afterwards — row for row for a filter, through `_src` (the input row each output
row comes from) for a stage that creates rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from transforms.core.creating import SRC, SourceStage
from transforms.core.envs import CPU_PIN_RESOURCE, PRESETS, set_cpu_pin
from transforms.core.planning import TRACKING
from transforms.core.stage import GlobalStage, Stage, StageError, mark_dropped

log = logging.getLogger("piqaforge")

# True when init_ray started Ray itself: its CPUs are fixed, no autoscaler will add any.
_FIXED_CPUS = False


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start or join Ray. Under `ray job submit` RAY_ADDRESS is set and we join the cluster."""
    import ray

    if ray.is_initialized():
        _configure_data_context()
        return
    global _FIXED_CPUS
    address = address or os.environ.get("RAY_ADDRESS")
    _FIXED_CPUS = not address
    if address:
        ray.init(address=address, log_to_driver=True)
        set_cpu_pin(ray.cluster_resources().get(CPU_PIN_RESOURCE, 0) > 0)
    else:
        # One machine stands in for every worker type: it advertises each environment's custom
        # resource, and PIQAFORGE_<ENV>_PYTHON points a stage at another venv (envs.py).
        env_resources = {k: 1000.0 for p in PRESETS.values() for k in p.custom_resources}
        # The raylet waits this long for its agents' port files before it aborts; on a loaded machine the
        # Python agents take longer than Ray's default to start (raylet.out: "Timed out waiting for file").
        os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
        # address="local": never join some other Ray instance recorded in /tmp/ray by `ray start`
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                # workers' own lines (a stage's warnings, Ray's worker noise) stay in the session's logs unless
                # -v: the console shows our lines; what a stage measured is in its record and the run report
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                         log_to_driver=os.environ.get("PIQAFORGE_VERBOSE") == "1",
                         resources=env_resources,
                         object_store_memory=int(os.environ.get("PIQAFORGE_OBJECT_STORE_BYTES", 2 * 2**30)))
                break
            except Exception as exc:  # Ray raises a bare Exception when its raylet registers too late
                if "timed out during startup" not in str(exc) or attempt == START_ATTEMPTS:
                    raise
                log.warning("Ray's raylet did not register within Ray's fixed 30 s (a loaded machine?): "
                            "starting Ray again (%d/%d)", attempt + 1, START_ATTEMPTS)
                ray.shutdown()
    _configure_data_context()


# A local Ray start gives its raylet a fixed 30 s to register with the GCS (ray/_private/node.py, not
# configurable); on a loaded machine that fails now and then, and a second start usually succeeds.
START_ATTEMPTS = 3


# Ray Data fails a dataset that moved no block for 30 min. One batch of an LLM stage on a CPU (8 items of a
# 1.5B model on a loaded 2-core machine) or of a large model behind a queue can take longer than that, and
# the whole stage would fail with work in flight: our stages' liveness is their own, so the limit is 6 h here.
NO_PROGRESS_TIMEOUT_S = 6 * 3600


def _configure_data_context() -> None:
    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = os.environ.get("PIQAFORGE_PROGRESS", "1") != "0"
    if hasattr(ctx, "raise_original_map_exception"):
        # A stage's own exception reaches the driver as itself (an EndpointError with its endpoint and cause):
        # Ray's UserCodeException wrapper loses its cause when pickled, and its hint (configure
        # ray.data.DataContext retries) is not one a user can act on (issue 35 §4).
        ctx.raise_original_map_exception = True
    if hasattr(ctx, "execution_no_progress_timeout_s"):  # Ray >= 2.5x
        ctx.execution_no_progress_timeout_s = float(os.environ.get("PIQAFORGE_NO_PROGRESS_TIMEOUT_S",
                                                                   NO_PROGRESS_TIMEOUT_S))


def fixed_cpus() -> bool:
    return _FIXED_CPUS


def with_tracking(fn: Callable[[pa.Table], pa.Table]) -> Callable[[pa.Table], pa.Table]:
    """Wrap a stage call so the stage never sees `_part`/`_row` and they survive it."""

    def call(batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        carried = [(name, batch.column(name)) for name in TRACKING if name in batch.schema.names]
        out = fn(batch.drop_columns([name for name, _ in carried]))
        if SRC in out.schema.names:  # a creating stage: each output row names its input row
            src = out.column(SRC)
            for name, col in carried:
                out = out.append_column(name, col.take(src))
            return out.drop_columns([SRC])
        for name, col in carried:  # the filter contract guarantees same rows, same order
            out = out.append_column(name, col)
        return out

    return call


class _StageActor:
    def __init__(self, stage: Stage[Any], tracked: bool = False):
        stage.exit_actor_if_finished()
        self.stage = stage
        self.stage.ensure_setup()
        self.call = with_tracking(stage) if tracked else stage

    def __call__(self, batch: Any) -> Any:
        return self.call(batch)


def map_stage(stage: Stage[Any], ds: Any) -> Any:
    """A row-wise (filter or expand) stage on the partitions' dataset, tracking carried through."""
    args: dict[str, Any] = {"batch_format": "pyarrow", "batch_size": stage.resources.batch_size}
    args.update(stage.resources.ray_remote_args())
    if stage.stateful:
        from ray.data import ActorPoolStrategy

        return ds.map_batches(_StageActor, fn_constructor_kwargs={"stage": stage, "tracked": True},
                              compute=ActorPoolStrategy(size=stage.resources.concurrency or 1), **args)
    return ds.map_batches(with_tracking(stage), **args)


def ensure_status(ds: Any, stage_name: str) -> Any:
    """Sources and global stages may hand back rows without the bookkeeping columns."""
    return ds.map_batches(lambda b: mark_dropped(b, stage_name), batch_format="pyarrow")


def run_global(stage: GlobalStage, ds: Any, partitions: list[Any] | None = None) -> Any:
    out = stage.run_dataset(ds) if partitions is None else stage.run_partitions(ds, partitions)
    return out if getattr(stage, "creates", False) else ensure_status(out, stage.name)


def read_source(stage: SourceStage[Any]) -> Any:
    """The source's rows as a Ray Dataset; a table in memory (`rows()` only) as that table while this process
    has not started Ray: a run of a source alone (a review import) then needs no Ray at all (docs/review.md)."""
    import sys

    ray = sys.modules.get("ray")
    if type(stage).read is SourceStage.read and (ray is None or not ray.is_initialized()):
        return mark_dropped(stage.rows(), stage.name)
    return ensure_status(stage.read(), stage.name)


def check_schedulable(stage: Stage[Any], cluster_cpus: float, fixed: bool) -> None:
    """Fail at once, not hang forever, when a stage can never be scheduled on this Ray.

    Ray Data does not notice either case below: the tasks wait for CPUs that never free up. On a
    Ray the runner started itself the CPUs are fixed, so this raises; on a cluster the autoscaler
    may still add nodes, so it only warns.
    """
    r = stage.resources
    problem = None
    if r.cpus > cluster_cpus:
        problem = f"each of its tasks or actors asks for {r.cpus:g} CPUs and this Ray has {cluster_cpus:g}"
    elif stage.stateful or r.concurrency:
        actors = r.concurrency or 1
        if cluster_cpus - r.cpus * actors < 1:
            problem = (f"its {actors} actor(s) reserve {r.cpus * actors:g} of this Ray's {cluster_cpus:g} CPUs, "
                       "which leaves less than one for the tasks that read the actors' input")
    if problem is None:
        return
    label = stage.label() if hasattr(stage, "label") else repr(stage.name)  # a fused step names its members
    msg = (f"stage {label} cannot run: {problem}. Give Ray more CPUs (`--set num_cpus=N`; Ray's CPUs "
           "are logical, so N may exceed the cores) or lower the stage's resources.cpus / resources.concurrency")
    if fixed:
        raise StageError(msg)
    log.warning("%s (going on: the cluster's autoscaler may add nodes)", msg)
