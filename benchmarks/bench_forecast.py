"""`piqaforge plan`'s forecast against a real run ten to a hundred times larger, stage by stage, and what the crawl
costs per million rows by default (crawl-filter as it ships: front half, then the judge with its static first tier).

    .venv/bin/python benchmarks/bench_forecast.py                        # 10k + 50k rows planned, 1M rows measured
    .venv/bin/python benchmarks/bench_forecast.py --rows 200000 --small 5000,20000 --name forecast_check

1. Builds the crawls with benchmarks/common.build_crawl (real Korean question pieces, 10% near and 3% exact
   copies), each size on its own seed, cached as JSONL under lake/bench/.
2. Warms the caches a team's second run finds warm (the judge's seed embeddings, the static table's tokens of
   the labels) with a run of `--warm` rows in a throwaway lake, and copies that lake's cache folder into the
   measured lake: the small runs then cost what any later run of the recipe costs.
3. Runs crawl-filter (Korean: the bundled ko-piqa seed labels, `physical`) on each `--small` crawl with
   `piqaforge run` in its own process, then `piqaforge plan --rows ROWS --json` from that lake alone (no seed):
   per stage a CPU rate fitted with its fixed cost over the small runs.
4. Runs the `--rows` crawl the same way and reads each stage's CPU-seconds from its manifest (the driver and its
   local Ray workers: `cpu_scope`).
5. Writes benchmarks/results/<name>.json: per stage the forecast against the measured CPU-seconds, their ratio,
   each stage's share of the total, and the CPU-hours per million rows of the measured run.

Run it on a quiet machine: nothing else may share the cores while it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PIQAFORGE = [str(Path(sys.executable).parent / "piqaforge")]
RECIPE = "crawl-filter"
KOREAN = ["language.code=ko", "language.name=Korean", "data.labels=lake/samples/ko_seed_labels.jsonl",
          "label=physical"]


def crawl_file(rows: int, seed: int, folder: Path) -> Path:
    path = folder / f"forecast-crawl-{rows}-s{seed}.jsonl"
    if not path.exists():
        code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[3]); "
                "from benchmarks.bench_scale import build_crawl_file; "
                "build_crawl_file(int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[4]))")
        subprocess.run([sys.executable, "-c", code, str(rows), str(path), str(ROOT), str(seed)], check=True)
    return path


def sets(extra: list[str]) -> list[str]:
    return [a for kv in KOREAN + extra for a in ("--set", kv)]


def run(crawl: Path, lake: Path, run_id: str, extra: list[str]) -> tuple[dict[str, Any], float]:
    """One `piqaforge run` in its own process; (its crawl run's manifest, wall seconds)."""
    start = time.perf_counter()
    subprocess.run([*PIQAFORGE, "run", RECIPE, "--lake", str(lake), "--run-id", run_id, "--input", str(crawl),
                    *sets(extra)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    manifest = json.loads((lake / "runs" / f"{run_id}-crawl" / "manifest.json").read_text(encoding="utf-8"))
    return manifest, wall


def forecast(rows: int, lake: Path, extra: list[str]) -> list[dict[str, Any]]:
    out = subprocess.run([*PIQAFORGE, "plan", RECIPE, "--rows", str(rows), "--lake", str(lake), "--json",
                          *sets(extra)], check=True, cwd=ROOT, capture_output=True, text=True)
    return json.loads(out.stdout)


def forecast_figures(table: list[dict[str, Any]], total_measured: float, rows: int, small: list[int],
                     wall: float, audit: dict[str, Any] | None = None) -> dict[str, Any]:
    """The quotable figures of one forecast check: per stage its forecast, its measured CPU-seconds, their
    ratio and its share; the worst ratio among the stages costing more than 5%; the CPU-hours per million rows;
    with the measured run's first-tier audit, what the tier spared and its recall against the judge alone."""
    from transforms.core.results import figure

    planned_from = ", ".join(f"{n:,}" for n in small)
    costly = [r for r in table if (r["share"] or 0) > 0.05]
    worst = max((abs(r["ratio"] - 1) for r in costly if r["ratio"]), default=None)
    out = {
        "cpu_hours_per_million": figure(round(total_measured / 3600 / (rows / 1e6), 3),
                                        "CPU-hours per million crawl rows",
                                        f"crawl-filter as it ships (front half, static tier, judge) on {rows:,} "
                                        f"generated Korean crawl rows, measured"),
        "forecast_worst_error": figure(round(worst, 3) if worst is not None else "none", "share",
                                       f"largest |forecast / measured - 1| over the stages costing more than 5% "
                                       f"(planned from runs of {planned_from} rows)"),
        "costly_stages": figure(len(costly), "stages", "stages costing more than 5% of the measured run"),
        "measured_wall_s": figure(round(wall, 1), "s", f"wall time of the {rows:,}-row run"),
        "measured_cpu_s": figure(round(total_measured, 1), "CPU-s", f"CPU-seconds of the {rows:,}-row run"),
    }
    if audit and audit.get("recall_vs_judge") is not None:
        into = next((r["rows_in"] for r in table if r["stage"] == "supervised_prefilter"), None)
        if into:
            out["tier_spared_share"] = figure(round(audit["rows_spared"] / into, 3), "share",
                                              f"share of the judge's {into:,} rows the static tier kept from the "
                                              f"embedder")
        lo, hi = audit["recall_vs_judge_interval"]
        out["tier_recall_vs_judge"] = figure(round(audit["recall_vs_judge"], 3), "recall",
                                             f"the tier's recall against the judge alone, from {audit['audited']:,} "
                                             f"spared rows embedded to check ({audit['judge_would_keep']} kept)")
        out["tier_recall_vs_judge_low"] = figure(round(lo, 3), "recall", "its 95% interval's lower bound")
        out["tier_recall_vs_judge_high"] = figure(round(hi, 3), "recall", "its 95% interval's upper bound")
    for r in table:
        name = r["stage"]
        if r["forecast_cpu_s"] is not None:
            out[f"{name}_forecast_cpu_s"] = figure(r["forecast_cpu_s"], "CPU-s",
                                                   f"{name}: the plan's CPU-seconds for {rows:,} rows")
        if r["measured_cpu_s"] is not None:
            out[f"{name}_measured_cpu_s"] = figure(r["measured_cpu_s"], "CPU-s",
                                                   f"{name}: CPU-seconds measured on {rows:,} rows")
        if r["ratio"] is not None:
            out[f"{name}_ratio"] = figure(r["ratio"], "forecast / measured", f"{name}: forecast over measured")
        if r["share"] is not None:
            out[f"{name}_share"] = figure(r["share"], "share", f"{name}: its share of the run's CPU-seconds")
    return out


def refigure(name: str) -> Path:
    """Rewrite a results file's figures from its own `data` (the measurement is not repeated: its command,
    commit, machine and date stay those of the run that measured it)."""
    from transforms.core.results import results_dir

    path = results_dir() / f"{name}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    d = doc["data"]
    doc["figures"] = forecast_figures(d["stages"], d["measured_cpu_s"], d["rows"], d["small"],
                                      d["runs"]["measured"]["wall_s"], d.get("first_tier_audit"))
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def write_seed(lake: Path, out: Path) -> Path:
    """crawl-filter's seed of `piqaforge plan` (jobs/plan.py `seed_runs`) from the measured run this benchmark
    left in `lake`: each stage's keep share and its rows per CPU-second on that run's rows (start-up included,
    which a million rows make small), the language and input it was measured on. Nothing typed."""
    from benchmarks.common import seed_shares
    from jobs.plan import identity
    from transforms.core.manifest import RunManifest
    from transforms.core.results import figure, write_result

    run = RunManifest.load(lake / "runs" / "measured-crawl" / "manifest.json")
    stages = seed_shares(run)
    for st in run.stages:
        processed = stages[st.name]["rows_in"]
        if st.cpu_seconds and processed:
            stages[st.name].update(rows_per_cpu_second=round(processed / st.cpu_seconds, 1),
                                   identity=identity(st.config or {}), rate_rows=processed, startup="included")
    inputs = [str(i["path"]) for i in run.inputs if i.get("path")]
    figures = {f"{name}_rows_per_cpu_second": figure(e["rows_per_cpu_second"], "rows/CPU-s",
                                                    f"{name}: rows per CPU-second of run {run.run_id}, start-up "
                                                    f"included") for name, e in stages.items()
               if "rows_per_cpu_second" in e}
    return write_result(out.stem, figures, benchmark="benchmarks/bench_forecast.py", directory=out.parent,
                        data={"recipe": RECIPE, "language": "ko", "inputs": inputs,
                              "rates_from": f"run {run.run_id} of {run.stages[0].rows_created:,} generated Korean "
                                            f"crawl rows ({run.started_at})",
                              "shares_from": f"run {run.run_id}: its manifest", "runs": {"crawl": stages}})


def main(argv: list[str] | None = None) -> int:
    from transforms.core.results import write_result

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="the measured run's crawl rows")
    ap.add_argument("--small", default="10000,50000", help="the planned-from runs' crawl rows (at most 50,000)")
    ap.add_argument("--warm", type=int, default=2000, help="rows of the cache-warming run (not planned from)")
    ap.add_argument("--lake", type=Path, default=ROOT / "lake" / "bench" / "forecast")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--name", default="forecast_1m", help="results file name (benchmarks/results/NAME.json)")
    ap.add_argument("--write-seed", type=Path, default=ROOT / "benchmarks" / "rates" / f"{RECIPE}.json",
                    metavar="JSON", help="where the measured run's rates and shares go as plan's seed "
                    "(default benchmarks/rates/crawl-filter.json)")
    ap.add_argument("--write-seed-only", action="store_true",
                    help="write the seed from the measured run already in --lake, measuring nothing")
    ap.add_argument("--refigure", action="store_true",
                    help="rewrite NAME.json's figures from its data, measuring nothing")
    args = ap.parse_args(argv)
    if args.refigure:
        print(f"rewritten {refigure(args.name)}")
        return 0
    if args.write_seed_only:
        print(f"seed written to {write_seed(args.lake, args.write_seed)}")
        return 0
    small = [int(x) for x in args.small.split(",")]
    if max(small) > 50_000:
        raise SystemExit("--small: plan from runs of at most 50,000 rows")
    load_start = list(os.getloadavg())
    data_dir = ROOT / "lake" / "bench"
    shutil.rmtree(args.lake, ignore_errors=True)
    warm_lake = args.lake.with_name(args.lake.name + "-warm")
    shutil.rmtree(warm_lake, ignore_errors=True)
    run(crawl_file(args.warm, 7, data_dir), warm_lake, "warm", args.sets)
    shutil.copytree(warm_lake / "cache", args.lake / "cache")
    shutil.rmtree(warm_lake, ignore_errors=True)

    runs: dict[str, Any] = {}
    for i, n in enumerate(small):
        manifest, wall = run(crawl_file(n, 1 + i, data_dir), args.lake, f"small{n}", args.sets)
        runs[f"small{n}"] = {"rows": n, "wall_s": round(wall, 1)}
        print(f"run of {n:,} rows: {wall:.0f} s", file=sys.stderr)
    planned = forecast(args.rows, args.lake, args.sets)
    manifest, wall = run(crawl_file(args.rows, 0, data_dir), args.lake, "measured", args.sets)
    runs["measured"] = {"rows": args.rows, "wall_s": round(wall, 1)}
    print(f"run of {args.rows:,} rows: {wall:.0f} s", file=sys.stderr)

    measured = {s["name"]: s for s in manifest["stages"]}
    table, total_measured = [], sum(s.get("cpu_seconds") or 0 for s in measured.values())
    for p in planned:
        if p["run"] != "crawl" or p["stage"] not in measured:
            continue
        s = measured[p["stage"]]
        got = s.get("cpu_seconds")
        want = p["cpu_h"] * 3600 if p.get("cpu_h") is not None else None
        table.append({"stage": p["stage"], "forecast_cpu_s": round(want, 1) if want is not None else None,
                      "measured_cpu_s": round(got, 1) if got else None, "cpu_scope": s.get("cpu_scope"),
                      "ratio": round(want / got, 3) if want and got else None,
                      "share": round(got / total_measured, 3) if got and total_measured else None,
                      "rows_in": s.get("rows_in") or s.get("rows_created"), "rows_kept": s.get("rows_kept"),
                      "forecast_rows_in": p.get("rows_in"), "rate_from": (p.get("rate_from") or {}).get("source"),
                      "note": p.get("note")})
    # the static tier's audit of the measured run (first_tier.audit_share of the rows it spared, judged alone)
    report = args.lake / "runs" / "measured-crawl" / "prefilter" / "report.json"
    audit = json.loads(report.read_text(encoding="utf-8")).get("first_tier_audit") if report.exists() else None
    figures = forecast_figures(table, total_measured, args.rows, small, wall, audit)
    path = write_result(args.name, figures, benchmark="benchmarks/bench_forecast.py", load_start=load_start,
                        data={"recipe": RECIPE, "sets": KOREAN + args.sets, "rows": args.rows, "small": small,
                              "runs": runs, "stages": table, "measured_cpu_s": round(total_measured, 1),
                              "first_tier_audit": audit})
    if args.rows >= 1_000_000:  # a seed rests on a run large enough that its start-up is small
        print(f"seed written to {write_seed(args.lake, args.write_seed)}", file=sys.stderr)
    print(f"\n{RECIPE} on {args.rows:,} rows, planned from {', '.join(f'{n:,}' for n in small)}-row runs")
    print(f"{'stage':22} {'forecast CPU-s':>14} {'measured':>10} {'ratio':>6} {'share':>6}")
    for r in table:
        fc = f"{r['forecast_cpu_s']:,.0f}" if r["forecast_cpu_s"] is not None else "-"
        me = f"{r['measured_cpu_s']:,.0f}" if r["measured_cpu_s"] is not None else "-"
        print(f"{r['stage']:22} {fc:>14} {me:>10} {r['ratio'] or '-':>6} {r['share'] or '-':>6}")
    print(f"CPU-hours per million rows: {figures['cpu_hours_per_million']['value']}; written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
