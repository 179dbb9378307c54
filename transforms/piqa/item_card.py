"""The dataset card's section for human-written items (Tamil PIQA, and any team's human-items recipe).

* `card_statistics` gathers the figures: items, words per prompt, contrast types, safety flags per category
  and the agreement figures from review (a slot until review fills it).
* `human_items_card` is a release's `card.make` hook; `items_run_figures` a run's `reports.make` hook.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.piqa.contrast import contrast_distribution
from transforms.piqa.item_checks import agreement_figures, length_report, opening_report, summary


def card_statistics(table: pa.Table, *, agreement: dict[str, Any] | None = None, min_words: int = 25,
                    writer_column: str = "writer_id") -> dict[str, Any]:
    """The card's figures from a table of items (after intake, checks, screening and dedup).

    Uses the columns the stages write when present (`contrast_type`, `safety_flags`), so the card
    shows what the pipeline measured; `agreement` is the review's figures (percent agreement,
    Fleiss' kappa with its interval), recorded as given, or null until review has run.
    """
    cols = table.column_names
    goals = table.column("goal").to_pylist()
    langs = table.column("lang").to_pylist() if "lang" in cols else None
    stats: dict[str, Any] = {"items": table.num_rows, "prompt_length": length_report(goals, langs, min_words)}
    if "label" in cols:
        labels = table.column("label").to_pylist()
        stats["labels"] = {"0": labels.count(0), "1": labels.count(1)}
    if "contrast_type" in cols:
        stats["contrast_types"] = contrast_distribution(table.column("contrast_type").to_pylist())
        dist = [d for d in table.column("contrast_distance").to_pylist() if d is not None] \
            if "contrast_distance" in cols else []
        stats["contrast_distance"] = summary(dist)
    if "safety_flags" in cols:
        from transforms.piqa.safety import flag_counts

        stats["safety_flags"] = flag_counts(table.column("safety_flags").to_pylist())
    if writer_column in cols:
        stats["writers"] = dict(sorted(Counter(table.column(writer_column).to_pylist()).items()))
        stats["openings"] = opening_report([str(w) for w in table.column(writer_column).to_pylist()], goals)
    stats["agreement"] = agreement
    return stats


def _estimate_text(e: dict[str, Any] | None) -> str:
    if not e or e.get("value") is None:
        return f"undefined ({e.get('undefined')})" if e else "–"
    ci = e.get("ci")
    return f"{e['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def card_section(stats: dict[str, Any], title: str = "Items, checks, screening, review") -> str:
    """Markdown section of `card_statistics` for the dataset card (added to the release's README)."""
    pl = stats["prompt_length"]
    w = pl["words"]
    lines = [f"## {title}", "", "| | |", "|---|---|", f"| items | {stats['items']:,} |",
             f"| words per prompt | mean {w['mean']}, median {w['median']}, range {w['min']}–{w['max']} |",
             f"| prompts over {pl['min_words']} words | {pl['over']} of {pl['items']} ({pl['share_over']}) |"]
    if "contrast_types" in stats:
        lines.append("| contrast types | " + ", ".join(f"{k} {v}" for k, v in stats["contrast_types"].items()) + " |")
    if "safety_flags" in stats:
        sf = stats["safety_flags"]
        lines.append(f"| safety flags | {sf['items_flagged']} items: "
                     + ", ".join(f"{k} {v}" for k, v in sf["by_category"].items()) + " |")
    ag = stats.get("agreement")
    if ag:
        who = "LLM annotators (no person reviewed these items)" if ag.get("automatic") else "annotators"
        lines += [f"| review | {ag.get('annotators')} {who}, rule {(ag.get('rule') or {}).get('rule')}; "
                  f"{ag.get('kept')} of {ag.get('items')} kept |",
                  f"| percent agreement | {_estimate_text(ag.get('percent_agreement'))} |",
                  f"| Fleiss' kappa | {_estimate_text(ag.get('fleiss_kappa'))} |",
                  f"| Krippendorff's alpha | {_estimate_text(ag.get('krippendorff_alpha'))} |"]
    else:
        lines.append("| review | not reviewed |")
    return "\n".join(lines) + "\n"


def human_items_card(table: pa.Table, runs: dict[str, Any]) -> str:
    """The card section of a human-written recipe (a release's `card.make`): items, words per prompt,
    contrast types, safety flags, and the agreement of the review run among `runs`."""
    review = next((m.extras["review"] for m in reversed(list(runs.values())) if "review" in m.extras
                   and isinstance(m.extras["review"], dict) and "agreement" in m.extras["review"]), None)
    stats = card_statistics(table, agreement=agreement_figures(review))
    return card_section(stats).split("\n", 2)[2]




def neighbour_counts(table: Any) -> dict[str, Any]:
    levels = table.column("dup_level").to_pylist()
    suggested = table.column("dup_suggested_of").to_pylist()
    sug_levels = [lv for lv, s in zip(levels, suggested, strict=True) if s]
    return {"with_level": {lv: levels.count(lv) for lv in ("exact", "near", "semantic")},
            "suggested": {lv: sug_levels.count(lv) for lv in ("exact", "near", "semantic")},
            "pairs": [{"id": i, "of": s, "level": lv} for i, s, lv in
                      zip(table.column("id").to_pylist(), suggested, levels, strict=True) if s]}


def items_run_figures(manifest: Any, lake: Any, min_words: int = 25) -> dict[str, Any]:
    """A human-written items run's figures (a run report): the card statistics, the neighbours each level
    suggested, and the writers' feedback summary."""
    import json

    from transforms.core.lake import read_table

    table = read_table(Path(manifest.outputs["curated"]))
    stats: dict[str, Any] = card_statistics(table, min_words=min_words) if table.num_rows else {"items": 0}
    if "dup_level" in table.column_names:
        stats["neighbours"] = neighbour_counts(table)
    feedback = lake.run_dir(manifest.run_id) / "feedback" / "summary.json"
    if feedback.exists():
        stats["feedback"] = json.loads(feedback.read_text("utf-8"))
    return stats
