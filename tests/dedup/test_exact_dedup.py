"""Exact dedup: the pure table function against a dict oracle on the real sample, and the Ray
implementation against the pure function."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.dedup.exact import ExactDedup
from transforms.text.normalize import NormalizeText

SAMPLE = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"


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
    assert not [c for c in out.column_names if c.startswith("_key") or c == "_keep_id"]


def test_the_sample_matches_the_oracle_in_any_row_order(normalized):
    want = oracle(normalized.column("id").to_pylist(), normalized.column("text").to_pylist())
    assert sum(v is not None for v in want.values()) > 500  # the KiN slice carries its repeats
    order = list(range(normalized.num_rows))
    for seed in (0, 1):
        random.Random(seed).shuffle(order)
        out = ExactDedup().process_table(normalized.take(order))
        got = dict(zip(out.column("id").to_pylist(), out.column(C.DUPLICATE_OF).to_pylist(), strict=True))
        assert got == want


def test_lookup_is_exact_on_all_128_bits(normalized):
    """Keys are matched on all 128 bits, also when two groups share the high 64 (then the lookup
    takes its structured-array path; ~2^-65 per pair in practice, forced here)."""
    from transforms.dedup.exact import KEEP_ID, KEY_HI, KEY_LO, GroupLookup, key_rows, repeated_groups

    u64 = pa.uint64()
    groups = pa.table({KEY_HI: pa.array([5, 5, 9], u64), KEY_LO: pa.array([2, 1, 1], u64), KEEP_ID: ["b", "a", "c"]})
    lookup = GroupLookup(groups)
    assert lookup.pairs is not None
    hi, lo = np.array([5, 5, 5, 9, 9, 4], np.uint64), np.array([1, 2, 3, 1, 1, 1], np.uint64)
    has_text = np.array([True, True, True, True, False, True])
    assert lookup.lookup(hi, lo, has_text).to_pylist() == ["a", "b", None, "c", None, None]
    # On real keys (distinct high halves: the fast path) the two paths agree.
    real = GroupLookup(repeated_groups(key_rows(normalized)))
    assert real.pairs is None and len(real.hi) > 100
    fast = real.keep_ids(normalized.column("text"))
    real.pairs = GroupLookup._pack(real.hi, real.lo)
    assert real.keep_ids(normalized.column("text")).equals(fast) and fast.null_count < normalized.num_rows


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


@pytest.mark.ray
def test_lake_partition_path_equals_the_pure_function(ray_local, normalized, tmp_path):
    """The runner's path: key tasks read id and text from the Parquet partitions themselves."""
    import pyarrow.parquet as pq

    from transforms.core.planning import plan_partitions, read_partitions

    for i, start in enumerate(range(0, normalized.num_rows, 1500)):
        pq.write_table(normalized.slice(start, 1500), tmp_path / f"part-{i}.parquet", row_group_size=500)
    parts = plan_partitions(sorted(tmp_path.glob("*.parquet")), 1000)
    assert len(parts) >= 3
    want = _verdicts(ExactDedup().process_table(normalized))
    stage = ExactDedup(num_partitions=2, gather_below_rows=0)
    out = pa.concat_tables(ray_local.get(stage.run_partitions(read_partitions(parts, tracked=False), parts)
                                         .to_arrow_refs()))
    assert out.num_rows == normalized.num_rows and _verdicts(out) == want
