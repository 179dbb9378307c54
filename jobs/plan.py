"""`piqaforge plan RECIPE --rows N`: what a recipe run costs before it is submitted (issue 42).

Per stage, in run order: the rows it gets and keeps, its CPU-hours or GPU-hours, its wall time on the node type
the cluster config places it on (cluster.yaml's workers), and a price from the prices given. Every figure comes
from a measurement, and the plan says whose:

* **keep shares and rates** from the last finished run of the recipe in the lake (its manifest records each
  stage's rows, its rows per CPU-second, GPU-seconds held, and the machine: transforms/core/manifest.py), else
  from the committed seed (`benchmarks/rates/<recipe>.json`: the bundled sample's shares and the benchmark's
  rates, with the machine and the command that measured them). A run only counts for a stage that ran with the
  same models (the `model` and `backend` values in its config): a local Gemma's keep share is not a cluster
  Qwen's.
* A CPU rate counts when the run measured its workers (a local run: cpu_scope "driver + its local Ray
  processes"); a cluster run measured its driver only. A GPU rate counts where the stage held GPUs.
* What was never measured is printed as **unmeasured**, with the command that measures it; its rows, hours and
  price stay out of the totals, which say so. A stage the config puts on a GPU with only a CPU rate measured is
  planned on the CPU workers, marked.

Wall time: CPU-hours over the CPUs the stage can use (node type workers x CPUs, or its actors x their CPUs when
the stage fixes `concurrency`), at `efficiency` of ideal scaling (an assumption, printed, not a measurement);
GPU stages alike with GPUs. Price: `NODE_TYPE=USD` per node-hour of the nodes a stage keeps busy, else
`cpu_hour=USD` per CPU-hour and `gpu_hour=USD` per GPU-hour.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "benchmarks" / "rates"
LOCAL_SCOPE = "driver + its local Ray processes"  # transforms/core/cpu_time.py TREE
FINISHED = ("succeeded", "awaiting_review")


def identity(config: Any) -> list[str]:
    """The models and backends a stage's config names, anywhere in it: what a rate or share holds for."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("model", "backend") and isinstance(value, str):
                    found.add(f"{key}={value}")
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return sorted(found)


@dataclass
class Measured:
    """One stage's figures from one source: a lake run or the seed file."""

    source: str  # "run <id>" or the seed file's path
    machine: str
    rows_processed: int | None = None
    rows_kept: int | None = None
    rows_per_cpu_second: float | None = None
    rows_per_gpu_second: float | None = None
    why_no_cpu: str = ""
    identity: list[str] = field(default_factory=list)

    @property
    def share(self) -> float | None:
        return None if not self.rows_processed or self.rows_kept is None else self.rows_kept / self.rows_processed


def machine_text(machine: dict[str, Any] | None) -> str:
    if not machine:
        return "machine not recorded"
    gpus = ", ".join(machine.get("gpus") or [])
    return f"{machine.get('cpu_model')}, {machine.get('logical_cpus')} CPUs" + (f", {gpus}" if gpus else "")


def lake_runs(lake: Path, recipe: str) -> dict[str, dict[str, Measured]]:
    """Per run name, per stage: the figures of the last finished run of `recipe` in `lake`."""
    from transforms.core.manifest import RunManifest

    latest: dict[str, RunManifest] = {}
    for path in sorted((lake / "runs").glob("*/manifest.json")):
        try:
            m = RunManifest.load(path)
        except (OSError, ValueError):
            continue
        name = m.job.partition(":")[2]
        if m.job.partition(":")[0] != recipe or m.status not in FINISHED or not name:
            continue
        if name not in latest or (m.finished_at or "") > (latest[name].finished_at or ""):
            latest[name] = m
    out: dict[str, dict[str, Measured]] = {}
    for name, m in latest.items():
        stages: dict[str, Measured] = {}
        for s in m.stages:
            local = s.cpu_scope == LOCAL_SCOPE
            stages.setdefault(s.name, Measured(
                source=f"run {m.run_id}", machine=machine_text(m.machine) if local or s.gpu_seconds else
                "a cluster (its workers' CPUs not recorded)", rows_processed=s.rows_processed, rows_kept=s.rows_kept,
                rows_per_cpu_second=s.rows_per_cpu_second if local else None,
                rows_per_gpu_second=s.rows_per_gpu_second,
                why_no_cpu="" if local else f"run {m.run_id} measured its driver only (a cluster run)",
                identity=identity(s.config)))
        out[name] = stages
    return out


def seed_runs(recipe: str, folder: Path = SEEDS) -> dict[str, dict[str, Measured]]:
    """Per run name, per stage: the committed seed's figures for `recipe` ({} without a seed file)."""
    path = folder / f"{recipe}.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    label = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({data.get('measured_at', '?')})"
    machine = machine_text(data.get("machine"))
    return {run: {name: Measured(source=label, machine=machine, rows_processed=s.get("rows_in"),
                                 rows_kept=s.get("rows_kept"), rows_per_cpu_second=s.get("rows_per_cpu_second"),
                                 rows_per_gpu_second=s.get("rows_per_gpu_second"), identity=s.get("identity", []))
                  for name, s in stages.items()}
            for run, stages in data.get("runs", {}).items()}


def node_types(path: Path) -> dict[str, dict[str, Any]]:
    """cluster.yaml's node types that take work: {name: {workers, resources}}."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {name: {"workers": int(spec.get("max_workers", 0) or 0),
                   "resources": {k: float(v) for k, v in (spec.get("resources") or {}).items()}}
            for name, spec in data["available_node_types"].items()
            if int(spec.get("max_workers", 0) or 0) > 0 and float((spec.get("resources") or {}).get("CPU", 0)) > 0}


def place(stage: Any, types: dict[str, dict[str, Any]], cpu_only: bool = False) -> str | None:
    """The smallest node type (fewest GPUs, then CPUs) that holds one copy of `stage`."""
    from transforms.flow.demand import Demand, demand, nodes_fitting

    want = Demand(cpus=demand(stage).cpus) if cpu_only else demand(stage)
    fits = nodes_fitting(want, {n: t["resources"] for n, t in types.items()})
    if cpu_only:
        fits = [n for n in fits if not types[n]["resources"].get("GPU")]
    return min(fits, key=lambda n: (types[n]["resources"].get("GPU", 0), types[n]["resources"].get("CPU", 0)),
               default=None)


@dataclass
class Planned:
    run: str
    stage: str
    node: str | None
    rows_in: float | None
    rows_kept: float | None = None
    share_from: Measured | None = None
    rate_from: Measured | None = None
    unit: str = ""  # "CPU" or "GPU"
    rate: float | None = None
    cpu_h: float | None = None
    gpu_h: float | None = None
    wall_h: float | None = None
    usd: float | None = None
    note: str = ""


def _capacity(stage: Any, node: dict[str, Any], unit: str) -> tuple[float, float]:
    """(CPUs or GPUs the stage can keep busy at once, per node of its type)."""
    from transforms.flow.demand import demand

    want = demand(stage)
    per_copy = want.gpus if unit == "GPU" else max(want.cpus, 1e-9)
    per_node = node["resources"].get(unit, 0.0)
    total = node["workers"] * per_node
    concurrency = getattr(getattr(stage, "resources", None), "concurrency", None)
    if concurrency:
        total = min(total, concurrency * per_copy)
    return total, per_node


def plan_stage(run: str, stage: Any, rows_in: float | None, lake: dict[str, Measured], seed: dict[str, Measured],
               types: dict[str, dict[str, Any]], prices: dict[str, float], efficiency: float) -> Planned:
    name = stage.name
    ident = identity(stage.describe())
    sources = [m for m in (lake.get(name), seed.get(name)) if m is not None]
    same = [m for m in sources if m.identity == ident]
    node = place(stage, types)
    p = Planned(run=run, stage=name, node=node, rows_in=rows_in)
    share_from = next((m for m in same if m.share is not None), None)
    if share_from is not None and rows_in is not None:
        p.share_from, p.rows_kept = share_from, rows_in * share_from.share  # type: ignore[operator]
    other = [m for m in sources if m.identity != ident]
    models = f" (measured with {', '.join(other[0].identity) or 'no model'})" if other else ""
    wants_gpu = node is not None and stage_gpus(stage) > 0
    gpu_from = next((m for m in same if m.rows_per_gpu_second), None) if wants_gpu else None
    cpu_from = next((m for m in same if m.rows_per_cpu_second), None)
    if gpu_from is not None:
        p.unit, p.rate_from, p.rate = "GPU", gpu_from, gpu_from.rows_per_gpu_second
    elif cpu_from is not None:
        p.unit, p.rate_from, p.rate = "CPU", cpu_from, cpu_from.rows_per_cpu_second
        if wants_gpu:
            p.node = place(stage, types, cpu_only=True)
            p.note = f"config: {node}; no GPU rate measured, planned on CPU workers at its CPU rate"
    else:
        why = "; ".join(m.why_no_cpu for m in same if m.why_no_cpu) or \
            f"no finished run of this stage with {', '.join(ident) or 'its config'}{models}"
        p.note = f"unmeasured: {why}"
    if p.rate is None or rows_in is None or p.node is None:
        if p.rate is not None and p.node is None:
            p.note = "no node type in the cluster config holds it"
        return p
    t = types[p.node]
    hours = rows_in / p.rate / 3600
    busy, per_node = _capacity(stage, t, p.unit)
    p.cpu_h, p.gpu_h = (hours, 0.0) if p.unit == "CPU" else (0.0, hours)
    p.wall_h = hours / max(busy * efficiency, 1e-9)
    if p.node in prices:
        p.usd = p.wall_h * min(t["workers"], math.ceil(busy / max(per_node, 1e-9))) * prices[p.node]
    elif f"{p.unit.lower()}_hour" in prices:
        p.usd = hours * prices[f"{p.unit.lower()}_hour"]
    return p


def stage_gpus(stage: Any) -> float:
    from transforms.flow.demand import demand

    return demand(stage).gpus


def plan(recipe: Any, rows: int, lake: Path, cluster: Path, prices: dict[str, float] | None = None,
         efficiency: float = 0.7, seeds: Path = SEEDS) -> list[Planned]:
    """Every stage of `recipe` (loaded with the cluster config that places it) for `rows` input rows."""
    from transforms.flow.placement import recipe_stages

    types = node_types(cluster)
    measured, seeded = lake_runs(lake, recipe.recipe), seed_runs(recipe.recipe, seeds)
    by_run: dict[str, list[Any]] = {}
    for where, _, stage in recipe_stages(recipe):
        by_run.setdefault(where.split(".")[1], []).append(stage)
    out: list[Planned] = []
    last: dict[str, float | None] = {}
    for spec in recipe.runs:
        if spec.name not in by_run:
            continue
        # the recipe's source reads the rows planned; a run reads its first parent's kept rows; a release or an
        # evaluation reads what an earlier run released, which this plan does not follow
        current: float | None = (float(rows) if spec.source is not None else
                                 last.get(spec.parents[0]) if spec.parents else None)
        for stage in by_run[spec.name]:
            p = plan_stage(spec.name, stage, current, measured.get(spec.name, {}), seeded.get(spec.name, {}),
                           types, prices or {}, efficiency)
            out.append(p)
            current = p.rows_kept
        last[spec.name] = current
    return out
