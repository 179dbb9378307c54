"""Where stages ran: with PIQAFORGE_PLACEMENT_LOG set, one record per stage and process (the cluster
rehearsal checks them against Ray's state API)."""

from __future__ import annotations

import os
from typing import Any

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
