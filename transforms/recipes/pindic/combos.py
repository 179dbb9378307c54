"""Label combinations: one FAISS index of goals per non-empty combination, seeded sampling, exemplars.

A combination is one class per category (Domain, Core_Principle, Key_Properties_Materials,
Action_Type). Nearly all of the 19 × 32 × 39 × 32 possible combinations are empty; only the ones
the English pool uses get an index. A sampled combination takes its exemplars from its own index;
when it is empty they come from the *nearest non-empty combination*: the one sharing the most
labels with it (0-4 categories equal), ties broken by the larger index, then by name. Which
combination served, and how many labels it shares, is recorded on every request row.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from transforms.recipes.pindic.taxonomy import CATEGORIES, COLUMN, Taxonomy

Combo = tuple[str, str, str, str]


def combo_key(combo: Combo) -> str:
    return " | ".join(combo)


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="Seed of the combination draws (mixed with the round and the locale).")
    uniform_mix: float = Field(0.3, ge=0, le=1, description="Per category, a label is drawn from "
                               "(1 - mix) × its frequency in the pool + mix × uniform over the taxonomy: "
                               "0 samples only labels the pool uses, 1 ignores the pool.")
    weights: dict[str, dict[str, float]] = Field(default_factory=dict, description="Optional extra weight "
                                                 "per category and class name (multiplies the mixture).")
    n_exemplars: int = Field(3, ge=1, description="Exemplars shown per request.")
    items_per_request: int = Field(3, ge=1, description="Items asked for in one request (k).")
    oversample: float = Field(1.5, ge=1, description="Requests cover deficit × oversample items (validation "
                              "and novelty drop some).")


@dataclass
class ComboIndex:
    """Goals of the pool grouped by combination, with one inner-product index per combination."""

    combos: dict[Combo, list[int]]
    ids: list[str]
    goals: list[str]
    items: list[dict[str, Any]]
    vectors: np.ndarray
    indexes: dict[Combo, Any] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        return {combo_key(c): len(v) for c, v in sorted(self.combos.items(), key=lambda kv: (-len(kv[1]), kv[0]))}

    def nearest(self, combo: Combo) -> tuple[Combo, int]:
        """The non-empty combination serving `combo`: itself, else most shared labels, larger, first by name."""
        if combo in self.combos:
            return combo, len(CATEGORIES)

        def rank(c: Combo) -> tuple[int, int, Combo]:
            shared = sum(a == b for a, b in zip(c, combo, strict=True))
            return (-shared, -len(self.combos[c]), c)

        best = min(self.combos, key=rank)
        return best, -rank(best)[0]

    def exemplars(self, combo: Combo, query: np.ndarray, k: int) -> list[int]:
        """Row numbers of up to k goals of `combo` nearest to the query vector (FAISS inner product)."""
        rows = self.combos[combo]
        index = self.indexes[combo]
        _, found = index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), min(k, len(rows)))
        return [rows[j] for j in found[0].tolist() if j >= 0]

    def write(self, folder: Path) -> dict[str, Any]:
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        listing = []
        for n, (combo, rows) in enumerate(sorted(self.combos.items())):
            name = f"combo-{n:04d}.faiss"
            faiss.write_index(self.indexes[combo], str(folder / name))
            listing.append({"combo": list(combo), "file": name, "size": len(rows),
                            "ids": [self.ids[r] for r in rows]})
        (folder / "combos.json").write_text(json.dumps(listing, ensure_ascii=False, indent=1), encoding="utf-8")
        return {"folder": str(folder), "files": len(listing)}


def build_index(items: list[dict[str, Any]], vectors: np.ndarray) -> ComboIndex:
    """Group classified pool items by combination and index each group's goal vectors."""
    import faiss

    combos: dict[Combo, list[int]] = {}
    for i, item in enumerate(items):
        combo = tuple(str(item[COLUMN[c]]) for c in CATEGORIES)
        combos.setdefault(combo, []).append(i)  # type: ignore[arg-type]
    out = ComboIndex(combos=combos, ids=[str(it["id"]) for it in items], goals=[str(it["goal"]) for it in items],
                     items=items, vectors=vectors)
    for combo, rows in combos.items():
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors[rows], dtype=np.float32))
        out.indexes[combo] = index
    return out


def index_summary(index: ComboIndex, taxonomy: Taxonomy) -> dict[str, Any]:
    possible = 1
    for c in CATEGORIES:
        possible *= len(taxonomy.names(c))
    sizes = index.sizes()
    used = {c: sorted({combo[i] for combo in index.combos}) for i, c in enumerate(CATEGORIES)}
    return {"possible_combinations": possible, "non_empty_combinations": len(sizes),
            "empty_combinations": possible - len(sizes), "index_sizes": sizes,
            "pool_items": len(index.ids),
            "classes_used_by_pool": {c: len(used[c]) for c in CATEGORIES},
            "taxonomy_coverage_pool": {c: round(len(used[c]) / len(taxonomy.names(c)), 4) for c in CATEGORIES}}


def label_weights(index: ComboIndex, taxonomy: Taxonomy, cfg: SamplingConfig) -> dict[str, np.ndarray]:
    """Per category, the probability of drawing each class (frequency/uniform mixture × extra weights)."""
    out = {}
    for i, cat in enumerate(CATEGORIES):
        names = taxonomy.names(cat)
        freq = Counter(combo[i] for combo, rows in index.combos.items() for _ in rows)
        total = sum(freq.values()) or 1
        p = np.array([(1 - cfg.uniform_mix) * freq[n] / total + cfg.uniform_mix / len(names) for n in names])
        extra = cfg.weights.get(cat, {})
        p = p * np.array([float(extra.get(n, 1.0)) for n in names])
        if p.sum() <= 0:
            raise ValueError(f"sampling weights of {cat} are all zero")
        out[cat] = p / p.sum()
    return out


def sample_requests(index: ComboIndex, taxonomy: Taxonomy, embed: Any, locales: list[dict[str, str]],
                    deficits: dict[str, int], round_no: int, cfg: SamplingConfig) -> list[dict[str, Any]]:
    """Request rows for one round: per locale with a deficit, ceil(deficit × oversample / k) requests,
    each a seeded combination with exemplars (own index or nearest non-empty combination)."""
    weights = label_weights(index, taxonomy, cfg)
    rows: list[dict[str, Any]] = []
    for li, loc in enumerate(locales):
        need = deficits.get(loc["code"], 0)
        if need <= 0:
            continue
        n_req = int(np.ceil(need * cfg.oversample / cfg.items_per_request))
        rng = np.random.default_rng([cfg.seed, round_no, li])
        for slot in range(n_req):
            combo: Combo = tuple(taxonomy.names(c)[int(rng.choice(len(weights[c]), p=weights[c]))]  # type: ignore[assignment]
                                 for c in CATEGORIES)
            served, shared = index.nearest(combo)
            query = embed([f"{loc['name']}: " + "; ".join(combo)])[0]
            ex = index.exemplars(served, query, cfg.n_exemplars)
            exemplars = [{"goal": index.items[r]["goal"], "sol1": index.items[r]["sol1"],
                          "sol2": index.items[r]["sol2"], "label": int(index.items[r]["label"])} for r in ex]
            key = json.dumps([round_no, loc["code"], slot, list(combo)], ensure_ascii=False)
            rows.append({
                "id": xxhash.xxh3_64_hexdigest(key.encode()), "round": round_no, "slot": slot,
                "locale": loc["code"], "locale_name": loc["name"], "lang": loc["lang"],
                **{COLUMN[c]: combo[i] for i, c in enumerate(CATEGORIES)},
                "exemplar_combo": combo_key(served), "combo_fallback": served != combo,
                "combo_shared_labels": shared, "exemplar_ids": [index.ids[r] for r in ex],
                "exemplar_goals": [index.items[r]["goal"] for r in ex],
                "exemplars_json": json.dumps(exemplars, ensure_ascii=False, indent=1),
                "n_items": cfg.items_per_request,
            })
    return rows
