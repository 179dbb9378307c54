"""J-PIQA: three parts, one release (docs/j_piqa.md).

    piqaforge run j-piqa [--set translation_n=6 --set review=auto ...]

Runs, each an ordinary run of the runner (every stage's rows accounted for), chained by `parents`:

1. `<run>-translation`: PIQA items → minimal pairs + seeded draw → preference judge (LLM, reason kept)
   → translate to Japanese (glosses keep the English) → Japanese constraint checks.
2. `<run>-lexical`: the translations → lexicon candidates → LLM lexical variants (one child per item)
   → unchanged variants dropped → constraint checks.
3. `<run>-direct` (quota rounds `<run>-direct-r<k>`): request rows per round → LLMGenerate (one JSON
   item per request, the pair built by substitution; or, `direct_form: table`, a CSV table of many
   items → ParseTableReply) → constraint checks → duplicate triplets; QuotaCap per category, and each
   later round asks only for the categories still missing (rebalancing).
4. `<run>-union`: the three parts → duplicate triplets → paraphrase duplicates → near-duplicate goals
   (the gate's own rule) → review batch; `review=auto` has LLM annotators fill it (`<run>-review`).
5. `<run>`: the reviewed items → provenance columns → label balance → release (`j-piqa` suite), with
   the paper's appendix columns written next to it (`j-piqa-appendix.csv`).

The run helpers (`run_chain`, `review_step`, `release_step`) are in jobs/recipe_runs.py, shared with
jobs/ru_piqa.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, model_validator

from jobs.config import JobConfig
from jobs.recipe_runs import direct_rows, release_step, review_step, run_chain, run_output
from transforms.core.lake import Lake, read_table
from transforms.core.rounds import QuotaConfig, UnionSource, run_quota_rounds
from transforms.core.runner import init_ray
from transforms.dedup.semantic import SemanticDedup
from transforms.io.sources import RowsSource
from transforms.llm.base import EngineConfig, GenerationParams
from transforms.llm.generate import LLMGenerate
from transforms.llm.prompts import load_prompt
from transforms.llm.stage import LLMTransform
from transforms.piqa.balance import BalanceLabels
from transforms.piqa.edit_pairs import MinimalPairFromEdit
from transforms.piqa.japanese import (
    DuplicateTripletFilter,
    JapaneseConstraintFilter,
    LexiconCandidates,
    ParaphraseDuplicateFilter,
    TranslationSetSelector,
    UnchangedVariantFilter,
    lexicon_topics,
)
from transforms.piqa.provenance import (
    DropWhere,
    ProvenanceColumns,
    SetColumns,
    balance_summary,
    category_balance,
    markdown_table,
    provenance_markdown,
    provenance_tables,
)
from transforms.piqa.release_stage import ItemsSource
from transforms.piqa.tables import CorrectFromLabel, ParseTableReply, release_columns
from transforms.review.auto import AutoReviewConfig
from transforms.review.consensus import ConsensusRule
from transforms.translate.config import LLMTranslateConfig
from transforms.translate.stage import TranslateStage

log = logging.getLogger("piqaforge")
ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder-1.5b-instruct"


def local_engine(**options: Any) -> EngineConfig:
    """The local instruct model (llama.cpp, Qwen2.5-Coder-1.5B-Instruct Q4_K_M). One thread: on a shared,
    oversubscribed machine llama.cpp's threads spin at barriers (measured: 2 threads ~8x slower here).
    The local stages ask one conversation per engine call (`chunk_size=1`), so every answer is cached as
    soon as it is written and a stopped run resumes without asking it again."""
    return EngineConfig(backend="llamacpp", model=QWEN, options={"threads": 1, "ctx_size": 4096, **options})


def _judge() -> LLMTransform:
    return LLMTransform(engine=local_engine(), prompt="j_piqa/preference_judge",  # type: ignore[arg-type]
                        variables={"goal": "goal", "sol1": "sol1", "sol2": "sol2", "correct": "correct"},
                        output={"kind": "json", "fields": {  # type: ignore[arg-type]
                            "verdict": {"type": "str", "choices": ["physical", "preference"]}, "reason": "str"}},
                        params=GenerationParams(max_tokens=64, temperature=0.0, seed=0), chunk_size=1)


def _translator() -> TranslateStage:
    return TranslateStage(engine=LLMTranslateConfig(engine=local_engine()), target_lang="ja",
                          columns=["goal_gloss", "sol1_gloss", "sol2_gloss"],
                          outputs={"goal_gloss": "goal", "sol1_gloss": "sol1", "sol2_gloss": "sol2"})


def _variants() -> LLMGenerate:
    return LLMGenerate(engine=local_engine(), prompt="j_piqa/lexical_variant",  # type: ignore[arg-type]
                       variables={"goal": "goal", "sol1": "sol1", "sol2": "sol2", "goal_en": "base_goal_en",
                                  "sol1_en": "base_sol1_en", "sol2_en": "base_sol2_en",
                                  "candidates": "lexicon_candidates"},
                       output={"kind": "json", "fields": {  # type: ignore[arg-type]
                           "goal": "str", "sol1": "str", "sol2": "str", "replacements": "list[str]",
                           "changed": "bool"}},
                       params=GenerationParams(max_tokens=160, temperature=0.0, seed=0), chunk_size=1)


Part = Literal["translation", "lexical", "direct"]


def _all_parts() -> list[Part]:
    return ["translation", "lexical", "direct"]


DIRECT_ITEM = {"question": "str", "answer": "str", "word": "str", "wrong_word": "str"}


def _direct_table() -> LLMGenerate:
    """Many items per request as a CSV table (the paper's form, `direct_form: table`)."""
    return LLMGenerate(engine=local_engine(), prompt="j_piqa/direct_generation",  # type: ignore[arg-type]
                       variables={"request": "request", "n_items": "n_items"},
                       params=GenerationParams(max_tokens=480, temperature=0.7, seed=0))


def _direct() -> LLMGenerate:
    """One item per request as schema-constrained JSON (the local profile; the cluster config asks for a
    CSV table of many items with j_piqa/direct_generation and `direct_form: table`)."""
    return LLMGenerate(engine=local_engine(), prompt="j_piqa/direct_item",  # type: ignore[arg-type]
                       variables={"category": "category", "topic": "topic", "request": "request"},
                       output={"kind": "json", "fields": DIRECT_ITEM},  # type: ignore[arg-type]
                       params=GenerationParams(max_tokens=96, temperature=0.8, seed=0), chunk_size=1)


class Config(JobConfig):
    dataset: str = "j-piqa"
    piqa: str = Field("lake/samples/piqa_valid_minimal_pairs.jsonl", description="English PIQA items (JSONL with "
                      "labels; the bundled file holds PIQA valid's 1,134 items whose solutions differ by at most two "
                      "words, with their `orig_line_no`; the full valid_labeled.jsonl works too); a relative path is "
                      "tried from the working directory, then from the repository.")
    lexicon: str = Field("lake/samples/ja_lexicon.jsonl", description="Japanese lexicon for lexical variants.")
    translation_n: int = Field(1, ge=1, description="PIQA items drawn for translation (the paper: 200; 1 "
                               "locally: a judge call and three translation calls each, 1-4 min apiece here).")
    translation_max_words: int | None = Field(12, ge=1, description="Longest goal or solution drawn for "
                                              "translation, in words (a 1.5B model keeps short pairs minimal "
                                              "more often); null: any (the cluster config).")
    seed: int = Field(0, description="Seed of the draw and of the label balance.")
    judge: LLMTransform = Field(default_factory=_judge, description="Preference judge (j_piqa/preference_judge).")
    translate: TranslateStage = Field(default_factory=_translator, description="English → Japanese.")
    constraints: JapaneseConstraintFilter = Field(default_factory=JapaneseConstraintFilter)
    lexical: LLMGenerate = Field(default_factory=_variants, description="Lexical variants (j_piqa/lexical_variant).")
    direct: LLMGenerate = Field(default_factory=_direct, description="Direct generation (j_piqa/direct_item, "
                                "or j_piqa/direct_generation with direct_form: table).")
    direct_form: Literal["item", "table"] = Field(
        "item", description="item: one request row per wanted item, one JSON item back (goal, correct solution, "
        "the word to change and its wrong replacement; the pair is built by substitution): small and robust "
        "for a 1.5B model. table: one request for many items as a CSV table (the paper's form).")
    categories: list[str] = Field(default_factory=lambda: ["台所", "掃除"],
                                  description="Categories of direct generation (balanced).")
    topic_categories: list[str] = Field(
        default_factory=lambda: ["tool", "everyday_object", "housing", "food_ingredient"],
        description="Lexicon categories whose entries become the topics of direct items (one per request, "
        "item form): without a topic the 1.5B model wrote the same item again and again.")
    per_category: int = Field(2, ge=1, description="Accepted direct items wanted per category.")
    overshoot: float = Field(1.0, ge=1, description="Ask for deficit × overshoot (checks and review drop some). "
                             "Locally 1: every item the checks pass is kept for review (measured: 4 of 4 passed "
                             "the constraint checks) instead of capped, and a short category gets another round.")
    max_rounds: int = Field(2, ge=1, description="Rebalancing rounds of direct generation.")
    paraphrase: ParaphraseDuplicateFilter = Field(default_factory=ParaphraseDuplicateFilter)
    goal_near_duplicates: float = Field(0.85, description="Cosine for near-duplicate goals (the suite's rule).")
    review: Literal["auto", "export", "none"] = Field(
        "auto", description="auto: LLM annotators fill the batch; export: write the batch and stop (people "
        "review it, then `piqaforge review import` and rerun with --resume); none: release unreviewed.")
    auto_review: AutoReviewConfig = Field(default_factory=lambda: AutoReviewConfig(engines=[local_engine()],
                                          n_boot=200), description="LLM annotators for review=auto.")
    consensus: ConsensusRule = Field(default_factory=lambda: ConsensusRule(rule="unanimous", relabel=False),
                                     description="relabel false: a consensus against the label drops the item.")
    version: str | None = Field(None, description="Release version (default: the run id).")
    run_parts: list[Part] = Field(
        default_factory=_all_parts, min_length=1,
        description="Parts to run (lexical needs translation); the slow test runs a part at a time.")

    @model_validator(mode="after")
    def _direct_follows_form(self) -> Config:
        if "lexical" in self.run_parts and "translation" not in self.run_parts:
            raise ValueError("run_parts: lexical variants are made from the translation part; add translation")
        if self.direct_form == "table" and "direct" not in self.model_fields_set:
            self.direct = _direct_table()  # the default stage of the other form
        return self


def resolve(path: str) -> str:
    p = Path(path)
    return str(p.resolve()) if p.is_absolute() or p.exists() else str(ROOT / p)


def parts(config: Config) -> dict[str, list[Any]]:
    """The three parts' chains (tests run them with an engine double). LLM answers are cached in
    <lake>/cache/llm, keyed by what was asked, so a rerun or --resume asks no question twice."""
    cache = str(Path(config.lake).resolve() / "cache" / "llm")
    judge, lexical, direct = (s.model_copy(update={"cache_dir": cache}) for s in (config.judge, config.lexical,
                                                                                    config.direct))
    engine = config.translate.engine.model_copy(update={"cache_dir": str(Path(cache).parent / "translate")})
    translate = config.translate.model_copy(update={"engine": engine})
    ja = {"lang": "ja", "is_cultural": False}
    return {
        "translation": [TranslationSetSelector(n=config.translation_n, seed=config.seed,
                                               max_words=config.translation_max_words), CorrectFromLabel(),
                        judge, DropWhere(column="verdict", values=["preference"], reason="personal_preference"),
                        SetColumns(copy_columns={"goal_gloss": "goal", "sol1_gloss": "sol1", "sol2_gloss": "sol2"}),
                        translate,
                        SetColumns(values={**ja, "source": "piqa_translation", "is_translation": True}),
                        config.constraints],
        "lexical": [SetColumns(copy_columns={"base_goal": "goal", "base_sol1": "sol1", "base_sol2": "sol2",
                                             "base_goal_en": "goal_gloss", "base_sol1_en": "sol1_gloss",
                                             "base_sol2_en": "sol2_gloss"}),
                    LexiconCandidates(lexicon=resolve(config.lexicon), seed=config.seed), lexical,
                    UnchangedVariantFilter(),
                    SetColumns(values={**ja, "is_cultural": True, "source": "piqa_lexical_variation",
                                       "is_translation": False, "goal_gloss": None, "sol1_gloss": None,
                                       "sol2_gloss": None}),
                    config.constraints],
        "direct": [direct, *([ParseTableReply()] if config.direct_form == "table" else
                             [MinimalPairFromEdit(goal_column="question", seed=config.seed,
                                                  examples_from=direct.prompt.id)]),
                   SetColumns(values={**ja, "is_cultural": True, "source": "piqa_original", "is_translation": False}),
                   config.constraints, DuplicateTripletFilter()],
    }


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    lake = Lake(config.lake)
    run_id = run_id or Lake.new_run_id("j-piqa")
    init_ray(config.ray_address, config.num_cpus)
    cfg = config.model_dump(mode="json")
    chains = parts(config)
    runs = {}  # part → its run, in the union's order: lexical variants, translations, direct items
    if "translation" in config.run_parts:
        tr = run_chain(lake, config, f"{run_id}-translation", ItemsSource(path=resolve(config.piqa)),
                       chains["translation"], resume=resume)
        if "lexical" in config.run_parts:
            runs["lexical"] = run_chain(lake, config, f"{run_id}-lexical", run_output(lake, tr.run_id),
                                        chains["lexical"], resume=resume, parents=[tr.run_id])
        runs["translation"] = tr

    topics = lexicon_topics(resolve(config.lexicon), config.topic_categories,
                            load_prompt(config.direct.prompt.id).system) if config.direct_form == "item" else None

    def make_round(k: int, deficits: dict[str, int], accepted: list[str]) -> tuple[Any, list[Any]]:
        return RowsSource(records=direct_rows(k, deficits, config.overshoot, config.direct_form, topics,
                                              config.seed)), chains["direct"]

    quota = QuotaConfig(group_column="category", quotas={c: config.per_category for c in config.categories},
                        max_rounds=config.max_rounds)
    direct = run_quota_rounds(job="j-piqa-direct", dataset=config.dataset, lake=lake, run_id=f"{run_id}-direct",
                              quota=quota, make_round=make_round, config=cfg, resume=resume) \
        if "direct" in config.run_parts else None
    if direct is not None:
        runs["direct"] = direct
    # Lexical variants first: where a variant's goal is a near duplicate of its translation's, the
    # culturally adapted item is the one kept (the gate allows only one of them).
    union = run_chain(lake, config, f"{run_id}-union", UnionSource(paths=[
        r.outputs["curated"] for r in runs.values()]),
        [DuplicateTripletFilter(), config.paraphrase,
         SemanticDedup(column="goal", threshold=config.goal_near_duplicates, keep="first")],
        resume=resume, parents=[r.run_id for r in runs.values()])
    reviewed = review_step(lake, config, union.run_id)
    if reviewed is None:
        return {"run_id": run_id, "awaiting_review": f"review-{union.run_id}"}
    final = run_chain(lake, config, run_id, run_output(lake, reviewed),
                      [ProvenanceColumns(), BalanceLabels(seed=config.seed)], resume=resume, parents=[reviewed])
    items = read_table(Path(final.outputs["curated"]))
    direct_items = items.filter(_is(items, "source", "piqa_original")) if items.num_rows else \
        pa.table({"category": pa.array([], pa.string())})
    balance = category_balance(direct_items, categories=config.categories, target_per_category=config.per_category)
    extras = {"category_balance": balance.to_pylist(), "balance_summary": balance_summary(balance),
              "rounds": direct.extras.get("rounds") if direct else None,
              "stop_reason": direct.extras.get("stop_reason") if direct else None,
              "parts": {p: int(sum(1 for s in items.column("source").to_pylist() if s == p)) if items.num_rows else 0
                        for p in ("piqa_translation", "piqa_lexical_variation", "piqa_original")}}
    tables = provenance_tables(items, ("source", "model"))
    md = provenance_markdown(tables) + "\n### Direct generation: categories\n\n" + markdown_table(balance) + "\n"
    result = release_step(lake, config, final, recipe="j-piqa", card_md=md, extras=extras)
    if not result.get("release"):
        return result
    appendix = release_columns(items)
    out = Path(result["release"]) / "j-piqa-appendix.csv"
    appendix.to_pandas().to_csv(out, index=False)
    return {**result, "appendix": str(out)}


def _is(table: Any, column: str, value: str) -> Any:
    return pa.array([v == value for v in table.column(column).to_pylist()])
