"""J-PIQA's direct generation: round k's request rows, and what the release shows of the parts.

`direct_rows` is the recipe's `rounds.requests` function: one row per wanted item (item form: each
asks a distinct numbered question about an everyday object from the lexicon, so every answer is cached
apart and no two requests of a run share a topic while topics last) or one row asking for every missing
item as a table (table form, the paper's).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

ROUND_STRIDE = 32  # topics per round before the next round's start (local rounds ask for at most 16)


def direct_rows(k: int, deficits: dict[str, int], accepted: list[str], *, overshoot: float = 1.0,
                form: str = "item", lexicon: str | None = None, topic_categories: list[str] | None = None,
                prompt: str = "j_piqa/direct_item", seed: int = 0) -> list[dict[str, Any]]:
    asks = {c: int(-(-d * overshoot // 1)) for c, d in deficits.items()}
    if form == "table":
        request = "\n".join(f"カテゴリー「{c}」: {n} 問" for c, n in asks.items())
        return [{"id": f"direct-r{k}", "request": request, "n_items": sum(asks.values())}]
    import xxhash

    from transforms.llm.prompts import load_prompt
    from transforms.recipes.j_piqa.stages import lexicon_topics

    topics = lexicon_topics(lexicon, topic_categories or [], load_prompt(prompt).system) if lexicon else []
    rows = [{"id": f"direct-r{k}-{c}-{j}", "category": c, "request": f"ラウンド {k}、{c} の {j + 1} 問目", "n_items": 1}
            for c, n in asks.items() for j in range(n)]
    deck = sorted(topics, key=lambda t: xxhash.xxh3_64_intdigest(f"{seed}\x1f{t}".encode()))
    start = (k - 1) * ROUND_STRIDE  # round k starts further down the deck: rounds do not share topics
    for i, row in enumerate(rows):
        row["topic"] = deck[(start + i) % len(deck)] if deck else row["category"]
    return rows


def card(table: pa.Table, runs: dict[str, Any], categories: list[str] | None = None) -> str:
    """Provenance (part and model) and the direct part's categories against their quota."""
    from transforms.piqa.provenance import (
        category_balance,
        markdown_table,
        provenance_markdown,
        provenance_tables,
    )

    parts = provenance_markdown(provenance_tables(table, ("source", "model")))
    direct = table.filter(pa.array([s == "piqa_original" for s in table.column("source").to_pylist()])) \
        if "source" in table.column_names else table.slice(0, 0)
    quota = runs.get("direct")
    wanted = (quota.config.get("run", {}).get("rounds") or {}).get("quotas", {}) if quota is not None else {}
    if "category" not in direct.column_names:
        direct = pa.table({"category": pa.array([], pa.string())})
    balance = category_balance(direct, categories=list(wanted) or None,
                               target_per_category=max(wanted.values()) if wanted else None)
    return parts + "\n\n### Direct generation: categories\n\n" + markdown_table(balance) + "\n"


def appendix(table: pa.Table) -> str:
    """The paper's appendix columns as CSV (j-piqa-appendix.csv in the release)."""
    from transforms.piqa.tables import release_columns

    return str(release_columns(table).to_pandas().to_csv(index=False))
