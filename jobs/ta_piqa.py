"""Tamil PIQA: writers' files → checks → safety screen → neighbours → four annotators → release.

    piqaforge run ta-piqa                                  # items run + a review batch (awaiting_review)
    piqaforge run ta-piqa --set review=auto                # ... LLM annotators fill it, to the release
    piqaforge review import <batch> --from filled.csv      # people's judgments → a review run
    piqaforge run ta-piqa --set review_run=<review run>    # confirmed duplicates → release

Run 1 (`ta-piqa`): WritersIntake (bad rows rejected, per-writer feedback under
`<lake>/runs/<run>/feedback/`) → prompt length → openings → contrast → safety screen (lexicon; the
LLM screen when `safety_llm`) → ReviewNeighbours (exact, MinHash, e5 + FAISS). It is exported as a
review batch for four annotators with the unanimous rule; `context.csv` (flags and neighbours per
item) and `guidelines.md` (the four criteria) go into the batch folder next to what reviewers fill.
Run 3 (`ta-piqa-final`, parent: the review run): annotators' duplicate votes → confirmed duplicates
dropped → release gated by the `ta-piqa` suite, with the Tamil card section (items, words per
prompt, contrast types, safety flags, agreement from the review run).
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from jobs.config import ConfigError, JobConfig
from transforms.core.lake import Lake
from transforms.dedup.review_neighbours import ReviewNeighbours
from transforms.io.writers_intake import WriterColumns
from transforms.llm.base import EngineConfig, GenerationParams
from transforms.piqa.contrast import ContrastClassifier
from transforms.piqa.item_checks import OpeningVariety, PromptLengthCheck
from transforms.review.auto import AutoReviewConfig
from transforms.review.consensus import ConsensusRule

log = logging.getLogger("piqaforge")
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "lake" / "samples" / "ta_items"
Level = Literal["exact", "near", "semantic"]


def _qwen() -> EngineConfig:
    return EngineConfig(backend="llamacpp", model="qwen2.5-coder-1.5b-instruct", name="qwen1.5b", params_b=1.5)


def _annotator_engines() -> AutoReviewConfig:
    # 4 annotators = 2 local models x the 2 review prompts (review/en, review/en_strict)
    gemma = EngineConfig(backend="llamacpp", model="gemma3-270m", name="gemma270m", params_b=0.27)
    return AutoReviewConfig(engines=[_qwen(), gemma], prompts=["review/en", "review/en_strict"], annotators=4,
                            batch_size=8)


class Config(JobConfig):
    dataset: str = "ta-piqa"
    input: str | None = Field(None, description="Folder (or file) of writer files; unset: the bundled "
                              "lake/samples/ta_items/ (XCOPA-ta dealt to four pseudo writers).")
    records: dict[str, str] = Field(default_factory=dict, description="Slice of each file read (intake "
                                    "`records`: file name or '*' → '1-30,151-159'); {} reads everything.")
    columns: WriterColumns = Field(default_factory=WriterColumns, description="Column mapping of the files.")
    file_columns: dict[str, WriterColumns] = Field(default_factory=dict, description="Per-file mappings.")
    prompt_length: PromptLengthCheck = Field(default_factory=PromptLengthCheck)
    openings: OpeningVariety = Field(default_factory=OpeningVariety)
    contrast: ContrastClassifier = Field(default_factory=ContrastClassifier)
    safety_llm: bool = Field(False, description="Also ask an LLM (prompt ta_piqa/safety) per item; off by default "
                             "here: the local 1.5B model takes tens of seconds per item on 2 busy cores.")
    safety_engine: EngineConfig = Field(default_factory=_qwen, description="Engine of the LLM safety screen.")
    safety_params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=120))
    neighbours: ReviewNeighbours = Field(default_factory=ReviewNeighbours, description="Three-level neighbours.")
    review: Literal["export", "auto"] = Field("export", description="export: a batch for people, then stop "
                                              "(awaiting_review); auto: LLM annotators fill it (no person).")
    review_to: Literal["csv", "labelstudio"] = Field("csv", description="Batch format for people.")
    annotators: int = Field(4, ge=1, description="Annotators per item (the paper: 4).")
    consensus: ConsensusRule = Field(default_factory=lambda: ConsensusRule(rule="unanimous", relabel=False),
                                     description="4 of 4; a label the annotators dispute is dropped, not flipped "
                                     "(writers set it).")
    review_limit: int | None = Field(None, ge=1, description="Export at most this many items (first in order).")
    auto: AutoReviewConfig = Field(default_factory=_annotator_engines, description="LLM annotators (review=auto).")
    duplicate_votes: int | None = Field(None, ge=1, description="Annotators whose comment `duplicate [of <id>]` "
                                        "confirms a duplicate; unset: all of the item's annotators.")
    confirm_levels: list[Level] = Field(default_factory=lambda: list[Level](["exact"]),
                                        description="Neighbour levels dropped without a reviewer's vote.")
    review_run: str | None = Field(None, description="A review run (`piqaforge review import`) to finish.")
    release: bool = Field(True, description="Gate and release the final run (suite ta-piqa).")
    release_version: str | None = Field(None, description="Release version (default: today's UTC date).")


# -- run 1: intake and checks ----------------------------------------------------------------------------
def item_stages(config: Config, lake: Lake, run_id: str) -> tuple[Any, list[Any]]:
    from transforms.io.writers_intake import WritersIntake
    from transforms.piqa.safety import SafetyScreen, default_llm_call

    intake = WritersIntake(path=str(config.input or SAMPLE), columns=config.columns,
                           file_columns=config.file_columns, records=config.records,
                           feedback_dir=str(lake.run_dir(run_id) / "feedback"))
    llm = default_llm_call().model_copy(update={"engine": config.safety_engine, "params": config.safety_params}) \
        if config.safety_llm else None
    safety = SafetyScreen(llm=llm, cache_dir=str(lake.root / "cache" / "llm"), chunk_size=4)
    return intake, [config.prompt_length, config.openings, config.contrast, safety, config.neighbours]


def make_items(config: Config, lake: Lake, run_id: str, resume: bool) -> dict[str, Any]:
    from transforms.core.lake import read_table
    from transforms.core.manifest import RunManifest
    from transforms.core.runner import run_pipeline
    from transforms.piqa.item_checks import card_statistics

    source, stages = item_stages(config, lake, run_id)
    manifest = run_pipeline(job="ta-piqa", dataset=config.dataset, source=source, stages=stages, lake=lake,
                            config={"recipe": "ta-piqa", **config.model_dump()}, run_id=run_id, resume=resume)
    table = read_table(Path(manifest.outputs["curated"]))
    feedback = lake.run_dir(run_id) / "feedback"
    stats = card_statistics(table, min_words=config.prompt_length.min_words)
    stats["neighbours"] = neighbour_counts(table)
    stats["feedback"] = json.loads((feedback / "summary.json").read_text("utf-8"))
    manifest = RunManifest.load(lake.manifest_path(run_id))
    manifest.extras["ta_piqa"] = stats
    manifest.outputs["feedback"] = str(feedback)
    manifest.write(lake.manifest_path(run_id))
    return stats


def neighbour_counts(table: Any) -> dict[str, Any]:
    levels = table.column("dup_level").to_pylist()
    suggested = table.column("dup_suggested_of").to_pylist()
    sug_levels = [lv for lv, s in zip(levels, suggested, strict=True) if s]
    return {"with_level": {lv: levels.count(lv) for lv in ("exact", "near", "semantic")},
            "suggested": {lv: sug_levels.count(lv) for lv in ("exact", "near", "semantic")},
            "pairs": [{"id": i, "of": s, "level": lv} for i, s, lv in
                      zip(table.column("id").to_pylist(), suggested, levels, strict=True) if s]}


# -- the review batch: what reviewers see next to the items ----------------------------------------------
GUIDELINES = """# Tamil PIQA review: four criteria, one verdict

Judge each item on four criteria and give one verdict (column `verdict`):

1. Linguistic accuracy: natural, correct Tamil. Fixable wording: `needs_edit` and write the fix.
2. Commonsense grounding: the goal is about handling everyday physical objects; if not, `not_physical`.
3. Constraints met: no harm, no stereotype, no offence (see the safety flags in context.csv); if not, `unsafe`.
4. Exactly one correct solution: `sol1` or `sol2`; if neither is right, `both_wrong`.

An item is kept only when all {n} annotators give the same verdict ({rule}).
Duplicates: context.csv lists each item's nearest items (exact, near, semantic) and a suggestion.
If the item repeats another one, write `duplicate of <item id>` (or just `duplicate` for the
suggested one) in `comment`; it is dropped when all annotators say so.
"""


def write_review_context(lake: Lake, batch: str) -> Path:
    """`context.csv` (flags and neighbours per item, with the neighbours' goals) and `guidelines.md`."""
    import pyarrow.parquet as pq

    from transforms.review.batch import batch_dir, load_batch

    record, _ = load_batch(lake, batch)
    folder = batch_dir(lake, batch)
    items = pq.read_table(folder / "items.parquet").to_pylist()
    goals = {r["id"]: r["goal"] for r in items}

    def near(rows: list[dict[str, Any]] | None, key: str = "score") -> str:
        return " | ".join(f"{n['id']} ({n[key]:.3f}): {goals.get(n['id'], '')}" for n in rows or [])

    with open(folder / "context.csv", "w", encoding="utf-8-sig", newline="") as f:
        w = csv.writer(f)
        w.writerow(["item_id", "writer", "goal_words", "short_prompt", "repeated_opening", "contrast",
                    "safety_flags", "suggested_duplicate_of", "level", "exact", "near (jaccard)",
                    "semantic (margin)"])
        for r in items:
            flags = "; ".join(f"{x['category']} ({x['source']}: {x['evidence']})" for x in r["safety_flags"] or [])
            w.writerow([r["id"], r["writer_id"], r["goal_words"], r["short_prompt"], r["repeated_opening"],
                        f"{r['contrast_type']} ({r['contrast_distance']})", flags, r["dup_suggested_of"] or "",
                        r["dup_level"] or "", " | ".join(r["dup_exact"] or []), near(r["dup_near"]),
                        near(r["dup_semantic"], "margin")])
    (folder / "guidelines.md").write_text(GUIDELINES.format(n=len(record.annotators), rule=record.rule.rule),
                                          "utf-8")
    return folder


# -- run 3: duplicates confirmed, release, card -----------------------------------------------------------
def finish(config: Config, lake: Lake, review_run: str, resume: bool) -> dict[str, Any]:
    import jobs.release as release_job
    from transforms.core.lake import read_table
    from transforms.core.manifest import RunManifest
    from transforms.core.runner import run_pipeline
    from transforms.dedup.review_neighbours import ConfirmedDuplicates, ReviewerDuplicates
    from transforms.io.sources import RunSource
    from transforms.piqa.item_checks import agreement_figures, card_statistics

    review_path = lake.manifest_path(review_run)
    if not review_path.exists():
        raise ConfigError(f"review run {review_run!r} not found at {review_path}")
    review_manifest = RunManifest.load(review_path)
    review = review_manifest.extras.get("review")
    final_id = f"{review_run}-final"
    stages = [ReviewerDuplicates(min_votes=config.duplicate_votes),
              ConfirmedDuplicates(auto_confirm=list(config.confirm_levels))]
    manifest = run_pipeline(job="ta-piqa-final", dataset=config.dataset,
                            source=RunSource(lake=str(lake.root), run_id=review_run), stages=stages, lake=lake,
                            config={"recipe": "ta-piqa", **config.model_dump()}, run_id=final_id, resume=resume,
                            parents=[review_run])
    table = read_table(Path(manifest.outputs["curated"]))
    card = card_statistics(table, agreement=agreement_figures(review), min_words=config.prompt_length.min_words) \
        if table.num_rows else dict[str, Any](items=0, agreement=agreement_figures(review))
    manifest = RunManifest.load(lake.manifest_path(final_id))
    manifest.extras["card"] = card
    manifest.write(lake.manifest_path(final_id))
    out: dict[str, Any] = {"review_run": review_run, "final_run": final_id, "items": card["items"],
                           "agreement": _agreement_line(card["agreement"])}
    if not table.num_rows:  # nothing passed review: no release to gate
        out.update({"released": False, "exit_code": 1, "note": "no item passed review; nothing released"})
        return out
    if not config.release:
        return out
    release = release_job.run(release_job.Config(input=f"run:{final_id}", recipe="ta-piqa", dataset=config.dataset,
                                                 lake=str(lake.root), version=config.release_version),
                              run_id=f"{final_id}-release")
    sample = any(_read_sample(lake, p) for p in review_manifest.parents)
    add_card_section(Path(release["release"]), card, SAMPLE_NOTE if sample else None)
    out.update({"release": release["release"], "released": release["released"], "checks": release["checks"],
                "exit_code": release["exit_code"]})
    return out


def add_card_section(release_dir: Path, card: dict[str, Any], note: str | None = None) -> None:
    """The Tamil statistics into the release's card (README.md, before the gate) and `card_stats.json`."""
    from transforms.piqa.item_checks import card_section

    (release_dir / "card_stats.json").write_text(json.dumps(card, indent=2, ensure_ascii=False), "utf-8")
    readme = release_dir / "README.md"
    text = readme.read_text("utf-8")
    section = card_section(card) + (f"\n{note}\n" if note else "") + "\n"
    marker = "## Quality gate"
    readme.write_text(text.replace(marker, section + marker, 1) if marker in text else text + "\n" + section,
                      "utf-8")


SAMPLE_NOTE = ("Data: the bundled sample, XCOPA-ta (COPA translated into Tamil; cambridgeltl/xcopa, CC BY 4.0) "
               "recast as PIQA-shaped items by scripts/build_ta_items.py and dealt to four pseudo writers. It is "
               "not PIQA and was not written by writers for this benchmark; docs/ta_piqa.md.")


def _read_sample(lake: Lake, items_run: str) -> bool:
    """Whether the items run read the bundled sample (its card then says what that data is)."""
    from transforms.core.manifest import RunManifest

    path = lake.manifest_path(items_run)
    used = RunManifest.load(path).config.get("input") if path.exists() else None
    return path.exists() and (used is None or Path(used).resolve() == SAMPLE)


def _agreement_line(ag: dict[str, Any] | None) -> str:
    from transforms.piqa.item_checks import _estimate_text

    if not ag:
        return "not reviewed"
    return (f"percent agreement {_estimate_text(ag['percent_agreement'])}, Fleiss' kappa "
            f"{_estimate_text(ag['fleiss_kappa'])} ({ag['annotators']} annotators, {ag['kept']} of {ag['items']} kept)")


def run(config: Config, *, run_id: str | None = None, resume: bool = False) -> dict[str, Any]:
    from transforms.core.runner import init_ray
    from transforms.review.auto import auto_review
    from transforms.review.batch import batch_dir, export_run, load_batch

    lake = Lake(config.lake).create()
    init_ray(config.ray_address, config.num_cpus)
    if config.review_run:
        return finish(config, lake, config.review_run, resume)
    items_run = run_id or Lake.new_run_id("ta-piqa")
    stats = make_items(config, lake, items_run, resume)
    batch = f"review-{items_run}"
    if resume and (batch_dir(lake, batch) / "batch.json").exists():  # exported before the run was cut short
        record, _ = load_batch(lake, batch)
    else:
        record = export_run(lake, items_run, to=config.review_to, annotators=config.annotators, batch=batch,
                            rule=config.consensus, limit=config.review_limit)
        write_review_context(lake, record.batch)
    out: dict[str, Any] = {"items_run": items_run, "items": stats["items"],
                           "rejected": sum(w["rejected"] for w in stats["feedback"].values()),
                           "feedback": str(lake.run_dir(items_run) / "feedback"),
                           "safety": stats["safety_flags"]["by_category"],
                           "neighbours": stats["neighbours"]["suggested"], "batch": record.batch}
    if config.review == "export":
        out["status"] = "awaiting_review"
        out["next"] = (f"fill {lake.root / 'review' / record.batch}/review.csv (see guidelines.md, context.csv), "
                       f"then `piqaforge review import {record.batch} --from FILLED.csv --lake {lake.root}` and "
                       f"`piqaforge run ta-piqa --lake {lake.root} --set review_run=<the review run>`")
        return out
    auto = config.auto.model_copy(update={"annotators": config.annotators})
    _, review_manifest = auto_review(lake, record.batch, auto)
    out.update(finish(config, lake, review_manifest.run_id, resume))
    return out
