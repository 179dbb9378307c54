"""`context.csv` beside a review batch of human-written items: per item its writer, the checks' flags
(prompt length, repeated openings, contrast type, safety flags) and its nearest items at each level
(exact, near, semantic) with their goals, so a reviewer sees everything on one line per item."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from transforms.core.lake import Lake


def write_review_context(lake: Lake, batch: str) -> Path:
    """`context.csv`: flags and neighbours per item, with the neighbours' goals."""
    import pyarrow.parquet as pq

    from transforms.review.batch import batch_dir

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
    return folder
