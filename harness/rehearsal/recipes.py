"""One recipe through the rehearsal's cluster: submitted with `piqaforge submit` and the models swapped in
one place (cluster/rehearsal.yaml), then checked: the lineage law in every run, counted from disk, and
every stage's worker on a node of a type whose resources its demand names (Ray's state API)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.rehearsal.envs import REPO, NodeType, RehearsalError, read_cluster
from harness.rehearsal.manifests import declared_reasons, recipe_manifest_lines, run_manifests
from harness.rehearsal.nodes import Cluster, as_dict, list_nodes, node_type_of, say


# -- the model swap, in one place ---------------------------------------------------------------------------
def swapped_roles(recipe_name: str, models: dict[str, Any], model_path: str, server_url: str | None) -> list[str]:
    """`--set engine_profiles.vllm-cluster.<role>=...` items: every role of the recipe's cluster profile with
    its model swapped for the local one; served roles through the OpenAI-compatible server. With a `backend`
    in `models` (CI's tier) the role's backend is swapped too (e.g. llama.cpp in process); its `resources`
    always stay, so it lands on the node type it names."""
    from transforms.flow.engines import profiles
    from transforms.flow.recipe import load_recipe

    roles = profiles(load_recipe(recipe_name))["vllm-cluster"]
    served = set(models.get("served") or [])
    options = dict(models.get("options") or {})

    def swap(engine: dict[str, Any], role: str) -> dict[str, Any]:
        out = {**engine, "model": model_path, "options": dict(options)}
        if models.get("backend"):
            out["backend"] = models["backend"]
        if role in served and server_url:
            out = {"backend": "openai", "model": "rehearsal-served", "name": engine.get("name"),
                   "params_b": engine.get("params_b"),
                   "options": {"base_url": server_url}}
        return out

    items = []
    for role, value in roles.items():
        if isinstance(value, list):
            new: Any = [swap(e, role) for e in value]
        elif isinstance(value, dict) and "backend" not in value:
            new = {k: swap(e, role) for k, e in value.items()}
        else:
            new = swap(value, role)
        items.append(f"engine_profiles.vllm-cluster.{role}={json.dumps(new, ensure_ascii=False)}")
    return items


# -- one recipe ------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    recipe: str
    ok: bool
    seconds: float
    status: str = ""
    lines: list[str] = field(default_factory=list)


def run_recipe(name: str, cluster: Cluster, lake: Path, conf: dict[str, Any], model_path: str, logs: Path) -> Outcome:
    started = time.time()
    run_id = f"rh-{name}"
    placement = lake / "placement" / run_id
    shutil.rmtree(placement, ignore_errors=True)
    args = ["submit", name, "--address", cluster.address, "--lake", str(lake), "--run-id", run_id]
    cfg = REPO / "jobs" / "configs" / f"{name}-cluster.yaml"
    if not cfg.exists():
        raise RehearsalError(f"{name}: no cluster config {cfg.relative_to(REPO)}")
    items = ["engines=vllm-cluster", *swapped_roles(name, conf.get("models", {}), model_path, cluster.server_url)]
    for key, value in ((conf.get("recipes") or {}).get(name, {}).get("set") or {}).items():
        items.append(f"{key}={json.dumps(value, ensure_ascii=False)}")
    for key, value in ((conf.get("ci_recipes") or {}).get(name, {}).get("set") or {}).items():
        items.append(f"{key}={json.dumps(value, ensure_ascii=False).replace('<lake>', str(lake))}")
    args += ["--config", str(cfg.relative_to(REPO))]
    for item in items:
        args += ["--set", item]
    from transforms.flow.config_io import parse_set

    # where each stage may run, from the same recipe, config and --set items the job gets (a served role's
    # stage is an HTTP client and belongs on a CPU worker)
    overrides = dict(parse_set(i) for i in items)
    _EXPECTED[name] = expected_types(name, overrides, read_cluster())
    # what each stage declares, to read the manifests' drop counts against (harness/rehearsal/manifests.py)
    declared = declared_reasons(stage for _, _, stage in built_stages(name, overrides))
    ci = bool(conf.get("ci"))
    args += ["--env", f"PIQAFORGE_PLACEMENT_LOG={placement}", "--env",
             f"VLLM_CPU_KVCACHE_SPACE={conf.get('nodes', {}).get('kv_cache_gb', 1)}",
             "--env", "HF_HUB_OFFLINE=1", "--env", "TRANSFORMERS_OFFLINE=1"]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["RAY_AUTH_MODE"] = "token"
    say(f"{name}: piqaforge {shlex.join(a if len(a) < 120 else a[:117] + '...' for a in args)}")
    log = logs / f"{name}.log"
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, stdout=fh,
                              stderr=subprocess.STDOUT, text=True)
    text = log.read_text(encoding="utf-8", errors="replace")
    out = Outcome(name, proc.returncode == 0 and "SUCCEEDED" in text, time.time() - started)
    record_path = lake / "runs" / run_id / "recipe.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    out.status = str(record.get("status", "no record"))
    if out.status == "nothing_to_release" and not ci:
        # the graph ran to its end, but the stand-in model's items were all dropped by the checks (a 270M base
        # model writes no valid item): the job exits 1 by design (no release); the rehearsal says so and goes on
        out.ok = True
        out.lines.append("completed with nothing to release: the stand-in model's items were all dropped "
                         "(the runs' drop reasons below)")
    if not out.ok or out.status not in ("succeeded", "awaiting_review", "nothing_to_release"):
        out.ok = False
        out.lines.append(f"job exit {proc.returncode}, recipe status {out.status}; last lines of {log}:")
        out.lines += ["    " + x for x in text.strip().splitlines()[-25:]]
        return out
    out.lines += law_lines(lake, record)
    # the runs' manifests: every stage's warnings and undeclared reasons; in CI's tier (the double answers every
    # question well-formed) every stage received rows too
    out.lines += recipe_manifest_lines(lake, record, declared, need_rows=ci)
    out.lines += placement_lines(name, cluster, placement, lake, run_id,
                                 every=stages_with_rows(lake, record) if ci else None)
    out.ok = not any(x.startswith("FAIL") for x in out.lines)
    return out


def refusal_check(cluster: Cluster, lake: Path, logs: Path) -> Outcome:
    """A recipe asking for what no node has (8 GPUs on a cuML node) is refused before any stage runs."""
    started = time.time()
    args = ["submit", "zh-piqa", "--address", cluster.address, "--lake", str(lake), "--run-id", "rh-refused",
            "--config", "jobs/configs/zh-piqa-cluster.yaml", "--set",
            'runs.items.stages.translate.resources={"env": "cuml", "gpus": 8, "cpus": 1}']
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)
    text = proc.stdout + proc.stderr
    (logs / "refused.log").write_text(text, encoding="utf-8")
    line = next((x.strip() for x in text.splitlines() if "'translate'" in x), "")
    ran = (lake / "runs" / "rh-refused-items" / "manifest.json").exists()
    ok = proc.returncode != 0 and "cannot run the recipe" in text and "GPU" in line and not ran
    return Outcome("refusal", ok, time.time() - started, "refused" if ok else "not refused",
                   [f"zh-piqa with translate on {{env: cuml, gpus: 8}}: {line or text.strip()[-300:]}",
                    "no run started" if not ran else "FAIL a run started"])


def law_lines(lake: Path, record: dict[str, Any]) -> list[str]:
    from transforms.core.runner import conservation_errors

    lines = []
    for name, entry, manifest in run_manifests(lake, record):
        errors = conservation_errors(manifest)
        stages = manifest.stages
        rows_in = (stages[0].rows_in + stages[0].rows_created) if stages else 0
        kept = stages[-1].rows_kept if stages else 0
        reasons: dict[str, int] = {}
        for st in stages:
            for reason, n in st.rows_dropped.items():
                reasons[reason] = reasons.get(reason, 0) + int(n)
        top = ", ".join(f"{r} {n}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:3])
        lines.append(("FAIL law " if errors else "law holds ") + f"{name}: {entry['status']}, {rows_in} in -> {kept} "
                     f"kept{' (dropped: ' + top + ')' if top else ''}{'; ' + '; '.join(errors) if errors else ''}")
    return lines


def stages_with_rows(lake: Path, record: dict[str, Any]) -> set[str]:
    """The stages of a recipe's runs that received rows, each of which must have noted where it ran. Not the
    sources: a source's rows are made by the driver (`rows()`, a small file or the previous runs' tables) or by
    Ray Data's read tasks, which run no stage code that could note a worker."""
    return {st.name for _, _, m in run_manifests(lake, record) for st in m.stages
            if st.kind != "source" and (st.rows_in or st.rows_created)}


def built_stages(recipe_name: str, overrides: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(where, name, stage) of every stage of the recipe as its runs build them, from the same recipe, cluster
    config and `--set` items the job gets (the CPU pin on, as the cluster has env_cpu)."""
    from transforms.core.envs import set_cpu_pin
    from transforms.flow.placement import recipe_stages
    from transforms.flow.recipe import load_recipe

    set_cpu_pin(True)
    try:
        return recipe_stages(load_recipe(recipe_name, overrides,
                                         config_file=str(REPO / "jobs" / "configs" / f"{recipe_name}-cluster.yaml")))
    finally:
        set_cpu_pin(False)


def expected_types(recipe_name: str, overrides: dict[str, Any], nodes: list[NodeType]) -> dict[str, set[str]]:
    """Stage name -> node types whose resources hold its demand (the CPU pin on, as the cluster has env_cpu)."""
    from transforms.core.envs import set_cpu_pin
    from transforms.flow.demand import demands, missing_on

    out: dict[str, set[str]] = {}
    stages = built_stages(recipe_name, overrides)
    set_cpu_pin(True)  # demand reads the pin too
    try:
        for _, _, stage in stages:  # a stage whose parts ask for other resources may run on either's nodes
            fits = {n.name for want in demands(stage) for n in nodes if not missing_on(want, n.resources)}
            out.setdefault(getattr(stage, "name", "?"), set()).update(fits)
        return out
    finally:
        set_cpu_pin(False)


def placement_lines(name: str, cluster: Cluster, folder: Path, lake: Path, run_id: str,
                    every: set[str] | None = None) -> list[str]:
    """Each stage's noted worker checked against Ray's state API: the node it ran on, of the expected type.
    `every` (CI's tier): stages that must each have noted where they ran (those that received rows)."""
    from ray.util.state import get_actor, list_tasks

    by_id = {n["node_id"]: node_type_of(n) for n in list_nodes(cluster)}
    expected = _EXPECTED.get(name, {})
    seen: dict[str, set[str]] = {}
    lines: list[str] = []
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []
    if not records:
        return [f"FAIL placement: no stage noted where it ran ({folder})"]
    unconfirmed = 0
    for rec in records:
        if rec.get("stage") == "driver":
            continue
        node = rec.get("node_id")
        confirmed = None
        if rec.get("actor_id"):
            actor = get_actor(rec["actor_id"], address=cluster.address)
            confirmed = as_dict(actor).get("node_id") if actor is not None else None
        elif rec.get("task_id") and not rec.get("driver"):
            tasks = list_tasks(address=cluster.address, filters=[("task_id", "=", rec["task_id"])], limit=5,
                               raise_on_missing_output=False)
            confirmed = as_dict(tasks[0]).get("node_id") if tasks else None
        if confirmed is None:
            unconfirmed += 1
        elif confirmed != node:
            lines.append(f"FAIL placement: {rec['stage']} noted node {node} but Ray's state API says {confirmed}")
        kind = by_id.get(confirmed or node, "?")
        where = "driver" if rec.get("driver") else kind
        seen.setdefault(rec["stage"], set()).add(where)
    for stage, places in sorted(seen.items()):
        allowed = expected.get(stage)
        bad = {p for p in places if p == "driver" or p == "head" or (allowed is not None and p not in allowed)}
        mark = "FAIL placement" if bad else "ran on"
        lines.append(f"{mark} {stage}: {', '.join(sorted(places))}"
                     + (f" (expected {', '.join(sorted(allowed))})" if bad and allowed else ""))
    for stage in sorted((every or set()) - set(seen)):
        if stage in UNNOTED_STAGES:
            lines.append(f"unchecked placement: {stage} received rows but notes no worker ({UNNOTED_STAGES[stage]})")
        else:
            lines.append(f"FAIL placement: {stage} received rows but noted no worker (where it ran is unchecked)")
    lines.append(_driver_on_head(cluster, by_id, run_id, records))
    if unconfirmed:
        lines.append(f"note: {unconfirmed} of {len(records)} workers' ids were no longer in Ray's state API "
                     "(finished tasks are pruned); their noted node ids were used")
    return lines


_EXPECTED: dict[str, dict[str, set[str]]] = {}
# Stages whose workers note no placement (Ray tasks or actors of their own that call neither `ensure_setup` nor
# `note_placement`): said as "unchecked placement" instead of failing. Every bundled stage notes its workers now
# (the prefilters' own fitting tasks and scoring actors included); a team's stage may not.
UNNOTED_STAGES: dict[str, str] = {}


def _driver_on_head(cluster: Cluster, by_id: dict[str, str], run_id: str, records: list[dict[str, Any]]) -> str:
    """The job's driver: its own note (the orchestrator writes one as it joins the cluster), its job found in
    Ray's state API, and the node it noted being the head."""
    from ray.util.state import list_jobs

    jobs = [as_dict(j) for j in list_jobs(address=cluster.address)]
    if not [j for j in jobs if str(j.get("submission_id") or "").startswith(run_id)]:
        return "FAIL placement: the job is not in Ray's state API"
    drivers = [r for r in records if r.get("stage") == "driver"]
    if not drivers:
        return "FAIL placement: the driver noted nothing"
    kinds = sorted({by_id.get(r.get("node_id") or "", "?") for r in drivers})
    return ("driver on " if kinds == ["head"] else "FAIL placement: driver on ") + ", ".join(kinds)
