"""What a run's manifest (runs/<run_id>/manifest.json) says against the rehearsal's guarantees, as lines: `FAIL ...`
for each breach, nothing when it holds. The rehearsal (both tiers) calls `manifest_lines` on every run of every
recipe; tests/cluster/test_rehearsal_manifest_check.py calls the same function on a local run with a planted
undeclared reason.

* A stage's `warnings` (the runner records there what a stage did that its class does not declare: an undeclared
  drop reason, transforms/core/records.record_step): a warning in a user's run, a failure here.
* Independently of what the runner recorded: each drop reason kind a stage counts (`rows_dropped`) checked against
  the reasons its built stage declares (`declared`, from the same recipe the job ran), where the stage is known.
* With `need_rows` (CI's tier, whose engine double answers every question well-formed): every stage received rows
  (`rows_in` or `rows_created` > 0), so its placement was exercised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from transforms.core.manifest import RunManifest
from transforms.core.stage import reason_kind


def declared_reasons(stages: Iterable[Any]) -> dict[str, set[str]]:
    """Stage name -> the drop reason kinds its built stage(s) declare (a union where one run names a stage twice)."""
    out: dict[str, set[str]] = {}
    for stage in stages:
        declare = getattr(stage, "declared_drop_reasons", None)
        if declare is not None:
            out.setdefault(getattr(stage, "name", "?"), set()).update(declare())
    return out


def manifest_lines(manifest: RunManifest, run: str, declared: Mapping[str, set[str]] | None = None,
                   need_rows: bool = False) -> list[str]:
    """FAIL lines for one run's manifest (empty when every check holds); `run` names it in each line."""
    lines: list[str] = []
    for st in manifest.stages:
        where = f"{run}.{st.index:02d}-{st.name}"
        lines += [f"FAIL warning {where}: {w}" for w in st.warnings]
        allowed = (declared or {}).get(st.name)
        if allowed is not None:
            by_kind: dict[str, int] = {}
            for reason, n in st.rows_dropped.items():
                by_kind[reason_kind(reason)] = by_kind.get(reason_kind(reason), 0) + int(n)
            lines += [f"FAIL undeclared drop reason {where}: {kind!r} on {n} row(s); the stage declares "
                      f"{sorted(allowed) or 'none'}" for kind, n in sorted(by_kind.items()) if kind not in allowed]
        if need_rows and not (st.rows_in or st.rows_created):
            lines.append(f"FAIL no rows {where}: the stage received no row (its placement went unexercised)")
    return lines


def run_manifests(lake: Path, record: dict[str, Any]) -> list[tuple[str, dict[str, Any], RunManifest]]:
    """(run name, the recipe record's entry, manifest) of every run of a recipe record (runs/<root>/recipe.json)
    that wrote a manifest, each quota round's run after its rounds run (`<name>.round-<k>`: its manifest's
    extras name them; the stages of a rounds run run there)."""
    out = []
    for name, entry in (record.get("runs") or {}).items():
        path = lake / "runs" / str(entry.get("run_id")) / "manifest.json"
        if entry.get("status") == "skipped" or not path.exists():
            continue
        manifest = RunManifest.load(path)
        out.append((name, entry, manifest))
        for k, rnd in enumerate(manifest.extras.get("rounds") or [], 1):
            round_path = lake / "runs" / str(rnd.get("run_id")) / "manifest.json" if isinstance(rnd, dict) else None
            if round_path is not None and round_path.exists():
                rm = RunManifest.load(round_path)
                out.append((f"{name}.round-{k}", {"run_id": rnd["run_id"], "status": rm.status}, rm))
    return out


def recipe_manifest_lines(lake: Path, record: dict[str, Any], declared: Mapping[str, set[str]] | None = None,
                          need_rows: bool = False) -> list[str]:
    """`manifest_lines` over every run of a recipe record (what the rehearsal reports per recipe), plus one FAIL
    line when the record names no run with a manifest."""
    runs = run_manifests(lake, record)
    if not runs:
        return ["FAIL manifests: the recipe record names no run with a manifest"]
    return [line for name, _, manifest in runs for line in manifest_lines(manifest, name, declared, need_rows)]
