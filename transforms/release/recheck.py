"""The release read back: its card's figures and its rows' agreement recomputed from the published files.

`build_release` writes the data files, `extras/stats.json` and the card from the table it was given; this
reads the folder the way a user will (the parquet files the card's `configs` name) and refuses the release
when a figure does not follow from them: rows per config (the card's `dataset_info`), items, labels, lengths,
cultural share and the counts of published columns (`stats.json`, which the card's prose is rendered from),
ids unique across configs, the two solutions different, and every reviewed row agreeing with its reviewers
(transforms/piqa/positions.py: `review_contradiction`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.piqa.positions import review_contradiction

MAX_NAMED = 5


def published_table(folder: Path) -> tuple[pa.Table | None, dict[str, int]]:
    """All configs' rows as a user loads them, and the rows per config, from the card's own `configs`."""
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(folder / "README.md").data.to_dict()
    parts, per_config = [], {}
    for config in card.get("configs") or []:
        rows = 0
        for spec in config.get("data_files") or []:
            part = pq.read_table(folder / spec["path"])
            parts.append(part)
            rows += part.num_rows
        per_config[config["config_name"]] = rows
    return (pa.concat_tables(parts, promote_options="permissive") if parts else None), per_config


def _differences(name: str, written: Any, recomputed: Any) -> list[str]:
    if isinstance(written, dict) and isinstance(recomputed, dict):
        return [d for k in sorted(set(written) | set(recomputed), key=str)
                for d in _differences(f"{name}.{k}", written.get(k), recomputed.get(k))]
    if isinstance(written, float) and isinstance(recomputed, float) and math.isclose(written, recomputed, abs_tol=1e-6):
        return []
    return [] if written == recomputed else [f"{name}: card {written!r}, published files {recomputed!r}"]


def recheck_release(folder: str | Path) -> list[str]:
    """Refusal reasons ([] = the card and the rows follow from the published files)."""
    from transforms.release.card import item_stats, public_stats

    folder = Path(folder)
    if not (folder / "README.md").exists():
        return ["release recheck: no README.md"]
    table, per_config = published_table(folder)
    if table is None:
        return []  # nothing was published (the gate refused the columns): the gate's reasons say why
    problems: list[str] = []
    card = _card_counts(folder)
    if card != per_config:
        problems.append(f"release recheck: the card's rows per config {card} are not the files' {per_config}")
    stats_path = folder / "extras" / "stats.json"
    if stats_path.exists():
        written = json.loads(stats_path.read_text("utf-8"))
        recomputed = public_stats(item_stats(table))
        published_counts = set(recomputed["counts"])
        written["counts"] = {k: v for k, v in written.get("counts", {}).items() if k in published_counts}
        for key in ("items", "labels", "lengths", "cultural", "counts"):
            problems += [f"release recheck: stats {d}" for d in _differences(key, written.get(key), recomputed[key])]
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    ids = [str(v) for v in cols.get("id", [])]
    repeated = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if repeated:
        problems.append(f"release recheck: {len(repeated)} id(s) repeated across the published files: "
                        f"{', '.join(repeated[:MAX_NAMED])}")
    same = [ids[i] for i, (a, b) in enumerate(zip(cols.get("sol1", []), cols.get("sol2", []), strict=True))
            if (a or "").strip().casefold() == (b or "").strip().casefold()]
    if same:
        problems.append(f"release recheck: {len(same)} published row(s) with sol1 == sol2: {', '.join(same[:MAX_NAMED])}")
    if "review_labels" in cols or "review_agreement" in cols:
        n = table.num_rows
        why = [(ids[i], review_contradiction(cols["label"][i], cols.get("review_labels", [None] * n)[i], None,
                                             cols.get("review_agreement", [None] * n)[i])) for i in range(n)]
        bad = [f"{i}: {w}" for i, w in why if w]
        if bad:
            problems.append(f"release recheck: {len(bad)} published row(s) contradict their reviewers: "
                            + "; ".join(bad[:MAX_NAMED]))
    return problems


def _card_counts(folder: Path) -> dict[str, int]:
    from huggingface_hub import DatasetCard

    data = DatasetCard.load(folder / "README.md").data.to_dict()
    return {info["config_name"]: sum(int(s.get("num_examples", 0)) for s in info.get("splits") or [])
            for info in data.get("dataset_info") or []}
