"""The stage contract.

A stage is a small pydantic model: its fields are its configuration, `reads`/`writes` declare the
columns it needs and makes, and `resources` says what one copy of it costs on a cluster. It maps
an Arrow batch to a batch of the *same rows in the same order*; a row it wants gone gets a
`drop_reason`, and the runner moves it to `rejected/`. Heavy models load in `setup()`, which
runs once per worker (a Ray actor when `stateful`), never at import.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from transforms.core import columns as C

log = logging.getLogger("piqaforge")


class StageError(RuntimeError):
    """A stage could not run on its input (wrong columns, broken contract)."""


class Resources(BaseModel):
    """What one copy of a stage needs; the runner turns this into Ray Data arguments."""

    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(1.0, ge=0, description="CPUs per task or actor.")
    gpus: float = Field(0.0, ge=0, description="GPUs per actor (fractions share a GPU).")
    memory_gb: float | None = Field(None, ge=0, description="Memory to reserve per task/actor, in GiB.")
    concurrency: int | None = Field(
        None, ge=1, description="Number of actors for stateful stages; tasks are scheduled freely when unset."
    )
    batch_size: int | None = Field(4096, ge=1, description="Rows per batch handed to the stage.")
    runtime_env: dict[str, Any] | None = Field(
        None,
        description="Ray runtime_env for this stage's workers (e.g. a vLLM or cuML environment); "
        "lets one job mix stages whose dependencies cannot share one Python environment.",
    )
    accelerator_type: str | None = Field(None, description="Ray accelerator type, e.g. 'H100'.")
    env: str | None = Field(None, description="Named environment preset (transforms/core/envs.py: cpu, vllm, "
                            "cuml): its runtime_env, plus a custom resource that places the stage on the "
                            "cluster worker type built for it; `runtime_env` above is merged on top.")
    custom_resources: dict[str, float] | None = Field(None, description="Extra Ray custom resources per copy.")
    secrets: list[str] = Field(default_factory=list, description="Names of environment variables (e.g. "
                               "OPENAI_API_KEY) forwarded from the process that starts the job to this stage's "
                               "workers; the values are never recorded (docs/secrets.md).")

    # Values of `secrets` (and of credential-named literal runtime_env env_vars) taken when the stage is
    # pickled to be shipped to a worker, and put into the worker's environment when it is unpickled there:
    # they travel with the stage object, never in a config field or a Ray runtime_env, which Ray logs.
    _forwarded: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("secrets")
    @classmethod
    def _names_not_values(cls, names: list[str]) -> list[str]:
        from transforms.core.secrets import valid_variable_name

        if bad := [i for i, n in enumerate(names) if not valid_variable_name(n)]:  # never echo the value
            raise ValueError(f"secrets lists environment variable names (letters, digits, _); item(s) {bad} "
                             "are not names: put the value in the environment and list its name")
        return names

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        forwarded = {n: os.environ[n] for n in self.secrets if n in os.environ}
        forwarded.update(self._credential_env_vars())
        if forwarded:
            state = {**state, "__pydantic_private__": {**(state.get("__pydantic_private__") or {}),
                                                       "_forwarded": forwarded}}
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        for name, value in (self.__pydantic_private__ or {}).get("_forwarded", {}).items():
            os.environ.setdefault(name, value)

    def _credential_env_vars(self) -> dict[str, str]:
        from transforms.core.secrets import credential_name

        env = (self.runtime_env or {}).get("env_vars") or {}
        return {str(k): str(v) for k, v in env.items() if credential_name(str(k)) and v not in (None, "")}

    def missing_secrets(self) -> list[str]:
        return [n for n in self.secrets if not os.environ.get(n)]

    def ray_remote_args(self) -> dict[str, Any]:
        if missing := self.missing_secrets():
            raise StageError(f"secret(s) {missing} named in resources.secrets are not set in the environment of "
                             "the process that starts the job (docs/secrets.md)")
        args: dict[str, Any] = {"num_cpus": self.cpus}
        if self.gpus:
            args["num_gpus"] = self.gpus
        if self.memory_gb:
            args["memory"] = int(self.memory_gb * 2**30)
        runtime_env, resources, accelerator = self.runtime_env, dict(self.custom_resources or {}), None
        if self.env:
            from transforms.core.envs import get_env, merge_runtime_env

            preset = get_env(self.env)
            runtime_env = merge_runtime_env(preset.resolved_runtime_env(), self.runtime_env)
            resources = {**preset.custom_resources, **resources}
            # the preset's accelerator only matters where the stage asks for a GPU
            accelerator = preset.accelerator_type if self.gpus else None
        if not self.gpus and (self.env in (None, "cpu")):
            from transforms.core.envs import CPU_PIN_RESOURCE, cpu_pin_active

            if cpu_pin_active() and not resources:
                resources = {CPU_PIN_RESOURCE: 1}
        if runtime_env and (credentials := self._credential_env_vars()):
            # forwarded with the pickled stage instead (see _forwarded): Ray would log them in plain text
            runtime_env = {**runtime_env, "env_vars": {k: v for k, v in runtime_env["env_vars"].items()
                                                       if k not in credentials}}
            if not runtime_env["env_vars"]:
                del runtime_env["env_vars"]
        if runtime_env:
            args["runtime_env"] = runtime_env
        if resources:
            args["resources"] = resources
        if self.accelerator_type or accelerator:
            args["accelerator_type"] = self.accelerator_type or accelerator
        return args


class Stage(BaseModel):
    """Base class of every row-wise stage."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: ClassVar[str] = "stage"
    reads: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ()
    # The pyproject extras this stage needs whatever its configuration (its engines' backends add theirs):
    # placement, the cluster's node set-up and `piqaforge stages` read them from here.
    extras: ClassVar[tuple[str, ...]] = ()
    # True when setup() loads something expensive: the runner then uses an actor pool so the
    # model loads once per worker instead of once per batch.
    stateful: ClassVar[bool] = False

    resources: Resources = Field(default_factory=Resources, description="Per-copy resources on a cluster.")

    _is_set_up: bool = PrivateAttr(default=False)
    # A file that exists once this stage's run is over (the runner sets it: the stage's checkpoint).
    _finished_marker: str | None = PrivateAttr(default=None)

    # -- to override -------------------------------------------------------------------------
    def setup(self) -> None:
        """Load models or indexes. Runs once per worker, before the first batch."""

    def process(self, batch: pa.Table) -> pa.Table:
        """Return `batch` with the `writes` columns and, for rows to drop, a `drop_reason`."""
        raise NotImplementedError

    # -- the contract, enforced ----------------------------------------------------------------
    def check_columns(self, schema: pa.Schema) -> None:
        missing = [c for c in self.reads if c not in schema.names]
        if missing:
            raise StageError(
                f"stage '{self.name}' needs column(s) {missing}, but the batch has {schema.names}. "
                f"Check the column mapping or the stage order."
            )

    def set_finished_marker(self, path: str | os.PathLike[str]) -> None:
        """Name the file whose existence means this stage's run is over (before its actors are made)."""
        self._finished_marker = os.fspath(path)

    def exit_actor_if_finished(self) -> None:
        """First thing in the constructor of every actor that runs a stage.

        Ray keeps the lineage of a finished stage's blocks, and when a node holding some of them dies
        it restarts the actor that made them to rebuild them, long after the stage wrote its output.
        Nobody reads those blocks again, but the restarted actor would keep its CPUs (or GPU) until
        the job ends, and a later stage can then wait for them forever. Such an actor leaves at once.
        """
        if self._finished_marker is None or not os.path.exists(self._finished_marker):
            return
        import ray

        log.warning("stage %r finished before this actor (re)started (Ray restarted it to rebuild blocks "
                    "lost with a node); it exits without loading anything", self.name)
        ray.actor.exit_actor()

    def ensure_setup(self) -> None:
        if not self._is_set_up:
            note_placement(self.name)
            try:
                self.setup()
            except ImportError as err:  # a node whose image lacks the stage's code: say which, at once
                raise type(err)(f"stage '{self.name}' cannot start on this node ({_where()}): {err}") from err
            self._is_set_up = True

    def prepare(self, batch: pa.Table | pa.RecordBatch) -> pa.Table:
        """The batch as a table, its columns checked and the stage set up (every kind's first step)."""
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        self.check_columns(batch.schema)
        self.ensure_setup()
        return batch

    def __call__(self, batch: pa.Table) -> pa.Table:
        batch = self.prepare(batch)
        n = batch.num_rows
        out = self.process(batch) if n else self.process_empty(batch)
        if out.num_rows != n:
            raise StageError(
                f"stage '{self.name}' returned {out.num_rows} rows for {n}: stages must mark rows with a "
                f"drop_reason instead of deleting them."
            )
        missing = [c for c in self.writes if c not in out.schema.names]
        if missing:
            raise StageError(f"stage '{self.name}' promised column(s) {missing} but did not write them.")
        return mark_dropped(out, self.name)

    def process_empty(self, batch: pa.Table) -> pa.Table:
        # Empty blocks happen on Ray; give them the output schema without calling the model.
        out = batch
        for col in self.writes:
            if col not in out.schema.names:
                out = out.append_column(col, pa.nulls(0, pa.string()))
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "reads": list(self.reads), "writes": list(self.writes), **self.model_dump()}


class FilterStage(Stage):
    """A stage that only decides keep-or-drop: override `reasons` and return null for kept rows."""

    def reasons(self, batch: pa.Table) -> pa.Array:
        raise NotImplementedError

    def process(self, batch: pa.Table) -> pa.Table:
        return set_drop_reason(batch, self.reasons(batch))


class GlobalStage(Stage):
    """A stage that must see the whole dataset at once (dedup, sampling, clustering).

    `process_table` is the pure function that unit tests call on a small table. `run_dataset` is
    what the runner calls on Ray; the default gathers the blocks into one remote task (not the
    driver), which is right for the small tables late in a recipe. Stages that scale to millions
    of rows (exact and MinHash dedup) override it with a distributed implementation.
    """

    def process_table(self, table: pa.Table) -> pa.Table:
        raise NotImplementedError

    def process(self, batch: pa.Table) -> pa.Table:
        return self.process_table(batch)

    def run_dataset(self, ds: Any) -> Any:
        import ray

        refs = ds.to_arrow_refs()
        remote = ray.remote(**self.resources.ray_remote_args())(_run_global)
        return ray.data.from_arrow_refs([remote.remote(self, *refs)])


def _run_global(stage: GlobalStage, *tables: pa.Table) -> pa.Table:
    table = pa.concat_tables(list(tables), promote_options="default") if tables else pa.table({})
    return stage(table)


def placement_args(place: dict[str, Any] | None) -> dict[str, Any]:
    """Ray remote args for work placed as a stage with these `resources` fields would be (an engine profile's
    `resources`: automatic review's annotators, the audit's model, an embedder actor)."""
    known = {k: v for k, v in (place or {}).items() if k in Resources.model_fields}
    return Resources.model_validate(known).ray_remote_args()


# -- where stages ran (the cluster rehearsal reads these) ---------------------------------------------------
PLACEMENT_LOG_VAR = "PIQAFORGE_PLACEMENT_LOG"
_NOTED: set[str] = set()


def _where() -> str:
    import socket
    import sys

    return f"host {socket.gethostname()}, python {sys.executable}, env {os.environ.get('PIQAFORGE_NODE_ENV', '?')}"


def note_placement(stage_name: str) -> None:
    """With PIQAFORGE_PLACEMENT_LOG set (a folder on the shared lake), write once per stage and process
    which Ray node, worker, actor or task set the stage up; the rehearsal checks these ids against Ray's
    state API. Nothing happens without the variable or outside Ray."""
    folder = os.environ.get(PLACEMENT_LOG_VAR)
    if not folder or stage_name in _NOTED:
        return
    _NOTED.add(stage_name)
    import json
    import sys

    record: dict[str, Any] = {"stage": stage_name, "pid": os.getpid(), "python": sys.executable,
                              "env": os.environ.get("PIQAFORGE_ENV") or os.environ.get("PIQAFORGE_NODE_ENV")}
    try:
        import ray

        if ray.is_initialized():
            ctx = ray.get_runtime_context()
            record.update(node_id=ctx.get_node_id(), job_id=ctx.get_job_id(), worker_id=ctx.get_worker_id(),
                          actor_id=ctx.get_actor_id(), task_id=ctx.get_task_id(),
                          driver=ctx.worker.mode == ray._private.worker.SCRIPT_MODE)
    except Exception as err:  # noqa: BLE001 (a record without ids still says where: never fail a stage for it)
        record["error"] = repr(err)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{stage_name}-{record.get('node_id', 'none')[:12]}-{os.getpid()}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(path + ".tmp", path)


# -- helpers shared by stages and the runner ------------------------------------------------------
def put_column(table: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Replace column `name` if the table has it, else append it."""
    if name in table.schema.names:
        return table.set_column(table.schema.get_field_index(name), name, values)
    return table.append_column(name, values)


def set_drop_reason(batch: pa.Table, reasons: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Merge new reasons into the batch; an earlier reason on the same row wins."""
    reasons = reasons.cast(pa.string())
    if C.DROP_REASON in batch.schema.names:
        current = batch.column(C.DROP_REASON).cast(pa.string())
        merged = pc.coalesce(current, reasons)
        return batch.set_column(batch.schema.get_field_index(C.DROP_REASON), C.DROP_REASON, merged)
    return batch.append_column(C.DROP_REASON, reasons)


def set_duplicate_of(batch: pa.Table, duplicate_of: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Record which kept row each row duplicates; an earlier dedup stage's answer on a row stands."""
    duplicate_of = duplicate_of.cast(pa.string())
    if C.DUPLICATE_OF in batch.schema.names:
        duplicate_of = pc.coalesce(batch.column(C.DUPLICATE_OF).cast(pa.string()), duplicate_of)
    return put_column(batch, C.DUPLICATE_OF, duplicate_of)


def mark_dropped(batch: pa.Table, stage_name: str) -> pa.Table:
    """Give every row a string `drop_reason`, `drop_stage` and `_status` (kept/rejected)."""
    n = batch.num_rows
    if C.DROP_REASON not in batch.schema.names:
        batch = batch.append_column(C.DROP_REASON, pa.nulls(n, pa.string()))
    reason = batch.column(C.DROP_REASON).cast(pa.string())
    batch = batch.set_column(batch.schema.get_field_index(C.DROP_REASON), C.DROP_REASON, reason)
    dropped = pc.is_valid(reason)
    stage_col = pc.if_else(dropped, pa.scalar(stage_name), pa.scalar(None, pa.string()))
    if C.DROP_STAGE in batch.schema.names:
        old = batch.column(C.DROP_STAGE).cast(pa.string())
        batch = batch.set_column(batch.schema.get_field_index(C.DROP_STAGE), C.DROP_STAGE, pc.coalesce(old, stage_col))
    else:
        batch = batch.append_column(C.DROP_STAGE, stage_col)
    status = pc.if_else(dropped, pa.scalar(C.REJECTED), pa.scalar(C.KEPT))
    if C.STATUS in batch.schema.names:
        return batch.set_column(batch.schema.get_field_index(C.STATUS), C.STATUS, status)
    return batch.append_column(C.STATUS, status)
