"""The cluster rehearsal: cluster.yaml's Ray cluster on this one machine, every recipe submitted to it.

The steps are in harness/rehearsal/__init__.py.

    bash scripts/cluster_rehearsal.sh [--recipes ko-piqa,zh-piqa] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from harness.rehearsal.envs import CUML_SUBSTITUTE, REPO, build_env, build_shared_env, read_cluster
from harness.rehearsal.nodes import (
    Cluster,
    say,
    start_cluster,
    start_double_server,
    start_llama_server,
    start_server,
)
from harness.rehearsal.recipes import Outcome, refusal_check, run_recipe

CONFIG = REPO / "cluster" / "rehearsal.yaml"
RECIPES = ["ko-piqa", "zh-piqa", "ta-piqa", "j-piqa", "ru-piqa", "pindic"]

def write_inputs(inputs: dict[str, Any], lake: Path) -> None:
    """CI's smaller inputs: the first `lines` lines of a bundled file, as <lake>/inputs/<name> (the shared file
    system every node reads; a recipe's `--set` names it as `<lake>/inputs/<name>`)."""
    for name, spec in inputs.items():
        lines = (REPO / spec["from"]).read_text(encoding="utf-8").splitlines(keepends=True)[:int(spec["lines"])]
        (lake / "inputs").mkdir(parents=True, exist_ok=True)
        (lake / "inputs" / name).write_text("".join(lines), encoding="utf-8")
        say(f"input {name}: the first {len(lines)} lines of {spec['from']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster_rehearsal", description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated (default: all)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    parser.add_argument("--root", default=str(REPO / ".rehearsal"), help="venvs, lake and logs (default .rehearsal)")
    parser.add_argument("--shared-venv", action="store_true",
                        help="one venv for every node type (CI's tier: built once; the full rehearsal builds one "
                             "per node type, as their images differ)")
    parser.add_argument("--ci", action="store_true",
                        help="CI's tier: every raylet from the project's .venv (no venv built), every model role the "
                             "engine double, served roles through its OpenAI-compatible server; every stage of every "
                             "run must get rows and be placed (cluster/rehearsal.yaml, `ci:`)")
    args = parser.parse_args(argv)

    def stop_on_term(signum: int, frame: Any) -> None:  # `timeout`, `kill`: clean up as on any failure
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_on_term)
    conf = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    if args.ci:
        ci = conf.get("ci") or {}
        # the CI models replace the full tier's whole (its vLLM options mean nothing to the double)
        conf = {**conf, "models": dict(ci.get("models") or conf["models"]), "ci_recipes": ci.get("recipes") or {},
                "ci_inputs": ci.get("inputs") or {}, "ci": True}
    names = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [r for r in names if r not in RECIPES]
    if unknown:
        print(f"cluster_rehearsal: unknown recipe(s) {unknown}; recipes: {', '.join(RECIPES)}", file=sys.stderr)
        return 2
    root = Path(args.root)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lake = root / "lake"
    shutil.rmtree(lake, ignore_errors=True)  # a fresh shared file system for a fresh cluster
    write_inputs(conf.get("ci_inputs") or {}, lake)
    t0 = time.time()
    nodes = read_cluster()
    venvs: dict[str, Path] = {}
    python_paths: dict[str, str] = {}
    if args.ci:
        # the project's own venv stands in for every node type's image; the cuML node adds the stand-in package
        venvs = {node.setup_env: REPO / ".venv" for node in nodes}
        python_paths = {"cuml": str(CUML_SUBSTITUTE)}
        say(f"CI tier: every node type runs from {REPO / '.venv'} (no venv built); the cuML node imports the "
            f"scikit-learn stand-in from {CUML_SUBSTITUTE.relative_to(REPO)}")
    elif args.shared_venv:
        shared = build_shared_env(nodes, root / "venvs", log=say)
        venvs = {node.setup_env: shared for node in nodes}
    for node in nodes:
        if node.setup_env not in venvs:
            venvs[node.setup_env] = build_env(node, root / "venvs", log=say)
    say(f"environments ready in {time.time() - t0:.0f} s")
    from transforms.llm.prepare import gguf_path, resolve_model

    backend = str(conf["models"].get("backend") or "")
    double = ":" in backend  # CI's tier: an engine class named "module:Class" (the double), no model to load
    llama = backend == "llamacpp"
    model_path = (conf["models"]["model"] if double else str(gguf_path(conf["models"]["model"])) if llama
                  else resolve_model(conf["models"]["model"]))
    server_kind = "the double's" if double else "llama.cpp's" if llama else "vLLM's"
    say(f"substitution on every vLLM role: the cluster's models -> {conf['models']['model']} ({model_path})"
        f"{' on the ' + backend + ' backend' if backend else ''}; served through {server_kind} OpenAI-compatible "
        f"server: {', '.join(conf['models'].get('served') or []) or 'none'}")
    outcomes: list[Outcome] = []
    cluster = Cluster(temp=Path(tempfile.mkdtemp(prefix="pfr", dir="/tmp")))
    say(f"cluster temp dir {cluster.temp}")  # removed on exit (a test checks this one, not every /tmp/pfr*)
    try:
        cluster = start_cluster(nodes, venvs, conf.get("nodes") or {}, logs, cluster, python_paths)
        if conf["models"].get("served") and double:
            start_double_server(cluster, venvs["vllm"], conf["models"].get("server") or {}, logs)
        elif conf["models"].get("served") and llama:
            start_llama_server(cluster, venvs["vllm"], conf["models"]["model"],
                               {**(conf["models"].get("server") or {}), "options": conf["models"].get("options")},
                               logs)
        elif conf["models"].get("served"):
            start_server(cluster, venvs["vllm"], model_path, conf["models"].get("server") or {}, logs)
        for name in names:
            outcome = run_recipe(name, cluster, lake, conf, model_path, logs)
            outcomes.append(outcome)
            say(f"{name}: {'OK' if outcome.ok else 'FAILED'} ({outcome.status}) in {outcome.seconds:.0f} s")
            for line in outcome.lines:
                print(f"    {line}", flush=True)
        outcomes.append(refusal_check(cluster, lake, logs))
        say(f"refusal check: {'OK' if outcomes[-1].ok else 'FAILED'}")
        for line in outcomes[-1].lines:
            print(f"    {line}", flush=True)
    finally:
        if args.keep:
            say(f"--keep: the cluster stays up at {cluster.address}; stop it with: "
                f"pkill -9 -s {','.join(str(p.pid) for p in cluster.procs)}; rm -rf {cluster.temp}")
        else:
            cluster.stop()
            say("cluster stopped, temp dirs removed")
    total = time.time() - t0
    say("summary: " + "; ".join(f"{o.recipe} {'ok' if o.ok else 'FAILED'} {o.seconds:.0f} s" for o in outcomes)
        + f"; total {total:.0f} s")
    return 0 if outcomes and all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
