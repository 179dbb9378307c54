"""The `piqaforge plan` command: its arguments and the printed table (the arithmetic is jobs/plan.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MEASURE = ("measure it: `piqaforge run {recipe} --set ...` on a sample on a machine like the workers (the manifest "
           "records every stage's rate; plan reads the lake's last finished run), or `benchmarks/bench_crawl_cost.py "
           "--write-seed benchmarks/rates/{recipe}.json --shares-from MANIFEST`; a GPU rate needs a run with the "
           "stage on a GPU")
# the crawl sizes `--plot` draws, as multiples of --rows
PLOT_SCALES = (0.25, 0.5, 1, 2, 4, 8)


def add_parser(sub: Any) -> None:
    from jobs.plan import MIN_RATE_ROWS  # the standard library only

    p = sub.add_parser("plan", help="what a recipe run costs before it is submitted: rows, CPU/GPU-hours, wall time "
                       "and price per stage, each from a measured rate (docs/howto/plan.md)")
    p.add_argument("job", metavar="RECIPE", help="a recipe (`piqaforge recipes`) or a recipe file")
    p.add_argument("--rows", type=int, required=True, help="input rows of the recipe's first run (the crawl)")
    p.add_argument("--config", help="the cluster config that places its stages (e.g. jobs/configs/ko-piqa-cluster.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a recipe override, as for `run`")
    p.add_argument("--lake", default="lake", help="the lake whose finished runs give the rates (default: lake)")
    p.add_argument("--cluster", default=None, help="the cluster's node types (default: cluster.yaml of the repo)")
    p.add_argument("--price", action="append", default=[], metavar="KEY=USD",
                   help="NODE_TYPE=USD per node-hour, or cpu_hour=USD / gpu_hour=USD (x the node's CPUs / GPUs) for "
                   "node types without a price; any other key is refused")
    p.add_argument("--efficiency", type=float, default=0.7, help="share of ideal scaling assumed for wall time "
                   "(default 0.7: an assumption, not a measurement)")
    p.add_argument("--min-rate-rows", type=int, default=MIN_RATE_ROWS, metavar="N",
                   help=f"refuse a run's rate resting on fewer rows (its start-up, not its rows; default "
                   f"{MIN_RATE_ROWS:,})")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--plot", metavar="PNG", help="also draw CPU-hours, GPU-hours, wall hours (and USD when priced) "
                   "against input rows, from a quarter of --rows to eight times it, into this PNG file")


def _num(value: float | None, fmt: str) -> str:
    return "unmeasured" if value is None else format(value, fmt)


def _total(plans: list[Any], key: str, fmt: str) -> tuple[str, list[str]]:
    """A column's total and the stages it leaves out: never 0 for what nobody measured."""
    have = [getattr(p, key) for p in plans if getattr(p, key) is not None]
    left = [f"{p.run}.{p.stage}" for p in plans if getattr(p, key) is None]
    if not have:
        return "unmeasured", left
    return format(sum(have), fmt) + ("+" if left else ""), left


def render(plans: list[Any], recipe: str, rows: int, efficiency: float, priced: bool,
           floor: int = 0) -> str:
    from jobs.plan import GPU_PEAK_FLOPS, OUTPUT_TOKENS, PRICING, PROMPT_TOKENS, UTILISATION

    sources: dict[str, int] = {}

    def ref(m: Any) -> str:
        if m is None:
            return "-"
        key = f"{m.source}: {m.machine}"
        return f"[{sources.setdefault(key, len(sources) + 1)}]"

    lines = [f"plan for {recipe}, {rows:,} input rows (rows in x measured keep shares; hours = rows / measured or "
             "modelled rate)",
             f"{'run':<8} {'stage':<22} {'node type':<16} {'rows in':>12} {'kept':>12} {'rate (rows/s)':>19} "
             f"{'on rows':>9} {'CPU-h':>11} {'GPU-h':>11} {'wall h':>11} {'USD':>11}  share rate"]
    for p in plans:
        rate = "unmeasured" if p.rate is None else f"{p.rate:,.1f}/{p.unit}-s" + (" m" if p.modelled else "")
        usd = "-" if not priced else _num(p.usd, ",.2f")
        on = "-" if p.rate_from is None or p.rate_from.rate_rows is None else f"{p.rate_from.rate_rows:,}"
        lines.append(f"{p.run:<8} {p.stage:<22} {(p.node or '-') + ('*' if 'config:' in p.note else ''):<16} "
                     f"{_num(p.rows_in, ',.0f'):>12} {_num(p.rows_kept, ',.0f'):>12} {rate:>19} {on:>9} "
                     f"{_num(p.cpu_h, ',.3f'):>11} {_num(p.gpu_h, ',.3f'):>11} {_num(p.wall_h, ',.3f'):>11} "
                     f"{usd:>11}  {ref(p.share_from):>5} {'m' if p.modelled else ref(p.rate_from):>4}")
    cpu, _ = _total(plans, "cpu_h", ",.3f")
    gpu, _ = _total(plans, "gpu_h", ",.3f")
    wall, left = _total(plans, "wall_h", ",.3f")
    usd, unpriced = _total(plans, "usd", ",.2f") if priced else ("-", [])
    lines.append(f"{'total':<8} {'':<22} {'':<16} {'':>12} {'':>12} {'':>19} {'':>9} {cpu:>11} {gpu:>11} {wall:>11} {usd:>11}")
    if left:
        lines.append(f"the totals leave out {len(left)} stage(s) with no rate or no rows ('+': the cost is higher): "
                     + ", ".join(left))
    if priced and [s for s in unpriced if s not in left]:
        lines.append("the price leaves out stage(s) on a node type without a price: "
                     + ", ".join(s for s in unpriced if s not in left))
    modelled = [p for p in plans if p.modelled]
    if modelled:
        lines.append(f"modelled (m): no GPU rate measured; rows per GPU-second = {UTILISATION:.0%} (assumed) x the "
                     "GPU's peak FLOP/s / (2 x the parameters of every model the stage runs on a row x tokens a row: "
                     f"{PROMPT_TOKENS} read + its max_tokens, else {OUTPUT_TOKENS}; an embedder: its embed_chars + 2); peaks used: "
                     + ", ".join(f"{k} {v:.3g}" for k, v in GPU_PEAK_FLOPS.items()))
    lines.append("sources (share: the keep share; rate: rows per CPU- or GPU-second; on rows: the rows the rate "
                 "rests on):")
    lines += [f"  [{n}] {key}" for key, n in sources.items()]
    for p in plans:
        if p.note:
            lines.append(f"  {p.run}.{p.stage}: {p.note}")
    warned: dict[str, list[str]] = {}
    for p in plans:
        for w in p.warnings:
            warned.setdefault(w, []).append(p.stage)
    for w, names in warned.items():
        lines.append(f"warning: {w} ({', '.join(names)})")
    if any(p.note.startswith("unmeasured") for p in plans):
        lines.append("  " + MEASURE.format(recipe=recipe))
    if floor:
        lines.append(f"rates: a run's rate resting on fewer than {floor:,} rows is refused (its start-up, not its "
                     "rows); a benchmark's warm rate (startup excluded) is taken as it is")
    lines.append(f"wall h: hours over the CPUs (GPUs) the stage can keep busy on its node type (cluster workers, or "
                 f"its actors when it fixes concurrency) at {efficiency:.0%} of ideal scaling (assumed); "
                 "* planned on another node type than the config's (see its note)")
    lines.append(f"USD: {PRICING}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from jobs.config import parse_set
    from jobs.errors import UserError
    from jobs.plan import ROOT, PriceError, plan
    from transforms.flow.recipe import load_recipe

    overrides = dict(parse_set(item) for item in args.set or [])
    recipe = load_recipe(args.job, overrides, config_file=args.config)
    prices: dict[str, float] = {}
    for item in args.price:
        key, sep, value = item.partition("=")
        try:
            prices[key] = float(value)
        except ValueError:
            raise UserError(f"--price expects KEY=USD, got {item!r}") from None
    cluster = Path(args.cluster) if args.cluster else ROOT / "cluster.yaml"
    try:
        plans = plan(recipe, args.rows, Path(args.lake), cluster, prices, args.efficiency, floor=args.min_rate_rows)
    except PriceError as err:
        raise UserError(str(err)) from err
    if args.json:
        print(json.dumps([{k: (v.__dict__ if hasattr(v, "__dict__") else v) for k, v in p.__dict__.items()}
                          for p in plans], indent=1, default=str))
    else:
        print(render(plans, recipe.recipe, args.rows, args.efficiency, bool(prices), args.min_rate_rows))
    if args.plot:
        curve = cost_curve(lambda n: plan(recipe, n, Path(args.lake), cluster, prices, args.efficiency,
                                          floor=args.min_rate_rows), args.rows)
        print(plot_curve(curve, Path(args.plot), recipe.recipe, args.rows))
    return 0


COST_KEYS = (("cpu_h", "CPU-hours"), ("gpu_h", "GPU-hours"), ("wall_h", "wall hours"), ("usd", "USD"))


def cost_curve(plan_for: Any, rows: int) -> list[dict[str, Any]]:
    """The plan's totals at each of PLOT_SCALES x `rows` (a total is None where no stage is measured)."""
    out = []
    for scale in PLOT_SCALES:
        n = max(int(rows * scale), 1)
        plans = plan_for(n)
        point: dict[str, Any] = {"rows": n}
        for key, _ in COST_KEYS:
            have = [getattr(p, key) for p in plans if getattr(p, key) is not None]
            point[key] = sum(have) if have else None
        point["left_out"] = sorted({f"{p.run}.{p.stage}" for p in plans if p.cpu_h is None and p.gpu_h is None})
        out.append(point)
    return out


def plot_curve(curve: list[dict[str, Any]], path: Path, recipe: str, rows: int) -> str:
    """Draw `curve` into `path`; the line printed says what doubling --rows costs, per total."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = [(k, label) for k, label in COST_KEYS if any(p[k] for p in curve)]
    for key, label in keys:
        pts = [(p["rows"], p[key]) for p in curve if p[key]]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axvline(rows, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("input rows")
    ax.set_ylabel("plan total")
    left = sorted({s for p in curve for s in p["left_out"]})
    ax.set_title(f"piqaforge plan {recipe}: cost against rows" + (f" ({len(left)} stage(s) unmeasured)" if left else ""),
                 fontsize=10)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    here = next(p for p in curve if p["rows"] == max(int(rows), 1))
    double = next(p for p in curve if p["rows"] == max(int(rows * 2), 1))
    factors = [f"{label} x{double[k] / here[k]:.2f}" for k, label in keys if here[k] and double[k]]
    return f"plot: {path} (doubling {rows:,} rows: " + ", ".join(factors) + ")"
