"""Exact dedup: the pure table function against a dict oracle on the real sample, and the Ray
implementation against the pure function."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.dedup.exact import ExactDedup
from transforms.text.normalize import NormalizeText

SAMPLE = Path(__file__).resolve().parents[1] / "lake" / "samples" / "ko_crawl_sample.jsonl"


@pytest.fixture(scope="module")
def normalized() -> pa.Table:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    return NormalizeText()(pa.Table.from_pylist(rows)).drop_columns([C.DROP_REASON, C.DROP_STAGE, C.STATUS])


def oracle(ids: list[str], texts: list[str | None]) -> dict[str, str | None]:
    """id → duplicate_of, by plain Python: the smallest id of each text is kept."""
    smallest: dict[str, str] = {}
    for rid, text in zip(ids, texts, strict=True):
        if text is not None and (text not in smallest or rid < smallest[text]):
            smallest[text] = rid
    return {rid: (None if text is None or smallest[text] == rid else smallest[text])
            for rid, text in zip(ids, texts, strict=True)}


def test_smallest_id_is_kept_and_order_is_preserved():
    t = pa.table({"id": ["b", "a", "c", "d", "e", "f"],
                  "text": ["김치", "김치", "된장", None, None, "김치"]})
    out = ExactDedup()(t)
    assert out.column("id").to_pylist() == ["b", "a", "c", "d", "e", "f"]
    assert out.column(C.DUPLICATE_OF).to_pylist() == ["a", None, None, None, None, "a"]
    assert out.column(C.DROP_REASON).to_pylist() == ["exact_duplicate", None, None, None, None, "exact_duplicate"]
    assert out.column(C.DROP_STAGE).to_pylist() == ["exact_dedup", None, None, None, None, "exact_dedup"]
    assert "_text_hash" not in out.column_names


def test_the_sample_matches_the_oracle_in_any_row_order(normalized):
    want = oracle(normalized.column("id").to_pylist(), normalized.column("text").to_pylist())
    assert sum(v is not None for v in want.values()) > 500  # the KiN slice carries its repeats
    order = list(range(normalized.num_rows))
    for seed in (0, 1):
        random.Random(seed).shuffle(order)
        out = ExactDedup().process_table(normalized.take(order))
        got = dict(zip(out.column("id").to_pylist(), out.column(C.DUPLICATE_OF).to_pylist(), strict=True))
        assert got == want


def test_an_earlier_drop_reason_is_kept():
    t = pa.table({"id": ["1", "2"], "text": ["같은 질문", "같은 질문"], C.DROP_REASON: [None, "too_short"]})
    out = ExactDedup()(t)
    assert out.column(C.DROP_REASON).to_pylist() == [None, "too_short"]
    assert out.column(C.DUPLICATE_OF).to_pylist() == [None, "1"]


def _verdicts(out: pa.Table) -> dict[str, tuple[str | None, str | None]]:
    """id -> (duplicate_of, drop_reason)."""
    return {r["id"]: (r[C.DUPLICATE_OF], r[C.DROP_REASON]) for r in
            out.select(["id", C.DUPLICATE_OF, C.DROP_REASON]).to_pylist()}


def _ray_result(ray, stage: ExactDedup, table: pa.Table) -> dict[str, tuple[str | None, str | None]]:
    ds = ray.data.from_arrow(table).repartition(6)
    out = pa.concat_tables(ray.get(stage.run_dataset(ds).to_arrow_refs()))
    assert out.num_rows == table.num_rows
    return _verdicts(out)


@pytest.mark.ray
def test_ray_broadcast_equals_the_pure_function(ray_local, normalized):
    want = _verdicts(ExactDedup().process_table(normalized))
    assert _ray_result(ray_local, ExactDedup(num_partitions=2, gather_below_rows=0), normalized) == want


@pytest.mark.ray
def test_ray_small_input_is_gathered_in_one_task(ray_local, normalized):
    small = normalized.slice(0, 800)
    want = _verdicts(ExactDedup().process_table(small))
    assert _ray_result(ray_local, ExactDedup(gather_below_rows=1000), small) == want


@pytest.mark.ray
@pytest.mark.slow
def test_ray_join_equals_the_pure_function(ray_local, normalized):
    """Hash-join strategy: three shuffles, ~1-2 min on a busy 2-core box (`pytest -m slow`)."""
    small = normalized.slice(0, 1500)
    want = _verdicts(ExactDedup().process_table(small))
    assert _ray_result(ray_local, ExactDedup(num_partitions=2, strategy="join", gather_below_rows=0), small) == want
