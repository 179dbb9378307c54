"""PIndicQA's front half on the real runner (local Ray): open labels → label clusters → names → draft
taxonomy → classification → combination indices → generation rounds with validation, novelty and quota
caps. LLM replies come from `tests/pindic_double.py`, a test double of the *engine interface* (rules,
not a model), attached to the stages and shipped to Ray's actors by value; embeddings (e5), k-means,
FAISS and the runner are real. Checks the conservation law of every run and the figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import pindic_double  # noqa: E402


@pytest.mark.slow  # 142 s on this loaded machine (Ray start, six actors, e5 loads)
@pytest.mark.ray
def test_front_half_and_rounds_on_the_runner(ray_local, tmp_path):
    from ray import cloudpickle  # Ray's own copy pickles the stages

    import jobs.pindic as job
    from transforms.cluster.labels import GroupClusters
    from transforms.core.lake import Lake
    from transforms.core.runner import conservation_errors
    from transforms.embed.base import build_embedder
    from transforms.pindic import metrics
    from transforms.pindic import pipeline as P
    from transforms.pindic.stages import ClassifyItems, LabelRowsSource, PiqaSliceSource
    from transforms.pindic.taxonomy import fingerprint, load_taxonomy

    cloudpickle.register_pickle_by_value(pindic_double)   # the double travels with the stages to the actors
    engine = pindic_double.ScriptedEngine()
    root = Path(__file__).resolve().parents[1]
    cfg = job.Config(lake=str(tmp_path / "lake"), quota=1, max_rounds=2, limit=6,
                     locales=[job.Locale(name="Kerala", code="IN-KL", lang="ml"),
                              job.Locale(name="Delhi", code="IN-DL", lang="hi")])
    lake = Lake(cfg.lake).create()
    run_dir = lake.run_dir("t")
    embedder = build_embedder(cfg.embedder)

    opened = P.run_chain(cfg, lake, "t-open", PiqaSliceSource(path=str(root / "lake/samples/pindic_piqa_slice.jsonl"),
                                                              limit=6), [cfg.open_labels.use_engine(engine)], False)
    named = P.run_chain(cfg, lake, "t-taxonomy", LabelRowsSource(path=P.curated(opened)),
                        [cfg.clustering.model_copy(update={"output_dir": str(run_dir)}), GroupClusters(),
                         cfg.naming.use_engine(engine)], False, parents=[opened.run_id])
    draft, info = P.draft_taxonomy(named, "t", run_dir / "taxonomy_draft.yaml")
    assert load_taxonomy(info["path"]).counts() == draft.counts() and info["clusters_named"] == sum(draft.counts().values())
    tax = load_taxonomy()
    classified = P.run_chain(cfg, lake, "t-classify", P.final_source(lake, opened),
                             [ClassifyItems.for_taxonomy(tax, fingerprint()["sha256"]).use_engine(engine)], False)
    index, summary = P.combination_index(classified, embedder.encode, tax, run_dir / "combos")
    assert summary["pool_items"] == 6 and summary["non_empty_combinations"] == len(index.combos)
    assert (run_dir / "combos" / "combos.json").exists()
    stages = {"generate": cfg.generate.use_engine(engine), "pair": cfg.pair, "validate": cfg.validate_items,
              "novelty": cfg.novelty}
    gen = P.generation_rounds(cfg, lake, "t", index, tax, embedder.encode, P.curated(classified), stages, False,
                              parents=[classified.run_id])
    rounds = P.round_manifests(lake, gen)
    for m in [opened, named, classified, *rounds, gen]:
        assert conservation_errors(m) == [], m.run_id
    assert gen.extras["stop_reason"] in ("quotas_met", "no_progress", "max_rounds")
    table = metrics.round_table(rounds)
    assert {r["locale"] for r in table} <= {"IN-KL", "IN-DL"} and table
    for r in table:   # every generated item is accounted for by a drop or acceptance
        assert r["generated"] == r["invalid_output"] + r["validation_drops"] + r["novelty_drops"] + \
            r["quota_full"] + r["accepted"]
    sampled = gen.extras["sampled_combinations"]["1"]
    assert sampled["requests"] == 2 and 0 <= sampled["fell_back"] <= 2
