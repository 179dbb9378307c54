"""What a stage's tasks or actors ask Ray for, and which nodes can hold it.

* `demand(stage)`: CPUs, GPUs, custom resources such as `env_vllm`, the accelerator type, from its
  `resources` as the runner passes them; `demands(stage)` adds those of the parts a stage runs with other
  resources (`part_resources()`: the distilled prefilter's teacher task).
* `unplaceable(...)`: the stages no node of a cluster can ever hold, with the missing resource named
  (Ray would otherwise wait forever: a demand no node type can meet is not an error to Ray).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Demand:
    cpus: float = 0.0
    gpus: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)
    accelerator: str | None = None

    def resources(self) -> dict[str, float]:
        out = {"CPU": self.cpus, "GPU": self.gpus, **self.custom}
        if self.accelerator:
            out[f"accelerator_type:{self.accelerator}"] = 0.001
        return {k: v for k, v in out.items() if v}

    def describe(self) -> str:
        return ", ".join(f"{k}: {v:g}" for k, v in self.resources().items()) or "nothing"


def demand(stage: Any) -> Demand:
    """What one task or actor of `stage` asks Ray for."""
    return demand_of(getattr(stage, "resources", None))


def demands(stage: Any) -> list[Demand]:
    """Every demand of `stage`'s tasks and actors: its own, then each part's it runs with other resources."""
    parts = getattr(stage, "part_resources", None)
    return [demand(stage), *(demand_of(r) for r in (parts() if callable(parts) else []))]


def demand_of(resources: Any) -> Demand:
    """What a task or actor given `resources` (a stage's Resources; None: Ray's default) asks Ray for."""
    if resources is None:
        return Demand(cpus=1.0)
    args = resources.ray_remote_args()
    return Demand(cpus=float(args.get("num_cpus", 1) or 0), gpus=float(args.get("num_gpus", 0) or 0),
                  custom={k: float(v) for k, v in (args.get("resources") or {}).items()},
                  accelerator=args.get("accelerator_type"))


def missing_on(want: Demand, node: dict[str, float]) -> list[str]:
    """The resources of `want` a node with total resources `node` lacks (empty: it fits)."""
    return [f"{k} {v:g} (the node has {node.get(k, 0):g})" for k, v in want.resources().items()
            if node.get(k, 0) < v]


def nodes_fitting(want: Demand, nodes: dict[str, dict[str, float]]) -> list[str]:
    return [name for name, res in nodes.items() if not missing_on(want, res)]


def unplaceable(stages: Iterable[tuple[str, Any]], nodes: dict[str, dict[str, float]]) -> list[str]:
    """One line per stage that no node can hold: the stage, what it asks for, the closest node's gap."""
    problems = []
    for where, stage in stages:
        for want in demands(stage):
            if nodes_fitting(want, nodes):
                continue
            gaps = {name: missing_on(want, res) for name, res in nodes.items()}
            closest = min(gaps, key=lambda n: len(gaps[n])) if gaps else None
            missing = sorted({g.split(" ")[0] for gs in gaps.values() for g in gs if
                              not any(g.split(" ")[0] in res for res in nodes.values())})
            detail = (f"no node has {', '.join(missing)}" if missing else
                      f"closest node {closest}: lacks {'; '.join(gaps[closest])}" if closest
                      else "the cluster has no nodes")
            problems.append(f"{where} (stage {getattr(stage, 'name', '?')!r}) asks for {want.describe()}: {detail}")
    return problems


def ambiguous_gpu_stages(stages: Iterable[tuple[str, Any]]) -> list[str]:
    """GPU stages that name no environment: Ray may put them on a vLLM or a cuML node, whose software differs."""
    out = []
    for where, stage in stages:
        r = getattr(stage, "resources", None)
        if r is not None and r.gpus and not r.env and not r.custom_resources:
            out.append(f"{where} (stage {getattr(stage, 'name', '?')!r}) asks for {r.gpus:g} GPU(s) but names no "
                       "environment: set resources.env (vllm or cuml) so it lands on a node whose image has its code")
    return out


def setup_env_of(want: Demand, node_types: list[Any]) -> list[str]:
    """The set-up environments (setup_node.sh <env>) of the node types that can hold a demand."""
    return sorted({n.setup_env for n in node_types if not n.head and not missing_on(want, n.resources)})
