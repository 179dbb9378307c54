"""What the Ko-PIQA crawl run costs before a team submits it: CPU-hours, GPU-hours, wall time and money on
cluster.yaml's node types, for a crawl of any size (issue 34 §5).

    .venv/bin/python benchmarks/bench_crawl_cost.py                                   # 20k rows measured, 3.01M forecast
    .venv/bin/python benchmarks/bench_crawl_cost.py --rows 50000 --crawl 10000000 \\
        --price cpu_worker=1.61 --price gpu_h100x1_vllm=12.3                            # prices: USD per node-hour

1. Measures every stage of the recipe's `crawl` run in this process, in order, on `--rows` generated crawl
   rows (benchmarks/common.py: real Korean question pieces, near and exact copies): CPU seconds
   (`time.process_time`), rows per CPU-second, the share of rows it keeps, and the process's peak RSS after it.
   The prefilter embeds (e5), so it is measured on `--embed-rows` of the rows the front half kept, after
   loading and warming its embedder on as many other rows (a fixed cost, as in its actor); the LLM
   ensemble's members are not run here: its cost comes from the last recorded GPU check
   (benchmarks/gpu_figures.json; docs/gpu.md), rows per second per GPU for the model shape.
2. Scales to `--crawl` rows with the measured keep shares (the share the real prefilter passes on the bundled
   crawl sample replaces the generated rows' share, which are not real questions: `--prefilter-pass`).
3. Places each stage where jobs/configs/ko-piqa-cluster.yaml puts it (the stage's resources: env vllm → the 1×H100
   vLLM type, env cuml → the cuML type, else CPU workers) and divides by the type's workers × CPUs (or GPUs) from
   cluster.yaml, at `--efficiency` of ideal scaling (default 0.7: shuffles, stragglers, object-store traffic).

Stages run one after another, so the wall time is their sum. Printed figures are forecasts from one machine's
measurement; the rows-per-CPU-second column is the same figure the run report shows for a real run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
GPU_FIGURES = ROOT / "benchmarks" / "gpu_figures.json"


def _rss_mib() -> float:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def node_types(path: Path = ROOT / "cluster.yaml") -> dict[str, dict[str, Any]]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = {}
    for name, spec in data["available_node_types"].items():
        res = spec.get("resources", {})
        out[name] = {"workers": int(spec.get("max_workers", 0)), "cpus": float(res.get("CPU", 0)),
                     "gpus": float(res.get("GPU", 0)), "env": next((k[4:] for k in res if k.startswith("env_")), None)}
    return out


def place(resources: Any, types: dict[str, dict[str, Any]]) -> str:
    env = getattr(resources, "env", None) or "cpu"
    gpus = float(getattr(resources, "gpus", 0) or 0)
    fits = [n for n, t in types.items() if t["env"] == env and t["workers"] and t["gpus"] >= gpus]
    if not fits:
        fits = [n for n, t in types.items() if t["env"] == "cpu" and t["workers"]]
    return min(fits, key=lambda n: (types[n]["gpus"], types[n]["cpus"]))


def measure(rows: int, embed_rows: int, shared: Path,
            extra: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], Any]:
    """Each crawl stage of ko-piqa in order on generated rows: CPU-s, rows in, kept share, RSS after."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from benchmarks.common import build_crawl
    from transforms.core import columns as C
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    crawl = build_crawl(rows, shared=shared)
    folder = Path(tempfile.mkdtemp(prefix="piqaforge-cost-"))
    path = folder / "crawl.jsonl"
    ids, texts = crawl.table.column("id").to_pylist(), crawl.texts()
    path.write_text("".join(json.dumps({"id": i, "text": t, "source": "bench", "url": f"bench/{i}"}, ensure_ascii=False) + "\n"
                            for i, t in zip(ids, texts, strict=True)), encoding="utf-8")
    overrides = {"input.paths": [str(path)], "prefilter": "supervised"} | (extra or {})
    recipe = load_recipe("ko-piqa", overrides)  # what runs here, on the CPU
    placed = load_recipe("ko-piqa", overrides, config_file=str(ROOT / "jobs" / "configs" / "ko-piqa-cluster.yaml"))
    source, stages = run_stages(recipe, "crawl", lake=folder / "lake", run_id="cost")
    _, on_cluster = run_stages(placed, "crawl", lake=folder / "lake", run_id="cost")
    where = {s.name: s.resources for s in on_cluster}
    out: list[dict[str, Any]] = []
    t0 = time.process_time()
    from transforms.io.crawl import read_local

    table = read_local(source.spec)
    out.append({"stage": source.name, "rows_in": table.num_rows, "cpu_s": time.process_time() - t0, "kept": 1.0,
                "rss_mib": _rss_mib(), "resources": source.resources})
    for stage in stages:
        if stage.name in ("ensemble", "cultural_tag", "sample"):
            out.append({"stage": stage.name, "rows_in": table.num_rows, "cpu_s": None, "kept": None,
                        "rss_mib": None, "resources": where.get(stage.name, stage.resources), "llm": True})
            continue
        todo = table
        if stage.name.endswith("prefilter") and table.num_rows > embed_rows:
            todo = table.slice(0, embed_rows)
        if hasattr(stage, "setup"):
            stage.setup()
        fixed = 0.0
        if hasattr(stage, "fit") and hasattr(stage, "_fitted"):  # the judge is fitted once per run: not per row
            t0 = time.process_time()
            stage._fitted = stage.fit()
            fixed = time.process_time() - t0
        if stage.name == "supervised_prefilter" and table.num_rows > embed_rows:
            # as in its scoring actor: the embedder is loaded once, and warmed (oneDNN builds its kernels per
            # shape on first use) on rows other than the ones timed; both are fixed costs, not per row
            from transforms.judge.linear import embedder_for

            t0 = time.process_time()
            embedder = embedder_for(stage.judge, None)
            stage.score(table.slice(embed_rows, embed_rows), stage._fitted, embedder)
            fixed += time.process_time() - t0
            t0 = time.process_time()
            scored = stage.score(todo, stage._fitted, embedder)
            done = stage.mark(scored, stage._fitted.threshold)
            cpu = time.process_time() - t0
        else:
            t0 = time.process_time()
            done = stage.process_table(todo) if hasattr(stage, "process_table") else stage(todo)
            cpu = time.process_time() - t0
        reasons = done.column(C.DROP_REASON) if C.DROP_REASON in done.column_names else None
        kept_mask = pc.is_null(reasons) if reasons is not None else pa.array([True] * done.num_rows)
        out.append({"stage": stage.name, "rows_in": todo.num_rows, "cpu_s": cpu, "fixed_cpu_s": fixed,
                    "config": stage.describe(),
                    "kept": pc.sum(kept_mask).as_py() / max(done.num_rows, 1), "rss_mib": _rss_mib(),
                    "resources": where.get(stage.name, stage.resources)})
        table = done.filter(kept_mask).drop_columns([C.DROP_REASON]) if reasons is not None else done
    return out, recipe


def forecast(measured: list[dict[str, Any]], crawl: int, prefilter_pass: float, gpu: dict[str, Any],
             types: dict[str, dict[str, Any]], efficiency: float, prices: dict[str, float]) -> list[dict[str, Any]]:
    rows = float(crawl)
    out = []
    for m in measured:
        node = place(m["resources"], types)
        t = types[node]
        row: dict[str, Any] = {"stage": m["stage"], "node": node, "rows_in": rows}
        if m.get("llm"):
            if m["stage"] == "ensemble":
                rate = gpu["ensemble_rows_per_gpu_s"]
                row.update(gpu_h=rows / rate / 3600, cpu_h=0.0, rate=f"{rate:,.0f} rows/GPU-s ({gpu['ensemble_model']})")
                wall = row["gpu_h"] / max(t["gpus"] * t["workers"] * efficiency, 1e-9)
                keep = gpu["ensemble_pass"]
            else:  # cultural tag (lexicon first) and the seeded sample: small next to the ensemble
                row.update(gpu_h=0.0, cpu_h=0.0, rate="(after the ensemble: negligible)")
                wall, keep = 0.0, 1.0
        else:
            if t["gpus"] and m["stage"].endswith("prefilter") and not gpu.get("e5_embed_rows_per_gpu_s"):
                node = place(None, types)  # no GPU figure for the embedder yet: priced on CPU workers
                t = types[node]
                row["node"] = f"{node}*"
            per_cpu = m["rows_in"] / max(m["cpu_s"], 1e-9)
            row.update(cpu_h=(rows / per_cpu + m.get("fixed_cpu_s", 0.0)) / 3600, gpu_h=0.0,
                       rate=f"{per_cpu:,.0f} rows/CPU-s")
            wall = row["cpu_h"] / max(t["cpus"] * t["workers"] * efficiency, 1e-9)
            keep = prefilter_pass if m["stage"].endswith("prefilter") else m["kept"]
        price = prices.get(node)
        row.update(wall_h=wall, kept=keep,
                   usd=(wall * t["workers"] * price) if price is not None else None, rss_mib=m["rss_mib"])
        out.append(row)
        rows *= keep
    return out


def write_seed(path: Path, measured: list[dict[str, Any]], shares_from: Path, *, rows: int, embed_rows: int,
               load_start: list[float]) -> None:
    """`piqaforge plan`'s seed (jobs/plan.py `seed_runs`) as a results file: each stage's rows per CPU-second
    measured here, on `rows` generated rows, and the keep shares of the finished run whose manifest is
    `shares_from` (a `piqaforge run ko-piqa` of the bundled sample): nothing typed."""
    from benchmarks.common import seed_shares
    from jobs.plan import identity
    from transforms.core.manifest import RunManifest
    from transforms.core.results import figure, write_result

    run = RunManifest.load(shares_from)
    rates = {m["stage"]: m for m in measured if m.get("cpu_s")}
    stages = seed_shares(run)
    for name, entry in stages.items():
        m = rates.get(name)
        if m is not None:
            entry.update(rows_per_cpu_second=round(m["rows_in"] / m["cpu_s"], 1), identity=identity(m.get("config") or {}),
                         rate_rows=m["rows_in"], startup="excluded")
    inputs = [str(i["path"]) for i in run.inputs if i.get("path")]
    figures = {f"{name}_rows_per_cpu_second": figure(e["rows_per_cpu_second"], "rows/CPU-s",
                                                    f"{name}: rows per CPU-second, one process, start-up excluded")
               for name, e in stages.items() if "rows_per_cpu_second" in e}
    figures.update({f"{name}_kept": figure(e["rows_kept"], "rows", f"{name}: rows kept of {e['rows_in']} in run "
                                           f"{run.run_id}") for name, e in stages.items() if e.get("rows_in")})
    write_result(path.stem, figures, benchmark="benchmarks/bench_crawl_cost.py", load_start=load_start,
                 directory=path.parent,
                 data={"recipe": "ko-piqa", "language": "ko", "inputs": inputs,
                       "rates_from": f"{rows} generated crawl rows (the prefilter: {embed_rows}), this process",
                       "shares_from": f"run {run.run_id} ({run.status}, {run.started_at}; "
                                      f"input {', '.join(inputs)}): its manifest",
                       "runs": {"crawl": stages}})
    print(f"seed written to {path} (shares: run {run.run_id})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20000, help="generated crawl rows measured here")
    parser.add_argument("--embed-rows", type=int, default=200, help="rows the prefilter embeds here (e5 is slow)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override, as `piqaforge run --set` takes it (VALUE read as YAML), e.g. "
                        "runs.crawl.stages.supervised_prefilter.judge.embedder.dtype=float32")
    parser.add_argument("--crawl", type=int, default=3_010_000, help="crawl size to forecast")
    parser.add_argument("--prefilter-pass", type=float, default=None,
                        help="share of rows the prefilter passes (default: the recorded real-sample figure)")
    parser.add_argument("--efficiency", type=float, default=0.7)
    parser.add_argument("--price", action="append", default=[], metavar="NODE_TYPE=USD_PER_HOUR")
    parser.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--write-seed", type=Path, metavar="JSON", help="write the seed of `piqaforge plan` "
                        "(benchmarks/rates/ko-piqa.json) as a results file: the rates measured here and the keep "
                        "shares of the finished run --shares-from names")
    parser.add_argument("--shares-from", type=Path, metavar="MANIFEST", help="with --write-seed: the manifest.json of a "
                        "finished `piqaforge run ko-piqa` crawl run on the bundled sample (LAKE/runs/ID-crawl/)")
    args = parser.parse_args()
    gpu = json.loads(GPU_FIGURES.read_text(encoding="utf-8"))
    prices = {k: float(v) for k, v in (p.split("=", 1) for p in args.price)}
    import yaml

    extra = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    if args.write_seed and not args.shares_from:
        parser.error("--write-seed needs --shares-from MANIFEST (a finished crawl run's manifest.json)")
    load_start = list(os.getloadavg())
    measured, _ = measure(args.rows, args.embed_rows, Path(args.shared), extra)
    if args.write_seed:
        write_seed(args.write_seed, measured, args.shares_from, rows=args.rows, embed_rows=args.embed_rows,
                   load_start=load_start)
    types = node_types()
    rows = forecast(measured, args.crawl, args.prefilter_pass if args.prefilter_pass is not None
                    else gpu["prefilter_pass_real_sample"], gpu, types, args.efficiency, prices)
    print(f"measured on {args.rows:,} generated rows (prefilter: {args.embed_rows} rows), forecast for "
          f"{args.crawl:,} crawl rows; GPU figures: {gpu['source']}")
    print(f"{'stage':<22} {'node type':<18} {'rows in':>12} {'rate here':>26} {'CPU-h':>8} {'GPU-h':>7} "
          f"{'wall h':>7} {'USD':>9} {'RSS MiB':>8}")
    for r in rows:
        usd = f"{r['usd']:,.2f}" if r["usd"] is not None else "-"
        rss = f"{r['rss_mib']:,.0f}" if r["rss_mib"] else "-"
        print(f"{r['stage']:<22} {r['node']:<18} {r['rows_in']:>12,.0f} {r['rate']:>26} {r['cpu_h']:>8.2f} "
              f"{r['gpu_h']:>7.2f} {r['wall_h']:>7.3f} {usd:>9} {rss:>8}")
    total = {k: sum(r[k] for r in rows) for k in ("cpu_h", "gpu_h", "wall_h")}
    usd = f"{sum(r['usd'] for r in rows if r['usd'] is not None):,.2f}" if prices else "-"
    print(f"{'total':<22} {'':<18} {'':>12} {'':>26} {total['cpu_h']:>8.2f} {total['gpu_h']:>7.2f} "
          f"{total['wall_h']:>7.3f} {usd:>9}")
    print("*: the cluster config places it on a GPU worker, but no GPU figure is recorded for its embedder yet "
          "(benchmarks/gpu_figures.json e5_embed_rows_per_gpu_s): priced with this machine's CPU rate on CPU workers")
    print("wall h: the stage's hours over its node type's workers x CPUs (or GPUs) in cluster.yaml at "
          f"{args.efficiency:.0%} of ideal scaling; USD: wall h x workers x --price (per node-hour)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
