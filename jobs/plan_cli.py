"""The `piqaforge plan` command: its arguments and the printed table (the arithmetic is jobs/plan.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MEASURE = ("measure it: `piqaforge run {recipe} --set ...` on a sample on a machine like the workers (the manifest "
           "records every stage's rate; plan reads the lake's last finished run), or `benchmarks/bench_crawl_cost.py "
           "--write-rates benchmarks/rates/{recipe}.json`; a GPU rate needs a run with the stage on a GPU")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="what a recipe run costs before it is submitted: rows, CPU/GPU-hours, wall time "
                       "and price per stage, each from a measured rate (docs/howto/plan.md)")
    p.add_argument("job", metavar="RECIPE", help="a recipe (`piqaforge recipes`) or a recipe file")
    p.add_argument("--rows", type=int, required=True, help="input rows of the recipe's first run (the crawl)")
    p.add_argument("--config", help="the cluster config that places its stages (e.g. jobs/configs/ko-piqa-cluster.yaml)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a recipe override, as for `run`")
    p.add_argument("--lake", default="lake", help="the lake whose finished runs give the rates (default: lake)")
    p.add_argument("--cluster", default=None, help="the cluster's node types (default: cluster.yaml of the repo)")
    p.add_argument("--price", action="append", default=[], metavar="KEY=USD",
                   help="cpu_hour=USD per CPU-hour, gpu_hour=USD per GPU-hour, or NODE_TYPE=USD per node-hour")
    p.add_argument("--efficiency", type=float, default=0.7, help="share of ideal scaling assumed for wall time "
                   "(default 0.7: an assumption, not a measurement)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def _num(value: float | None, fmt: str) -> str:
    return "unmeasured" if value is None else format(value, fmt)


def render(plans: list[Any], recipe: str, rows: int, efficiency: float, priced: bool) -> str:
    sources: dict[str, int] = {}

    def ref(m: Any) -> str:
        if m is None:
            return "-"
        key = f"{m.source}: {m.machine}"
        return f"[{sources.setdefault(key, len(sources) + 1)}]"

    lines = [f"plan for {recipe}, {rows:,} input rows (rows in x measured keep shares; hours = rows / measured rate)",
             f"{'run':<8} {'stage':<22} {'node type':<16} {'rows in':>12} {'kept':>12} {'rate (rows/s)':>17} "
             f"{'CPU-h':>10} {'GPU-h':>10} {'wall h':>10} {'USD':>10}  share rate"]
    for p in plans:
        rate = "unmeasured" if p.rate is None else f"{p.rate:,.1f}/{p.unit}-s"
        usd = "-" if not priced else _num(p.usd, ",.2f")
        lines.append(f"{p.run:<8} {p.stage:<22} {(p.node or '-') + ('*' if 'config:' in p.note else ''):<16} "
                     f"{_num(p.rows_in, ',.0f'):>12} {_num(p.rows_kept, ',.0f'):>12} {rate:>17} "
                     f"{_num(p.cpu_h, ',.3f'):>10} {_num(p.gpu_h, ',.3f'):>10} {_num(p.wall_h, ',.3f'):>10} "
                     f"{usd:>10}  {ref(p.share_from):>5} {ref(p.rate_from):>4}")
    done = [p for p in plans if p.wall_h is not None]
    missing = [p.stage for p in plans if p.wall_h is None]
    total = {k: sum(getattr(p, k) or 0.0 for p in done) for k in ("cpu_h", "gpu_h", "wall_h", "usd")}
    usd = f"{total['usd']:,.2f}" if priced else "-"
    lines.append(f"{'total':<8} {'':<22} {'':<16} {'':>12} {'':>12} {'':>17} {total['cpu_h']:>10,.3f} "
                 f"{total['gpu_h']:>10,.3f} {total['wall_h']:>10,.3f} {usd:>10}")
    if missing:
        lines.append(f"the totals leave out {len(missing)} unmeasured stage(s): {', '.join(missing)}")
    lines.append("sources (share: the keep share; rate: rows per CPU- or GPU-second):")
    lines += [f"  [{n}] {key}" for key, n in sources.items()]
    for p in plans:
        if p.note:
            lines.append(f"  {p.run}.{p.stage}: {p.note}")
    if any(p.note.startswith("unmeasured") for p in plans):
        lines.append("  " + MEASURE.format(recipe=recipe))
    lines.append(f"wall h: hours over the CPUs (GPUs) the stage can keep busy on its node type (cluster workers, or "
                 f"its actors when it fixes concurrency) at {efficiency:.0%} of ideal scaling (assumed); "
                 "* planned on another node type than the config's (see its note)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from jobs.config import parse_set
    from jobs.plan import ROOT, plan
    from transforms.flow.recipe import load_recipe

    overrides = dict(parse_set(item) for item in args.set or [])
    recipe = load_recipe(args.job, overrides, config_file=args.config)
    prices = {k: float(v) for k, _, v in (item.partition("=") for item in args.price)}
    cluster = Path(args.cluster) if args.cluster else ROOT / "cluster.yaml"
    plans = plan(recipe, args.rows, Path(args.lake), cluster, prices, args.efficiency)
    if args.json:
        print(json.dumps([{k: (v.__dict__ if hasattr(v, "__dict__") else v) for k, v in p.__dict__.items()}
                          for p in plans], indent=1, default=str))
    else:
        print(render(plans, recipe.recipe, args.rows, args.efficiency, bool(prices)))
    return 0
