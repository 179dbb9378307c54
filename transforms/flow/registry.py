"""Stages by registered name, as "module:Class" strings imported only when a recipe uses them.

A recipe file names a stage by one of these names (`stage: langid`) or by its own "module:Class"
string (a team's stage outside this repository). Nothing here imports a stage module, so listing or
checking a recipe file is cheap (tests/flow/test_import_light.py).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

STAGES: dict[str, str] = {
    # sources
    "read_crawl": "transforms.io.crawl:CrawlSource",
    "read_items": "transforms.release.stage:ItemsSource",
    "read_rows": "transforms.io.sources:RowsSource",
    "read_table": "transforms.io.sources:TableSource",
    "read_documents": "transforms.io.documents:DocumentSource",
    "writers_intake": "transforms.io.writers_intake:WritersIntake",
    # text
    "normalize": "transforms.text.normalize:NormalizeText",
    "length_filter": "transforms.text.quality:LengthFilter",
    "langid": "transforms.text.langid:LanguageFilter",
    "input_guard": "transforms.text.input_guard:InputGuard",
    # dedup
    "exact_dedup": "transforms.dedup.exact:ExactDedup",
    "minhash_dedup": "transforms.dedup.minhash:MinHashDedup",
    "semantic_dedup": "transforms.dedup.semantic:SemanticDedup",
    "novelty": "transforms.dedup.novelty:NoveltyFilter",
    "review_neighbours": "transforms.dedup.review_neighbours:ReviewNeighbours",
    "reviewer_duplicates": "transforms.dedup.reviewer_duplicates:ReviewerDuplicates",
    "confirmed_duplicates": "transforms.dedup.reviewer_duplicates:ConfirmedDuplicates",
    # judges and LLM stages
    "supervised_prefilter": "transforms.judge.gate:SupervisedPrefilter",
    "distilled_prefilter": "transforms.judge.distilled:DistilledPrefilter",
    "ensemble": "transforms.judge.ensemble:EnsembleClassify",
    "cultural_tag": "transforms.llm.cultural:CulturalTagger",
    "sample": "transforms.llm.sampling:SampleGeneralAndCultural",
    "llm_transform": "transforms.llm.transform:LLMTransform",
    "llm_generate": "transforms.llm.generate:LLMGenerate",
    "translate": "transforms.translate.stage:TranslateStage",
    # PIQA items (every recipe)
    "pair_from_edit": "transforms.piqa.edit_pairs:MinimalPairFromEdit",
    "minimal_pair": "transforms.piqa.filters:MinimalPairFilter",
    "correct_from_label": "transforms.piqa.tables:CorrectFromLabel",
    "parse_table": "transforms.piqa.tables:ParseTableReply",
    "set_columns": "transforms.piqa.provenance:SetColumns",
    "drop_where": "transforms.piqa.provenance:DropWhere",
    "provenance_columns": "transforms.piqa.provenance:ProvenanceColumns",
    "balance_labels": "transforms.piqa.balance:BalanceLabels",
    "degenerate": "transforms.piqa.degenerate:DegenerateFilter",
    "item_language": "transforms.piqa.item_checks:ItemLanguageCheck",
    "prompt_length": "transforms.piqa.item_checks:PromptLengthCheck",
    "opening_variety": "transforms.piqa.item_checks:OpeningVariety",
    "contrast": "transforms.piqa.contrast:ContrastClassifier",
    "safety_screen": "transforms.piqa.safety:SafetyScreen",
    # recipe-only stages (one recipe uses them)
    "ko_pair_from_edit": "transforms.recipes.ko_piqa.items:KoreanPairFromEdit",
    "ko_structural_checks": "transforms.recipes.ko_piqa.items:StructuralChecks",
    "ja_constraints": "transforms.recipes.j_piqa.stages:JapaneseConstraintFilter",
    "duplicate_triplet": "transforms.piqa.piqa_sets:DuplicateTripletFilter",
    "paraphrase_duplicate": "transforms.recipes.j_piqa.stages:ParaphraseDuplicateFilter",
    "translation_set": "transforms.piqa.piqa_sets:TranslationSetSelector",
    "lexicon_candidates": "transforms.recipes.j_piqa.stages:LexiconCandidates",
    "unchanged_variant": "transforms.recipes.j_piqa.stages:UnchangedVariantFilter",
    "ru_contrast": "transforms.recipes.ru_piqa.contrast:RussianContrastFilter",
    "chunk_requests": "transforms.recipes.ru_piqa.stages:ChunkRequests",
    "piqa_slice": "transforms.recipes.pindic.stages:PiqaSliceSource",
    "open_labels": "transforms.recipes.pindic.stages:OpenMetaLabels",
    "label_rows": "transforms.recipes.pindic.stages:LabelRowsSource",
    "cluster_labels": "transforms.cluster.labels:ClusterLabels",
    "group_clusters": "transforms.cluster.labels:GroupClusters",
    "name_clusters": "transforms.recipes.pindic.stages:NameClusters",
    "classify_items": "transforms.recipes.pindic.stages:ClassifyItems",
    "generate_items": "transforms.recipes.pindic.stages:GenerateItems",
    "validate_items": "transforms.recipes.pindic.stages:ValidateGenerated",
    "copy_columns": "transforms.recipes.pindic.finish:CopyColumns",
    "attach_fixes": "transforms.recipes.pindic.finish:AttachFixes",
    "correct_translation": "transforms.recipes.pindic.finish:CorrectTranslation",
    "release_checks": "transforms.recipes.pindic.finish:ReleaseChecks",
    "release_columns": "transforms.recipes.pindic.finish:ReleaseColumns",
    "attach_chunks": "transforms.io.documents:AttachChunks",
}

# A stage's registered name is its class's `name` (tests/flow/test_stage_catalogue.py holds every entry to it).
# Until 2026-11-28 eleven classes called themselves otherwise in run manifests; readers of older manifests
# accept these names for one more release (`current_name`).
OLD_MANIFEST_NAMES: dict[str, tuple[str, ...]] = {
    "read": ("read_crawl",), "rows": ("read_rows",), "documents": ("read_documents",), "intake": ("writers_intake",),
    "prefilter": ("supervised_prefilter", "distilled_prefilter"), "pair_from_edit": ("ko_pair_from_edit",),
    "structural_checks": ("ko_structural_checks",), "classify": ("classify_items",),
    "generate": ("generate_items",), "correct": ("correct_translation",),
}
# Registry names replaced by another, accepted in recipe files for one release with a deprecation line.
DEPRECATED: dict[str, str] = {}

_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def known(name: str) -> bool:
    """A registered name, or a "module:Class" string (checked for shape only: nothing is imported)."""
    return name in STAGES or name in DEPRECATED or bool(_REF.match(name))


def stage_class(name: str) -> Any:
    """The class behind a registered name or a "module:Class" string, imported now."""
    if name in DEPRECATED:
        import warnings

        warnings.warn(f"stage {name!r} is now {DEPRECATED[name]!r}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        name = DEPRECATED[name]
    ref = STAGES.get(name, name)
    if not _REF.match(ref):
        raise KeyError(f"unknown stage {name!r}: not a registered name (piqaforge stages) nor 'module:Class'")
    try:
        return resolve_ref(ref, f"stage {name!r}")
    except AttributeError as err:
        raise KeyError(str(err)) from err


def working_dir_on_path() -> None:
    """Put the working directory on `sys.path` (last, so an installed package of the same name wins): a recipe
    names `my_stages:MyStage` from the folder it is run in, and the `piqaforge` entry point's `sys.path`
    starts at its own script's folder, not there."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _send_by_value(module: Any) -> None:
    """A module of the working directory travels to Ray's workers inside the pickled stage (by value), so a
    worker whose own working directory or `sys.path` lacks it still builds the stage."""
    import os
    import sys
    from pathlib import Path

    top_name = module.__name__.split(".")[0]
    if top_name in ("transforms", "jobs", "harness", "tests", "benchmarks"):
        return  # the project's own modules are installed wherever it runs
    origin = getattr(sys.modules.get(top_name), "__file__", None)
    if not origin:
        return
    top = Path(origin).resolve()
    folder = top.parent.parent if top.name == "__init__.py" else top.parent
    if folder != Path(os.getcwd()).resolve():
        return  # found on sys.path elsewhere: importable there as here
    try:
        from ray import cloudpickle
    except ImportError:
        return
    cloudpickle.register_pickle_by_value(module)


def resolve_ref(ref: str, what: str = "reference") -> Any:
    """The one resolver of 'module:attr' references (stages, hooks, output models), imported now; errors name
    the reference and what it is for."""
    if not _REF.match(ref):
        raise ValueError(f"{what} {ref!r} is not 'module:attr'")
    module_name, attr = ref.split(":")
    working_dir_on_path()
    try:
        module = importlib.import_module(module_name)
        _send_by_value(module)
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(f"{what} {ref!r} needs the module {err.name!r}, which is not installed in this "
                                  "environment (pyproject.toml's extras say which one brings it)", name=err.name) from err
    try:
        return getattr(module, attr)
    except AttributeError as err:
        raise AttributeError(f"{what} {ref!r}: {module_name} has no {attr!r}") from err
