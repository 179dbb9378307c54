"""Russian PIQA: items grounded in source documents, checked, reviewed, released with provenance,
then evaluated zero-shot (docs/ru_piqa.md).

    piqaforge run ru-piqa [--set chunks=2 --set n_items=2 --set review=auto ...]

Runs, chained by `parents` (every stage's rows accounted for by the runner):

1. `<run>-<arm>` per generation arm: request rows `chunk × arm` (ProductSource) → the chunk's text and
   its document's metadata (AttachChunks) → grounded LLMGenerate (a JSON list of items; the no-source
   arm sees only a topic seed) → provenance columns (`model` = the arm's name, source document, grade).
2. `<run>-checks`: the arms' items → minimal contrast (type recorded) → duplicate triplets → review
   batch; the share over 25 words and the repeated openings go in the manifest.
3. `<run>`: the reviewed items → label balance → release (`ru-piqa` suite) with the provenance tables
   (per source, document, grade, model) in the card and the report → zero-shot evaluation.

An arm is one generation setup under an honest name: locally the one instruct model we have (Qwen2.5-
Coder-1.5B-Instruct) with different prompts and temperatures; on a cluster, other models by config
(jobs/configs/ru-piqa-cluster.yaml).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import xxhash
from pydantic import BaseModel, ConfigDict, Field

from jobs.config import JobConfig
from jobs.j_piqa import local_engine, resolve
from jobs.recipe_runs import release_step, review_step, run_chain, run_output
from transforms.core.lake import Lake, read_table
from transforms.core.rounds import UnionSource
from transforms.core.runner import init_ray
from transforms.io.documents import AttachChunks, DocumentSource
from transforms.io.sources import ProductSource
from transforms.llm.base import EngineConfig, GenerationParams
from transforms.llm.generate import LLMGenerate
from transforms.piqa.balance import BalanceLabels
from transforms.piqa.edit_pairs import MinimalPairFromEdit
from transforms.piqa.japanese import DuplicateTripletFilter
from transforms.piqa.provenance import (
    ProvenanceColumns,
    SetColumns,
    markdown_table,
    provenance_markdown,
    provenance_tables,
)
from transforms.piqa.russian import RussianContrastFilter, length_share, repeated_openings
from transforms.review.auto import AutoReviewConfig
from transforms.review.consensus import ConsensusRule

log = logging.getLogger("piqaforge")
ITEM_FIELDS = {"goal": "str", "sol1": "str", "sol2": "str", "label": "int"}
EDIT_FIELDS = {"goal": "str", "answer": "str", "word": "str", "wrong_word": "str"}
PROMPTS = {("list", True): "ru_piqa/grounded_generation", ("list", False): "ru_piqa/no_source",
           ("edit", True): "ru_piqa/grounded_item", ("edit", False): "ru_piqa/no_source_item"}


class Arm(BaseModel):
    """One generation setup; its `name` is what the release's `model` column says."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="Recorded as the items' `model` (say what it is: model, prompt, temperature).")
    grounded: bool = Field(True, description="False: the paper's no-source arm (a topic seed, no document).")
    engine: EngineConfig = Field(default_factory=local_engine, description="The model.")
    form: Literal["edit", "list"] = Field(
        "edit", description="edit: one item per reply (n_items samples per request), the model writes the goal, "
        "the correct solution, one word of it and a wrong replacement, and the pair is built by substitution "
        "(small and robust for a 1.5B model); list: n_items items as one JSON list (the paper's form).")
    prompt: str | None = Field(None, description="Prompt id; unset: ru_piqa/grounded_item or no_source_item "
                               "(edit), ru_piqa/grounded_generation or no_source (list).")
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=240, temperature=0.3))

    def prompt_id(self) -> str:
        return self.prompt or PROMPTS[(self.form, self.grounded)]


def _local_arms() -> list[Arm]:
    # 240 tokens: the v2 item prompts ask for a 20-30-word goal and a 10-15-word answer (~150 tokens of JSON)
    return [Arm(name="qwen2.5-coder-1.5b:grounded:t0.3", params=GenerationParams(max_tokens=240, temperature=0.3)),
            Arm(name="qwen2.5-coder-1.5b:grounded:t0.8", params=GenerationParams(max_tokens=240, temperature=0.8,
                                                                                   seed=1)),
            Arm(name="qwen2.5-coder-1.5b:no-source:t0.3", grounded=False,
                params=GenerationParams(max_tokens=240, temperature=0.3))]


def _eval_engines() -> dict[str, EngineConfig]:
    return {"qwen2.5-coder-1.5b": local_engine()}


class Config(JobConfig):
    dataset: str = "ru-piqa"
    documents: list[str] = Field(default_factory=lambda: ["lake/samples/ru_documents.jsonl"],
                                 description="Files or folders of .txt/.md/.jsonl documents (relative: from the "
                                 "working directory, else the repository).")
    subjects: list[str] = Field(default_factory=lambda: ["физика", "техника", "химия", "биология"],
                                description="Grounded arms draw chunks of documents with these subjects.")
    chunks: int = Field(1, ge=1, description="Chunks per grounded arm (seeded draw); topic seeds for no-source.")
    n_items: int = Field(2, ge=1, description="Items asked for per request (the paper: 50 per textbook).")
    seed: int = Field(0, description="Seed of the chunk draw and the label balance.")
    max_chars: int = Field(900, ge=100, description="Largest chunk, in characters (shorter prompts on CPU).")
    arms: list[Arm] = Field(default_factory=_local_arms, description="Generation arms (the paper: three models "
                            "with the document, one without).")
    contrast: RussianContrastFilter = Field(default_factory=RussianContrastFilter)
    review: Literal["auto", "export", "none"] = Field("auto", description="As in j-piqa: auto, export or none.")
    auto_review: AutoReviewConfig = Field(default_factory=lambda: AutoReviewConfig(engines=[local_engine()],
                                          n_boot=200), description="LLM annotators for review=auto.")
    consensus: ConsensusRule = Field(default_factory=lambda: ConsensusRule(rule="unanimous", relabel=False))
    evaluate: bool = Field(True, description="Zero-shot evaluation of the release.")
    eval_models: dict[str, EngineConfig] = Field(default_factory=_eval_engines, description="Models evaluated.")
    version: str | None = Field(None, description="Release version (default: the run id).")


def chunk_ids(config: Config, kind: str) -> list[str]:
    """A seeded draw of chunk ids: grounded arms from `subjects`, the no-source arm from topic seeds."""
    source = _documents(config, kind)
    rows = [r for r in source.rows().to_pylist() if r["drop_reason"] is None
            and (kind == "topic_seeds" or r["subject"] in config.subjects)]
    rows.sort(key=lambda r: xxhash.xxh3_64_intdigest(f"{config.seed}\x1f{r['id']}".encode()))
    if not rows:
        raise ValueError(f"no {kind} chunks with subjects {config.subjects} in {config.documents}")
    return [r["id"] for r in rows[:config.chunks]]


def _documents(config: Config, kind: str) -> DocumentSource:
    return DocumentSource(paths=[resolve(p) for p in config.documents], kinds=[kind], max_chars=config.max_chars)


def arm_chain(config: Config, arm: Arm) -> tuple[ProductSource, list[Any]]:
    """An arm's requests and stages (tests run it with an engine double)."""
    kind = "document" if arm.grounded else "topic_seeds"
    variables = {"title": "title", "subject": "subject", "grade": "grade", "chunk": "text"} \
        if arm.grounded else {"topic": "text"}
    cache = str(Path(config.lake).resolve() / "cache" / "llm")
    if arm.form == "edit":  # one item per reply, n_items samples (seed + k) per request
        generate = LLMGenerate(engine=arm.engine, prompt=arm.prompt_id(), variables=variables,  # type: ignore[arg-type]
                               output={"kind": "json", "fields": EDIT_FIELDS},  # type: ignore[arg-type]
                               params=arm.params.model_copy(update={"n": config.n_items}), cache_dir=cache,
                               chunk_size=1)  # each request's answers cached as soon as they are written
        build: list[Any] = [MinimalPairFromEdit(seed=config.seed, examples_from=arm.prompt_id())]
    else:
        fields = {**ITEM_FIELDS, **({"fact": "str"} if arm.grounded else {})}
        generate = LLMGenerate(engine=arm.engine, prompt=arm.prompt_id(),  # type: ignore[arg-type]
                               variables={"n_items": "n_items", **variables},
                               output={"kind": "json", "items": True, "fields": fields},  # type: ignore[arg-type]
                               params=arm.params, cache_dir=cache)
        build = []
    source = ProductSource(axes={"chunk_id": chunk_ids(config, kind)},
                           constants={"arm": arm.name, "n_items": config.n_items})
    return source, [AttachChunks(documents=_documents(config, kind)), generate, *build,
                    SetColumns(values={"model": arm.name, "lang": "ru", "is_cultural": False},
                               copy_columns={"source": "doc_source"})]


def check_stages(config: Config) -> list[Any]:
    return [config.contrast, DuplicateTripletFilter()]


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    lake = Lake(config.lake)
    run_id = run_id or Lake.new_run_id("ru-piqa")
    init_ray(config.ray_address, config.num_cpus)
    arms = []
    for k, arm in enumerate(config.arms):
        source, stages = arm_chain(config, arm)
        arms.append(run_chain(lake, config, f"{run_id}-arm{k}", source, stages, resume=resume))
    checks = run_chain(lake, config, f"{run_id}-checks", UnionSource(paths=[a.outputs["curated"] for a in arms]),
                       check_stages(config), resume=resume, parents=[a.run_id for a in arms])
    checked = read_table(Path(checks.outputs["curated"]))
    figures = {"length": length_share(checked), "openings": repeated_openings(checked, by="model"),
               "contrast_types": _counts(checked, "contrast_type")} if checked.num_rows else {"items": 0}
    checks.extras.update(figures)
    checks.write(lake.manifest_path(checks.run_id))
    reviewed = review_step(lake, config, checks.run_id)
    if reviewed is None:
        return {"run_id": run_id, "awaiting_review": f"review-{checks.run_id}"}
    final = run_chain(lake, config, run_id, run_output(lake, reviewed),
                      [ProvenanceColumns(), BalanceLabels(seed=config.seed)], resume=resume, parents=[reviewed])
    items = read_table(Path(final.outputs["curated"]))
    tables = provenance_tables(items, ("source", "source_document", "grade", "model"))
    md = provenance_markdown(tables) + (_figures_md(length_share(items), repeated_openings(items, by="model"))
                                        if items.num_rows else "\nNo items reached the release.\n")
    md += ("\nSource texts: the bundled documents are Russian Wikipedia paragraphs (XQuAD, CC BY-SA 4.0) and "
           "ruWorldTree questions used as topic seeds only (MERA, MIT), not the paper's textbooks, which are "
           "not openly licensed.\n")
    extras = {"provenance": {k: t.to_pylist() for k, t in tables.items()}, "checks": figures}
    result = release_step(lake, config, final, recipe="ru-piqa", card_md=md, extras=extras)
    if config.evaluate and result.get("released"):
        result["evaluation"] = evaluate(config, lake, Path(result["release"]), f"{run_id}-eval")
    return result


def evaluate(config: Config, lake: Lake, release: Path, run_id: str) -> dict[str, Any]:
    """Zero-shot, the paper's protocol: Russian system + user prompt, answer strictly 0 or 1; refusals and
    unparseable replies counted per model and left out of accuracy; the random baseline alongside."""
    import json

    from jobs import evaluate as ev

    cfg = ev.Config(release=str(release / "items.parquet"), name=config.dataset, lake=config.lake,
                    models=list(config.eval_models), engines=config.eval_models, modes=["generate"], swap=False,
                    prompts={"ru": "ru_piqa/eval"}, answer_cue=False, audit=False, export_lm_eval=False,
                    generation=GenerationParams(max_tokens=4, temperature=0.0))
    out = ev.run(cfg, run_id=run_id)
    summary = json.loads(Path(out["json"]).read_text(encoding="utf-8"))
    # every cell as text: the baseline row's accuracy is "uniform / majority", the models' a number
    rows = [{"model": r["model"], "accuracy": "-" if r["acc"] is None else f"{r['acc']:.2f}",
             "answered": f"{r['scored']}/{r['n']}",
             "refusals": r["refusal"], "unparsable": r["unparsable"] + r["empty"]} for r in ev.paper_rows(summary)]
    rb = summary["random_baseline"]
    rows.append({"model": "random baseline (uniform / majority label)",
                 "accuracy": f"{rb['uniform']:.2f} / {rb['majority'] if rb['majority'] is not None else '-'}",
                 "answered": "-", "refusals": 0, "unparsable": 0})
    card = release / "README.md"
    import pyarrow as pa

    card.write_text(card.read_text(encoding="utf-8") + "\n### Zero-shot evaluation\n\n"
                    + markdown_table(pa.Table.from_pylist(rows)) + "\n", encoding="utf-8")
    return {"run_id": run_id, "table": rows, "results": out["results"]}


def _counts(table: Any, column: str) -> dict[str, int]:
    from collections import Counter

    return dict(Counter(str(v) for v in table.column(column).to_pylist())) if column in table.column_names else {}


def _figures_md(length: dict[str, Any], openings: dict[str, dict[str, Any]]) -> str:
    lines = [f"\nItems over {length['min_words']} words (goal + shorter solution): {length['over']} of "
             f"{length['items']} ({(length['share_over'] or 0):.0%}), median {length['median_words']} words.\n",
             "\n| model | items | distinct openings | share repeated |", "|---|---|---|---|"]
    lines += [f"| {m} | {o['items']} | {o['distinct_openings']} | {(o['share_repeated'] or 0):.0%} |"
              for m, o in openings.items()]
    return "\n".join(lines) + "\n"
