"""The figures every PIndicQA run reports: rounds per locale, diversity, translation and correction.

* `round_table`: per round and locale, items generated, dropped by validation, by novelty
  (`near_existing`), by the quota cap, and accepted; acceptance and novelty-drop rates.
* `diversity`: distinct-1/2 of the generated goals and their mean pairwise cosine (e5 embeddings).
* `correction_figures`: per language, chrF of the machine translation against its correction (how
  much the correction changed) and the edit rate (share of items changed, mean character change).
"""

from __future__ import annotations

import difflib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from transforms.core.lake import parquet_files, read_table
from transforms.core.manifest import RunManifest


def _rows(folder: str | None, columns: list[str]) -> list[dict[str, Any]]:
    if not folder or not parquet_files(Path(folder)):
        return []
    table = read_table(Path(folder))
    return table.select([c for c in columns if c in table.schema.names]).to_pylist()


def round_table(manifests: list[RunManifest], locale_column: str = "locale") -> list[dict[str, Any]]:
    """One row per (round, locale): generated, dropped per stage, accepted, rates."""
    out = []
    for k, m in enumerate(manifests, 1):
        per: dict[str, Counter[str]] = defaultdict(Counter)
        for rec in m.stages:
            kept = _rows(rec.outputs.get("kept"), [locale_column])
            dropped = _rows(rec.outputs.get("rejected"), [locale_column, "drop_reason"])
            if rec.name in ("generate_items", "generate"):  # "generate": manifests before 2026-11-28
                for r in kept + dropped:
                    per[str(r.get(locale_column))]["generated"] += 1
                for r in dropped:  # invalid items and requests that yielded nothing
                    per[str(r.get(locale_column))]["invalid_output"] += 1
            elif rec.name in ("pair_from_edit", "validate_items", "novelty", "quota_cap"):
                # an edit that cannot be applied is a validation drop like two equal solutions
                key = "validate_items" if rec.name == "pair_from_edit" else rec.name
                for r in dropped:
                    per[str(r.get(locale_column))][key] += 1
        accepted = Counter(str(r.get(locale_column)) for r in _rows(m.outputs.get("curated"), [locale_column]))
        for loc in sorted(set(per) | set(accepted)):
            c = per[loc]
            candidates = c["generated"] - c["invalid_output"]
            valid = candidates - c["validate_items"]
            out.append({"round": k, "run_id": m.run_id, "locale": loc, "generated": c["generated"],
                        "invalid_output": c["invalid_output"], "validation_drops": c["validate_items"],
                        "novelty_drops": c["novelty"], "quota_full": c["quota_cap"], "accepted": accepted[loc],
                        "acceptance_rate": round(accepted[loc] / candidates, 4) if candidates > 0 else None,
                        "novelty_drop_rate": round(c["novelty"] / valid, 4) if valid > 0 else None})
    return out


def distinct_n(texts: list[str], n: int) -> float | None:
    grams: list[tuple[str, ...]] = []
    for t in texts:
        words = str(t).lower().split()
        grams += [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return round(len(set(grams)) / len(grams), 4) if grams else None


def mean_pairwise_cosine(vectors: np.ndarray) -> float | None:
    """Mean cosine over distinct pairs of L2-normalised rows (lower = more diverse)."""
    n = len(vectors)
    if n < 2:
        return None
    sims = vectors @ vectors.T
    return round(float((sims.sum() - np.trace(sims)) / (n * (n - 1))), 4)


def diversity(goals: list[str], embed: Any) -> dict[str, Any]:
    vectors = embed(goals) if goals else np.zeros((0, 1), np.float32)
    return {"n": len(goals), "distinct_1": distinct_n(goals, 1), "distinct_2": distinct_n(goals, 2),
            "mean_pairwise_cosine": mean_pairwise_cosine(vectors)}


def char_change(a: str, b: str) -> float:
    """1 − difflib's similarity ratio: 0 for identical texts, 1 for nothing in common."""
    return 1.0 - difflib.SequenceMatcher(None, a, b).ratio()


def correction_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per language: chrF(MT, correction), share of items the correction changed, mean change."""
    from transforms.core.deps import require

    sacrebleu = require("sacrebleu", "mt", "chrF of machine translation vs correction")
    by_lang: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_lang[str(r.get("lang"))].append(r)
    out = {}
    for lang, items in sorted(by_lang.items()):
        hyps, refs, changed, change = [], [], 0, []
        for r in items:
            pairs = [(str(r.get(f"translated_{f}") or ""), str(r.get(f"corrected_{f}") or ""))
                     for f in ("goal", "sol1", "sol2")]
            hyps += [p[0] for p in pairs]
            refs += [p[1] for p in pairs]
            changed += any(a != b for a, b in pairs)
            change += [char_change(a, b) for a, b in pairs]
        out[lang] = {"items": len(items),
                     "chrf_mt_vs_corrected": round(float(sacrebleu.corpus_chrf(hyps, [refs]).score), 2),
                     "edit_rate": round(changed / len(items), 4),
                     "mean_char_change": round(float(np.mean(change)), 4)}
    return out
