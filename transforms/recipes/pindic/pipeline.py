"""Helpers of the pindic recipe's runs (jobs/recipes/pindic.yaml), each an ordinary runner run.

    <run>-open      PIQA slice → open meta-labels
    <run>-taxonomy  distinct labels → k-means per category → one row per cluster → LLM names → draft YAML
    <run>-classify  PIQA slice with open labels → closed classification against the taxonomy in use
    (driver)        one FAISS index of goals per non-empty label combination
    <run>-gen-r<k>  requests (sampled combination + exemplars per locale) → generate → pair from edit →
                    validate → novelty
    <run>-gen       the rounds' union (transforms/core/rounds.py); then review=auto → a review run
    <run>           translate → few-shots → correct → release checks → Table 1 columns → label balance

The recipe file strings them together; this module and transforms/recipes/pindic/recipe.py hold what they need.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.core.lake import Lake, read_table
from transforms.core.manifest import RunManifest
from transforms.recipes.pindic.taxonomy import Taxonomy, draft_from_clusters, write_taxonomy


@contextmanager
def phase(text: str) -> Iterator[None]:
    """A console line before and after a step that is not a runner run (those print their own stage
    lines): review=auto, the combination indices, the reference chrF, the release gate."""
    print(f"pindic · {text} …", flush=True)
    start = time.perf_counter()
    yield
    print(f"pindic · {text}: done in {time.perf_counter() - start:.1f} s", flush=True)


def curated(manifest: RunManifest) -> str:
    return str(manifest.outputs["curated"])


def draft_taxonomy(named: RunManifest, version: str, path: Path) -> tuple[Taxonomy, dict[str, Any]]:
    """The draft taxonomy from the naming run's kept clusters; counts of clusters named / not named."""
    table = read_table(Path(curated(named)))
    rows = table.select(["category", "cluster", "members", "candidate_names"]).to_pylist()
    draft = draft_from_clusters([{**r, "candidates": r["candidate_names"]} for r in rows], version)
    write_taxonomy(draft, path)
    naming = next(s for s in named.stages if s.name == "name_clusters")
    return draft, {"path": str(path), "clusters_named": naming.rows_kept, "naming_dropped": naming.rows_dropped,
                   "classes": draft.counts()}


def round_manifests(lake: Lake, umbrella: RunManifest) -> list[RunManifest]:
    return [RunManifest.load(lake.manifest_path(r["run_id"])) for r in umbrella.extras.get("rounds", [])]


def per_locale(table: pa.Table, column: str = "locale") -> dict[str, int]:
    out: dict[str, int] = {}
    for v in table.column(column).to_pylist() if column in table.schema.names else []:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nan_to_none(v) for v in value]
    return value
