"""PIndicQA's pieces a recipe file names (jobs/recipes/pindic.yaml): the generation rounds' request rows
and the figures each run's report shows (the draft taxonomy, the combination indices, the final funnel).

Each function is what the recipe declares under `rounds.requests` or a run's `reports`; the figures
land in runs/<run id>/<name>.json beside the run, and the final report shows them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest
from transforms.recipes.pindic.combos import (
    ComboIndex,
    SamplingConfig,
    build_index,
    index_summary,
    sample_requests,
)
from transforms.recipes.pindic.taxonomy import Taxonomy, fingerprint, load_taxonomy


@lru_cache(maxsize=4)
def _embedder(config_json: str) -> Any:
    from transforms.embed.base import EmbedderConfig, build_embedder

    return build_embedder(EmbedderConfig.model_validate_json(config_json))


def _embed(embedder: dict[str, Any]) -> Any:
    """The embedder's encode function. On a cluster (the driver joined one: RAY_ADDRESS) the model is not loaded
    in the driver, which runs on a CPU-only head: an actor placed by the embedder's device holds it (a vLLM
    worker's GPU for `device: cuda`, else a CPU worker) and the driver sends it texts."""
    import json
    import os

    config = json.dumps(embedder, sort_keys=True)
    if os.environ.get("RAY_ADDRESS"):
        actor = _embed_actor(config)

        def encode(texts: list[str]) -> Any:
            import ray

            return ray.get(actor.encode.remote(list(texts)))

        return encode
    return _embedder(config).encode


class _EmbedWorker:
    def __init__(self, config_json: str):
        self.embedder = _embedder(config_json)

    def encode(self, texts: list[str]) -> Any:
        return self.embedder.encode(texts)


def embed_placement(embedder: dict[str, Any]) -> dict[str, Any]:
    """Where the embedder's actor goes (a stage's `resources` fields): a vLLM worker's GPU for a cuda device (its
    image has CUDA torch: e5-torch, sentence-transformers), else a CPU worker."""
    device = str(embedder.get("device") or "")
    return {"env": "vllm", "gpus": 1, "cpus": 1} if device.startswith("cuda") else {"cpus": 1}


@lru_cache(maxsize=4)
def _embed_actor(config_json: str) -> Any:
    import json

    import ray

    from transforms.core.stage import placement_args

    place = embed_placement(json.loads(config_json))
    return ray.remote(**placement_args(place))(_EmbedWorker).remote(config_json)


@lru_cache(maxsize=4)
def _index(classified: str, embedder_json: str) -> ComboIndex:
    """One goal index per label combination of the classified pool (built once per process)."""
    import json

    items = read_table(Path(classified)).to_pylist()
    if not items:
        raise RuntimeError(f"the classification kept no item ({classified}): nothing to index (see its rejected/)")
    return build_index(items, _embed(json.loads(embedder_json))([str(i["goal"]) for i in items]))


def generation_requests(k: int, deficits: dict[str, int], accepted: list[str], *, classified: str, taxonomy: str,
                        embedder: dict[str, Any], locales: list[dict[str, str]], sampling: dict[str, Any]
                        ) -> list[dict[str, Any]]:
    """Round k's request rows: per locale short of its quota, sampled combinations with exemplars from the
    combination indices (transforms/recipes/pindic/combos.py)."""
    import json

    index = _index(classified, json.dumps(embedder, sort_keys=True))
    return sample_requests(index, load_taxonomy(taxonomy), _embed(embedder), locales, deficits, k,
                           SamplingConfig.model_validate(sampling))


def taxonomy_figures(manifest: RunManifest, lake: Lake) -> dict[str, Any]:
    """The clustering's figures and the draft taxonomy a person edits (runs/<run>/taxonomy_draft.yaml)."""
    import json

    from transforms.recipes.pindic.pipeline import draft_taxonomy

    run_dir = lake.run_dir(manifest.run_id)
    clustering = run_dir / "clustering.json"
    _, draft = draft_taxonomy(manifest, manifest.run_id, run_dir / "taxonomy_draft.yaml")
    return {"clustering": json.loads(clustering.read_text("utf-8")) if clustering.exists() else None,
            "draft_taxonomy": draft}


def combination_figures(manifest: RunManifest, lake: Lake, taxonomy: str, embedder: dict[str, Any]) -> dict[str, Any]:
    """The taxonomy in use and one index of goals per non-empty label combination (written beside the run)."""
    import json

    tax: Taxonomy = load_taxonomy(taxonomy)
    index = _index(manifest.outputs["curated"], json.dumps(embedder, sort_keys=True))
    summary = index_summary(index, tax)
    summary["written"] = index.write(lake.run_dir(manifest.run_id) / "combos")
    return {"taxonomy": {**fingerprint(taxonomy), "status": tax.status, "classes": tax.counts(),
                         "citation": tax.citation}, "combinations": summary}


def final_figures(manifest: RunManifest, lake: Lake, runs: dict[str, RunManifest], taxonomy: str,
                  embedder: dict[str, Any]) -> dict[str, Any]:
    """The generation rounds, the generated items' coverage and diversity, the correction and the items
    per locale, from the runs before the release."""
    from transforms.recipes.pindic import metrics
    from transforms.recipes.pindic.pipeline import nan_to_none, per_locale, round_manifests
    from transforms.recipes.pindic.report import _count, _stage_rows, generated_coverage

    gen = runs["generation"]
    generated = read_table(Path(gen.outputs["curated"])).to_pylist() if parquet_files(Path(gen.outputs["curated"])) \
        else []
    final = read_table(Path(manifest.outputs["curated"])).to_pylist() \
        if parquet_files(Path(manifest.outputs["curated"])) else []
    corrected = _stage_rows(manifest, "correct_translation") or _stage_rows(manifest, "correct")  # old manifests
    return nan_to_none({
        "rounds": {"stop_reason": gen.extras.get("stop_reason"), "quota_met": gen.extras.get("quota_met")},
        "rounds_table": metrics.round_table(round_manifests(lake, gen)),
        "generated_coverage": generated_coverage(generated, load_taxonomy(taxonomy).counts()),
        "diversity_generated_goals": metrics.diversity([str(r["goal"]) for r in generated], _embed(embedder)),
        "correction": metrics.correction_figures(corrected) if corrected else {},
        "items_per_locale": {"generated_accepted": per_locale(read_table(Path(gen.outputs["curated"])))
                             if generated else {}, "final": {str(k): v for k, v in _count(final, "locale").items()}},
    })
