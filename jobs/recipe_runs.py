"""Run helpers the recipe jobs share (jobs/j_piqa.py, jobs/ru_piqa.py): one runner run with its report
and the conservation law checked from disk, an earlier run's output as a source, the review step
(auto / export / none) and the release step (gate, card tables, report).

They live under jobs/, not transforms/, because they drive the release job (jobs/release.py). The
J-PIQA direct part's request rows (`direct_request`, `direct_rows`) are here too, to keep
jobs/j_piqa.py short.
"""

from __future__ import annotations

import json
import sys
from html import escape
from pathlib import Path
from typing import Any

from jobs.config import JobConfig
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.core.rounds import UnionSource
from transforms.core.runner import conservation_errors, run_pipeline


def run_output(lake: Lake, run_id: str) -> UnionSource:
    """An earlier run's curated rows as a source; unlike RunSource, a run that kept nothing gives an
    empty source (every later stage then sees 0 rows) instead of an error. The caller names the run
    among its `parents`."""
    return UnionSource(paths=[RunManifest.load(lake.manifest_path(run_id)).outputs["curated"]])


def run_chain(lake: Lake, config: JobConfig, run_id: str, source: Any, stages: list[Any], *, resume: bool = False,
              parents: list[str] | None = None) -> RunManifest:
    """One run of the runner; its report is written and the conservation law checked from disk."""
    from transforms.core.report import write_report

    manifest = run_pipeline(job=config.dataset, dataset=config.dataset, source=source, stages=stages, lake=lake,
                            config=config.model_dump(mode="json"), run_id=run_id, resume=resume,
                            parents=parents or [])
    if errors := conservation_errors(manifest):
        raise RuntimeError(f"run {run_id}: rows not accounted for: {errors}")
    write_report(manifest, lake.run_dir(run_id) / "report.html")
    return manifest


def review_step(lake: Lake, config: Any, items_run: str) -> str | None:
    """The review of `items_run`'s curated items: the reviewed run's id, or None while people review."""
    from transforms.review.auto import auto_review
    from transforms.review.batch import export_run

    if config.review == "none" or RunManifest.load(lake.manifest_path(items_run)).stages[-1].rows_kept == 0:
        return items_run  # nothing to review: the release gate reports the empty table
    from transforms.review.batch import load_batch

    batch = f"review-{items_run}"
    if (lake.root / "review" / batch / "batch.json").exists():
        record, _ = load_batch(lake, batch)
        if record.imports:  # reviewed already (a resumed run, or people's judgments imported)
            return str(record.imports[-1]["run_id"])
    else:
        export_run(lake, items_run, to="csv", annotators=config.auto_review.annotators, batch=batch,
                   rule=config.consensus)
    if config.review == "export":
        print(f"{config.dataset}: review batch {batch} written under {lake.root / 'review' / batch}; fill it, run "
              f"`piqaforge review import {batch} --from FILE`, then rerun with --resume", file=sys.stderr)
        return None
    _, manifest = auto_review(lake, batch, config.auto_review)  # the review run, its parent items_run
    return manifest.run_id


def release_step(lake: Lake, config: Any, final: RunManifest, *, recipe: str, card_md: str,
                 extras: dict[str, Any]) -> dict[str, Any]:
    """Gate and write the release, then add the job's tables to the card, the run report and manifest."""
    from jobs import release
    from transforms.core.report import write_report

    if final.stages[-1].rows_kept == 0:  # nothing to gate: say so instead of failing inside the release
        final.extras.update({**extras, "release": "no items reached the release"})
        final.write(lake.manifest_path(final.run_id))
        print(f"{config.dataset}: no items reached the release (see {lake.run_dir(final.run_id)} and the earlier "
              "runs' reports for where they were dropped)", file=sys.stderr)
        return {"run_id": final.run_id, "released": False, "release": None, "exit_code": 1}
    result = release.run(release.Config(input=final.outputs["curated"], recipe=recipe, dataset=config.dataset,
                                        lake=config.lake, version=config.version or final.run_id),
                         run_id=f"{final.run_id}-release")
    card = Path(result["release"]) / "README.md"
    card.write_text(card.read_text(encoding="utf-8") + "\n## Recipe tables\n\n" + card_md, encoding="utf-8")
    final.extras.update({**extras, "release": result})
    final.write(lake.manifest_path(final.run_id))
    report = lake.run_dir(final.run_id) / "report.html"
    write_report(final, report)
    html = report.read_text(encoding="utf-8")
    section = f"<h2>Recipe tables</h2><pre>{escape(card_md)}</pre><pre>{escape(json.dumps(extras, ensure_ascii=False, indent=1, default=str))}</pre>"
    report.write_text(html.replace("</body>", section + "</body>"), encoding="utf-8")
    return {"run_id": final.run_id, **result, "report": str(report)}


ROUND_STRIDE = 32  # topics per round before the next round's start (local rounds ask for at most 16)


def direct_request(deficits: dict[str, int], overshoot: float) -> tuple[str, int]:
    asks = {c: int(-(-d * overshoot // 1)) for c, d in deficits.items()}
    return "\n".join(f"カテゴリー「{c}」: {n} 問" for c, n in asks.items()), sum(asks.values())


def direct_rows(k: int, deficits: dict[str, int], overshoot: float, form: str, topics: list[str] | None = None,
                seed: int = 0) -> list[dict[str, Any]]:
    """Round k's request rows: one row asking for every missing item (table), or one row per item (item;
    its `request` numbers the item so each asks a distinct question, whose answer is cached apart, and
    its `topic` is an everyday object from `topics`, dealt in a seeded order so no two requests of a run
    share one while a round asks for at most ROUND_STRIDE and topics last; the category's name when no topics are given)."""
    if form == "table":
        request, n_items = direct_request(deficits, overshoot)
        return [{"id": f"direct-r{k}", "request": request, "n_items": n_items}]
    asks = {c: int(-(-d * overshoot // 1)) for c, d in deficits.items()}
    rows = [{"id": f"direct-r{k}-{c}-{j}", "category": c, "request": f"ラウンド {k}、{c} の {j + 1} 問目", "n_items": 1}
            for c, n in asks.items() for j in range(n)]
    import xxhash

    deck = sorted(topics or [], key=lambda t: xxhash.xxh3_64_intdigest(f"{seed}\x1f{t}".encode()))
    start = (k - 1) * ROUND_STRIDE  # round k starts further down the deck: rounds do not share topics
    for i, row in enumerate(rows):
        row["topic"] = deck[(start + i) % len(deck)] if deck else row["category"]
    return rows
