"""The release run: the reviewed items → the recipe's suite and artifact audit → the release folder.

Everything the card shows is an input of the gate stage (the recipe's card sections are computed
before it runs), and nothing touches the folder after `RELEASED` is written. The same function serves
recipes and `piqaforge run release --input ...` (jobs/release.py).
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
from pathlib import Path
from typing import Any

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest


class ReleaseInputError(ValueError):
    """The release cannot start: a bad suite, an input that does not exist, a version already released."""


def gate_and_write(lake: Lake, *, dataset: str, input_run: str | None = None, input_path: str | None = None,
                   suite: str = "generic", suite_overrides: dict[str, Any] | None = None, version: str | None = None,
                   run_id: str | None = None, audit: bool = True, audit_bound: float = 0.6,
                   sections: list[str] | None = None, files: dict[str, str] | None = None, resume: bool = False,
                   config: dict[str, Any] | None = None, hub: dict[str, Any] | None = None,
                   recipe: str | None = None) -> RunManifest:
    """One run of the runner (read the items → gate_and_release); its status is the gate's verdict.

    `hub` holds the card's settings (`licence`, `sources`, `notes`, `columns`, `repo_id`, `pretty_name`,
    `people`); everything in it that can be wrong is checked here, before anything is written."""
    from expectations.suite import load_suite
    from transforms.core.runner import run_pipeline
    from transforms.io.sources import RunSource
    from transforms.release.stage import GateAndRelease, ItemsSource
    from transforms.release.writer import RELEASED, find_manifest

    version = version or dt.datetime.now(dt.UTC).strftime("%Y.%m.%d")
    run_id = run_id or Lake.new_run_id("release")
    out = lake.root / "release" / dataset / version
    if (out / RELEASED).exists():  # everything that can be refused is checked before Ray starts
        raise ReleaseInputError(f"{out} was already released; choose another version (--set version=...)")
    try:
        load_suite(suite, suite_overrides or {})
    except (ValueError, FileNotFoundError) as err:
        raise ReleaseInputError(str(err)) from err
    source: Any
    if input_run is not None:
        source = RunSource(lake=str(lake.root), run_id=input_run)
        src = source.location()
    else:
        src = Path(str(input_path))
        if not src.exists():
            raise ReleaseInputError(f"release input {src} does not exist")
        source = ItemsSource(path=str(src))
    upstream = find_manifest(src)
    parents = [upstream.run_id] if upstream else ([input_run] if input_run else [])
    hub_settings = hub_settings_for(lake, src, parents, hub or {})
    upstream_path = lake.manifest_path(upstream.run_id) if upstream else None
    verdict_path = lake.run_dir(run_id) / "gate.json"
    gate = GateAndRelease(recipe=suite, recipe_name=recipe, suite_overrides=suite_overrides or {}, dataset=dataset, version=version,
                          out_dir=str(out), audit=audit, audit_bound=audit_bound,
                          upstream_manifest=str(upstream_path) if upstream_path and upstream_path.exists() else None,
                          result_path=str(verdict_path), run_id=run_id, card_sections=sections or [],
                          extra_files=files or {}, hub=hub_settings)
    manifest = run_pipeline(job="release", dataset=dataset, source=source, stages=[gate], lake=lake,
                            config=config or {}, run_id=run_id, resume=resume, parents=parents)
    verdict = json.loads(verdict_path.read_text(encoding="utf-8"))
    manifest.status = "succeeded" if verdict["released"] else "failed"
    manifest.error = None if verdict["released"] else (
        f"quality gate failed: {len(verdict['failed'])} check(s): " + "; ".join(verdict["failed"][:3]))
    manifest.outputs["release"] = verdict["path"]
    manifest.extras["gate"] = {k: verdict[k] for k in ("suite", "success", "rows", "failed", "checks")}
    manifest.write(lake.manifest_path(run_id))
    return manifest


def lineage(lake: Lake, run_ids: list[str]) -> list[RunManifest]:
    """The runs behind `run_ids`, nearest first (breadth first over parents), each once."""
    seen: dict[str, RunManifest] = {}
    queue = list(run_ids)
    while queue:
        run_id = queue.pop(0)
        path = lake.manifest_path(run_id)
        if run_id in seen or not path.exists():
            continue
        seen[run_id] = RunManifest.load(path)
        queue += seen[run_id].parents
    return list(seen.values())


def hub_settings_for(lake: Lake, src: Path, parents: list[str], hub: dict[str, Any]) -> dict[str, Any]:
    """Check the card's settings against the items before anything is written, and fill in the sources of
    the files the items were read from (lake/samples/licences.yaml) and the review's agreement."""
    from transforms.piqa.item_checks import agreement_figures
    from transforms.release.hub import HubMetadataError, check_config_name, check_language, declared_columns
    from transforms.release.licences import (
        LicenceError,
        SourceSpec,
        hub_licence,
        sources_of_file,
        unique_sources,
    )
    from transforms.release.stage import read_raw

    out = dict(hub)
    try:
        out["licence"] = hub_licence(hub.get("licence"), hub.get("licence_key", "licence"))
        out.pop("licence_key", None)
        repo = hub.get("repo_id")
        if repo is not None:
            from transforms.release.hub import REPO_ID

            if not REPO_ID.match(str(repo)):
                raise HubMetadataError(f"repo_id: {repo!r} is not a Hub dataset id (ORG/NAME)")
        table = read_raw(src) if src.exists() else None
        if table is not None:
            declared_columns(table, hub.get("columns"))
            if "lang" in table.column_names:
                for lang in sorted({str(x) for x in table.column("lang").to_pylist() if x is not None}):
                    check_config_name(check_language(lang, f"lang (the items' language {lang!r})"), "config")
    except (LicenceError, HubMetadataError) as err:
        raise ReleaseInputError(str(err)) from err
    runs = lineage(lake, parents)
    paths = [src] + [Path(i["path"]) for m in runs for i in m.inputs if i.get("path")]
    found = [s for p in paths for s in sources_of_file(p)]
    declared = [SourceSpec.model_validate(s) for s in hub.get("sources") or []]
    out["sources"] = [s.model_dump() for s in unique_sources(declared + found)]
    review = next((m.extras["review"] for m in runs if isinstance(m.extras.get("review"), dict)
                   and m.extras["review"].get("agreement")), None)
    out["agreement"] = agreement_figures(review)
    return out


def release_files(ctx: Any, release: Any) -> dict[str, str]:
    """The recipe's extra release files, computed from the items to release."""
    from transforms.core.lake import read_table

    if not release.files:
        return {}
    table = read_table(Path(ctx.manifests[release.of].outputs["curated"]))
    out = {}
    for spec in release.files:
        module, func = spec.make.split(":")
        out[spec.name] = str(getattr(importlib.import_module(module), func)(table))
    return out


def card_sections(ctx: Any, release: Any) -> list[str]:
    """The recipe's card sections, each computed from the items to release and the runs so far."""
    from transforms.core.lake import read_table

    if not release.card:
        return []
    table = read_table(Path(ctx.manifests[release.of].outputs["curated"]))
    out = []
    for section in release.card:
        module, func = section.make.split(":")
        text = getattr(importlib.import_module(module), func)(table, dict(ctx.manifests), **section.args)
        out.append(f"## {section.title}\n\n{text.strip()}\n")
    return out


def release_hub(ctx: Any, spec: Any) -> dict[str, Any]:
    """The card's settings of a recipe's release run (checked by `gate_and_write` before writing)."""
    from transforms.release.hub import HubMetadataError, check_language

    release = spec.release
    try:
        check_language(ctx.recipe.language.code, "language.code")
    except HubMetadataError as err:
        raise ReleaseInputError(f"{ctx.recipe.path}: {err}") from err
    key = f"runs.{spec.name}.release.licence" if release.licence is None and ctx.recipe.licence is None else "licence"
    return {"licence": release.licence or ctx.recipe.licence, "licence_key": f"{ctx.recipe.path}: {key}",
            "sources": [s.model_dump() for s in release.sources if not isinstance(s, str)],
            "notes": [s for s in release.sources if isinstance(s, str)], "columns": release.columns,
            "repo_id": release.repo_id, "pretty_name": release.pretty_name or ctx.recipe.description.split(":")[0],
            "people": release.annotators, "added_by": column_origins(ctx.recipe)}


def column_origins(recipe: Any) -> dict[str, list[str]]:
    """Item column -> the recipe's stages whose class declares it in `release_columns` (the card's column table)."""
    from transforms.flow.recipe_check import stage_places
    from transforms.flow.registry import stage_class

    out: dict[str, list[str]] = {}
    for run in recipe.runs:
        for _, entry in stage_places(run):
            for column in getattr(stage_class(entry.stage), "release_columns", ()):
                if entry.stage not in out.setdefault(column, []):
                    out[column].append(entry.stage)
    return out
