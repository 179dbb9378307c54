"""The phases of `piqaforge run pindic`, each an ordinary runner run (resumable, with lineage).

    <run>-open      PIQA slice → open meta-labels
    <run>-taxonomy  distinct labels → k-means per category → one row per cluster → LLM names → draft YAML
    <run>-classify  PIQA slice with open labels → closed classification against the taxonomy in use
    (driver)        one FAISS index of goals per non-empty label combination
    <run>-gen-r<k>  requests (sampled combination + exemplars per locale) → generate → pair from edit →
                    validate → novelty
    <run>-gen       the rounds' union (transforms/core/rounds.py); then review=auto → a review run
    <run>           translate → few-shots → correct → release checks → Table 1 columns → label balance

jobs/pindic.py strings them together; this module holds what each phase builds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest
from transforms.core.rounds import QuotaConfig, run_quota_rounds
from transforms.core.runner import run_pipeline
from transforms.core.stage import Stage
from transforms.io.sources import RowsSource, RunSource
from transforms.pindic.combos import ComboIndex, SamplingConfig, build_index, index_summary, sample_requests
from transforms.pindic.taxonomy import Taxonomy, draft_from_clusters, write_taxonomy


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


def run_chain(cfg: Any, lake: Lake, run_id: str, source: Any, stages: list[Stage], resume: bool,
              parents: list[str] | None = None, job: str = "pindic") -> RunManifest:
    return run_pipeline(job=job, dataset=cfg.dataset, source=source, stages=stages, lake=lake,
                        config=cfg.model_dump(mode="json"), run_id=run_id, resume=resume, parents=parents or [])


def draft_taxonomy(named: RunManifest, version: str, path: Path) -> tuple[Taxonomy, dict[str, Any]]:
    """The draft taxonomy from the naming run's kept clusters; counts of clusters named / not named."""
    table = read_table(Path(curated(named)))
    rows = table.select(["category", "cluster", "members", "candidate_names"]).to_pylist()
    draft = draft_from_clusters([{**r, "candidates": r["candidate_names"]} for r in rows], version)
    write_taxonomy(draft, path)
    naming = next(s for s in named.stages if s.name == "name_clusters")
    return draft, {"path": str(path), "clusters_named": naming.rows_kept, "naming_dropped": naming.rows_dropped,
                   "classes": draft.counts()}


def combination_index(classified: RunManifest, embed: Any, taxonomy: Taxonomy, folder: Path) -> tuple[ComboIndex, dict[str, Any]]:
    items = read_table(Path(curated(classified))).to_pylist()
    if not items:
        raise RuntimeError(f"run {classified.run_id} classified no item: nothing to index (see its rejected/)")
    index = build_index(items, embed([str(i["goal"]) for i in items]))
    summary = index_summary(index, taxonomy)
    summary["written"] = index.write(folder)
    return index, summary


def generation_rounds(cfg: Any, lake: Lake, run_id: str, index: ComboIndex, taxonomy: Taxonomy, embed: Any,
                      pool_path: str, stages: dict[str, Stage], resume: bool, parents: list[str]) -> RunManifest:
    """Quota rounds until every locale has `cfg.quota` accepted items (or no progress / max rounds)."""
    locales = [loc.model_dump() for loc in cfg.locales]
    sampling: SamplingConfig = cfg.sampling
    requests: dict[int, list[dict[str, Any]]] = {}

    def make_round(k: int, deficits: dict[str, int], accepted: list[str]) -> tuple[Any, list[Stage]]:
        requests[k] = sample_requests(index, taxonomy, embed, locales, deficits, k, sampling)
        source = RowsSource(records=requests[k])
        novelty = stages["novelty"].model_copy(update={"reference": [pool_path, *accepted]})
        return source, [stages["generate"], stages["pair"], stages["validate"], novelty]

    quota = QuotaConfig(group_column="locale", quotas={loc["code"]: cfg.quota for loc in locales},
                        max_rounds=cfg.max_rounds, patience=cfg.patience)
    umbrella = run_quota_rounds(job="pindic-gen", dataset=cfg.dataset, lake=lake, run_id=f"{run_id}-gen",
                                quota=quota, make_round=make_round, config=cfg.model_dump(mode="json"),
                                resume=resume, parents=parents)
    umbrella.extras["sampled_combinations"] = {
        str(k): {"requests": len(rows), "fell_back": sum(r["combo_fallback"] for r in rows),
                 "combinations": [{"locale": r["locale"], "sampled": " | ".join(
                     r[c] for c in ("domain", "core_principle", "key_properties_materials", "action_type")),
                     "served_by": r["exemplar_combo"], "shared_labels": r["combo_shared_labels"]} for r in rows]}
        for k, rows in requests.items()}
    umbrella.write(lake.manifest_path(umbrella.run_id))
    return umbrella


def round_manifests(lake: Lake, umbrella: RunManifest) -> list[RunManifest]:
    return [RunManifest.load(lake.manifest_path(r["run_id"])) for r in umbrella.extras.get("rounds", [])]


def review_auto(cfg: Any, lake: Lake, gen: RunManifest, run_id: str) -> tuple[RunManifest, dict[str, Any]]:
    """Two LLM annotators judge every generated item (transforms/review/auto.py); the review run's
    curated table holds the items the consensus kept."""
    from transforms.review.auto import auto_review
    from transforms.review.batch import batch_dir, export_run

    batch = f"review-{run_id}"
    if (batch_dir(lake, batch) / "batch.json").exists():  # a resumed run: the batch was exported already
        import shutil

        shutil.rmtree(batch_dir(lake, batch))
    export_run(lake, gen.run_id, to="csv", annotators=cfg.auto_review.annotators, batch=batch, rule=cfg.review_rule)
    result, manifest = auto_review(lake, batch, cfg.auto_review)
    stats = {k: result.stats.get(k) for k in ("kept", "dropped", "automatic", "judgments_valid", "rule")}
    stats["agreement"] = (result.stats.get("agreement") or {}).get("percent_agreement")
    return manifest, stats


def has_rows(run: RunManifest) -> bool:
    folder = Path(curated(run))
    return bool(parquet_files(folder)) and read_table(folder).num_rows > 0


def empty_final(cfg: Any, lake: Lake, run_id: str, parent: RunManifest, why: str) -> RunManifest:
    """The final run when nothing reached it (e.g. generation accepted no item): a run without stages
    whose manifest says why, so the figures, the report and the exit code are still written."""
    import datetime as dt

    from transforms.core.manifest import code_version

    folder = lake.zone("curated", cfg.dataset, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(run_id=run_id, job="pindic", dataset=cfg.dataset, code_version=code_version(),
                           config=cfg.model_dump(mode="json"), parents=[parent.run_id], status="succeeded",
                           outputs={"curated": str(folder)}, extras={"empty": why},
                           finished_at=dt.datetime.now(dt.UTC).isoformat())
    manifest.write(lake.manifest_path(run_id))
    return manifest


def final_source(lake: Lake, run: RunManifest) -> RunSource:
    return RunSource(lake=str(lake.root), run_id=run.run_id)


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
