"""The driver never materialises the dataset: it sees file paths, footers and per-file counts.

By construction, checked: the ko-piqa front half (up to MinHash) runs in this process (the driver) with every
way data can reach a driver spied on (`ray.get`, and Dataset iteration/take/to_pandas). No table
holding the crawl's `text` column may arrive; what the runner iterates are the write tasks' count
rows. benchmarks/bench_scale.py measures the same at 3M rows (driver peak RSS, docs/cluster.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from transforms.core.writing import COUNTS_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"


def _frames(value: Any, depth: int = 0) -> list[tuple[list[str], int]]:
    """(columns, rows) of every table-like thing in a value the driver received."""
    if depth > 3:
        return []
    if isinstance(value, pa.Table | pa.RecordBatch):
        return [(list(value.schema.names), value.num_rows)]
    if type(value).__name__ == "DataFrame" and hasattr(value, "columns"):
        return [([str(c) for c in value.columns], len(value))]
    if isinstance(value, dict) and "text" in value and hasattr(value["text"], "__len__"):
        return [(list(map(str, value)), len(value["text"]))]
    if isinstance(value, list | tuple):
        return [f for v in value[:10_000] for f in _frames(v, depth + 1)]
    return []


@pytest.mark.ray
@pytest.mark.slow  # the whole front half on the sample: ~1 min idle, 7 min on a loaded 2-core machine
def test_front_half_driver_sees_counts_not_rows(ray_local, tmp_path, monkeypatch):
    import ray

    from transforms.core.lake import Lake
    from transforms.core.runner import run_pipeline
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    seen: list[tuple[str, list[str], int]] = []

    def spy(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if name.startswith("Dataset.iter"):
                return _spy_iter(name, out)
            seen.extend((name, cols, n) for cols, n in _frames(out))
            return out

        return wrapped

    def _spy_iter(name: str, it: Any) -> Any:
        for item in it:
            seen.extend((name, cols, n) for cols, n in _frames(item))
            yield item

    monkeypatch.setattr(ray, "get", spy("ray.get", ray.get))
    for method in ("iter_batches", "iter_rows", "take", "take_all", "take_batch", "to_pandas"):
        monkeypatch.setattr(ray.data.Dataset, method, spy(f"Dataset.{method}", getattr(ray.data.Dataset, method)))

    recipe = load_recipe("ko-piqa", {"input.paths": [str(SAMPLE)]})
    source, chain = run_stages(recipe, "crawl", lake=tmp_path / "lake", run_id="driver-mem")
    from transforms.dedup.minhash import MinHashDedup

    front = chain[: next(i for i, s in enumerate(chain) if isinstance(s, MinHashDedup)) + 1]
    manifest = run_pipeline(job="ko-piqa:crawl", dataset="ko-piqa", source=source, stages=front,
                            lake=Lake(tmp_path / "lake"), config={}, run_id="driver-mem")
    assert Path(manifest.outputs["curated"]).exists()

    leaked = [(name, cols, n) for name, cols, n in seen if "text" in cols and n]
    assert not leaked, f"rows reached the driver: {leaked[:5]}"
    iterated = [(name, cols) for name, cols, _ in seen if name == "Dataset.iter_batches"]
    assert iterated, "the runner should stream the write tasks' counts"
    assert {tuple(cols) for _, cols in iterated} <= {tuple(COUNTS_SCHEMA.names)}
