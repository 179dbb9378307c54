"""Stages that create rows: expand and aggregate stages, sources, and the generalised law.

Unit tests call the stages on small tables; the property test runs random chains of filter,
expand and aggregate stages through the real runner on local Ray and checks, for every stage of
every chain, the conservation law counted from disk and that the children's parents are exactly
the rows the lineage table says were consumed.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from ray import cloudpickle as ray_cloudpickle

from transforms.core import columns as C
from transforms.core.creating import CHILD, CONSUMED, INPUT, ROLE, SRC, AggregateStage, ExpandStage
from transforms.core.lake import Lake, read_table
from transforms.core.runner import conservation_errors, run_pipeline
from transforms.core.stage import FilterStage, StageError
from transforms.core.writing import BORN
from transforms.io.sources import ProductSource, RowsSource

ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import tests/


class SplitWords(ExpandStage):
    """One child per word; a text without words has no children (its row is dropped)."""

    name: ClassVar[str] = "split_words"
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    writes: ClassVar[tuple[str, ...]] = ("word",)
    empty_reason: ClassVar[str] = "no_words"
    max_words: int = 3

    def expand(self, batch: pa.Table) -> pa.Table:
        parents, words = [], []
        for i, text in enumerate(batch.column(C.TEXT).to_pylist()):
            for w in (text or "").split()[: self.max_words]:
                parents.append(i)
                words.append(w)
        return pa.table({"_parent": pa.array(parents, pa.int64()), "word": pa.array(words, pa.string()),
                         C.TEXT: pa.array(words, pa.string())})


class DropMarked(ExpandStage):
    """Every parent yields two children; the second is dropped as invalid when it ends with 'x'."""

    name: ClassVar[str] = "twins"
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)

    def expand(self, batch: pa.Table) -> pa.Table:
        texts = batch.column(C.TEXT).to_pylist()
        n = len(texts)
        parent = np.repeat(np.arange(n), 2)
        kids = [f"{t}#{k}" for t in texts for k in (0, 1)]
        reasons = [("invalid_output" if k == 1 and t.endswith("x") else None) for t in texts for k in (0, 1)]
        return pa.table({"_parent": parent, C.TEXT: kids, C.DROP_REASON: pa.array(reasons, pa.string())})


class GroupByKey(AggregateStage):
    """One row per `key`; rows whose key is null are in no group."""

    name: ClassVar[str] = "group"
    reads: ClassVar[tuple[str, ...]] = ("key",)

    def aggregate(self, table: pa.Table) -> pa.Table:
        keys = table.column("key").to_pylist()
        groups: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            if k is not None:
                groups.setdefault(str(k), []).append(i)
        names = sorted(groups)
        return pa.table({"key": names, C.TEXT: [f"group {k}" for k in names],
                         "size": [len(groups[k]) for k in names],
                         "_members": pa.array([groups[k] for k in names], pa.list_(pa.int64()))})


class DropEveryNth(FilterStage):
    name: ClassVar[str] = "drop_nth"
    drop_reasons: ClassVar[dict[str, str]] = {"nth": "every n-th row (the test double)"}
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    modulus: int = 3

    def reasons(self, batch: pa.Table) -> pa.Array:
        texts = batch.column(C.TEXT).to_pylist()
        return pa.array([("nth" if (sum(map(ord, t or "")) % self.modulus == 0) else None) for t in texts],
                        pa.string())


def _rows(n: int, seed: int = 0) -> pa.Table:
    rng = random.Random(seed)
    vocab = ["물", "병", "열다", "닫다", "컵", "끓이다", "얼음", "칼"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 4))) for _ in range(n)]
    keys = [rng.choice(["a", "b", "c", None]) for _ in range(n)]
    return pa.table({C.ID: [f"r{i}" for i in range(n)], C.TEXT: texts, "key": keys})


# -- unit tests: the stages on their own -----------------------------------------------------------
def test_an_expand_stage_names_children_and_consumes_or_drops_each_parent():
    batch = pa.table({C.ID: ["a", "b", "c"], C.TEXT: ["물 끓이다", "", "컵"], "locale": ["ko", "ko", "ja"]})
    out = SplitWords()(batch)
    roles = Counter(out.column(ROLE).to_pylist())
    assert roles == {CHILD: 3, CONSUMED: 2, INPUT: 1}
    kids = out.filter(pc.equal(out.column(ROLE), CHILD))
    assert kids.column(C.PARENT_ID).to_pylist() == ["a", "a", "c"]
    assert kids.column("word").to_pylist() == ["물", "끓이다", "컵"]
    assert kids.column("locale").to_pylist() == ["ko", "ko", "ja"]  # inherited from the parent
    assert kids.column(SRC).to_pylist() == [0, 0, 2]
    # ids are deterministic and distinct: the same run makes the same rows
    again = SplitWords()(batch).filter(pc.equal(out.column(ROLE), CHILD))
    assert kids.column(C.ID).to_pylist() == again.column(C.ID).to_pylist()
    assert len(set(kids.column(C.ID).to_pylist())) == 3
    dropped = out.filter(pc.equal(out.column(ROLE), INPUT))
    assert dropped.column(C.ID).to_pylist() == ["b"] and dropped.column(C.DROP_REASON).to_pylist() == ["no_words"]
    consumed = out.filter(pc.equal(out.column(ROLE), CONSUMED))
    assert consumed.column(C.PARENT_ID).to_pylist() == ["a", "c"]
    assert consumed.column("n_children").to_pylist() == [2, 1]
    assert consumed.column("child_ids").to_pylist() == [kids.column(C.ID).to_pylist()[:2],
                                                       kids.column(C.ID).to_pylist()[2:]]


def test_children_can_be_dropped_and_a_bad_parent_index_is_refused():
    out = DropMarked()(pa.table({C.ID: ["p", "q"], C.TEXT: ["ax", "b"]}))
    kids = out.filter(pc.equal(out.column(ROLE), CHILD))
    assert kids.column(C.STATUS).to_pylist() == [C.KEPT, C.REJECTED, C.KEPT, C.KEPT]
    assert kids.column(C.DROP_STAGE).to_pylist()[1] == "twins"

    class OutOfRange(SplitWords):
        def expand(self, batch: pa.Table) -> pa.Table:
            return pa.table({"_parent": [5], "word": ["x"]})

    with pytest.raises(StageError, match="outside its batch"):
        OutOfRange()(pa.table({C.ID: ["a"], C.TEXT: ["x"]}))
    with pytest.raises(StageError, match="needs an `id`"):
        SplitWords()(pa.table({C.TEXT: ["x"]}))


def test_a_block_whose_parents_all_fail_writes_no_lineage_and_no_error(tmp_path):
    """Every parent of a block dropped (e.g. generation_failed): the writer must not need lineage columns."""
    from transforms.core.writing import BlockWriter

    out = SplitWords()(pa.table({C.ID: ["a", "b"], C.TEXT: ["", "  "]}))
    assert set(out.column(ROLE).to_pylist()) == {INPUT}
    for d in ("k", "j", "l"):
        (tmp_path / d).mkdir()
    counts = BlockWriter(tmp_path / "k", tmp_path / "j", 100, tmp_path / "l", "split_words")(out).to_pylist()
    assert counts[0]["rows"] == 2 and counts[0]["rejected"] == 2 and counts[0]["consumed"] == 0
    assert counts[0]["lineage_file"] == "" and not list((tmp_path / "l").glob("*.parquet"))


def test_an_aggregate_stage_makes_one_row_per_group_and_consumes_its_members():
    table = pa.table({C.ID: ["a", "b", "c", "d"], "key": ["x", None, "x", "y"]})
    out = GroupByKey()(table)
    groups = out.filter(pc.equal(out.column(ROLE), CHILD))
    assert groups.column("key").to_pylist() == ["x", "y"] and groups.column("size").to_pylist() == [2, 1]
    consumed = out.filter(pc.equal(out.column(ROLE), CONSUMED))
    gid = dict(zip(groups.column("key").to_pylist(), groups.column(C.ID).to_pylist(), strict=True))
    assert dict(zip(consumed.column(C.PARENT_ID).to_pylist(), consumed.column("child_ids").to_pylist(),
                    strict=True)) == {"a": [gid["x"]], "c": [gid["x"]], "d": [gid["y"]]}
    dropped = out.filter(pc.equal(out.column(ROLE), INPUT))
    assert dropped.column(C.ID).to_pylist() == ["b"]


def test_request_rows_are_the_product_of_the_axes_with_stable_ids():
    src = ProductSource(axes={"locale": ["Delhi", "Kerala"], "slice": [0, 1, 2]}, constants={"k": 5})
    rows = src.rows()
    assert rows.num_rows == 6 and set(rows.column("k").to_pylist()) == {5}
    assert rows.column(C.ID).to_pylist() == ProductSource(axes={"locale": ["Delhi", "Kerala"], "slice": [0, 1, 2]},
                                                          constants={"k": 5}).rows().column(C.ID).to_pylist()
    other_round = ProductSource(axes={"locale": ["Delhi", "Kerala"], "slice": [0, 1, 2]}, constants={"k": 6})
    assert not set(other_round.rows().column(C.ID).to_pylist()) & set(rows.column(C.ID).to_pylist())
    with pytest.raises(ValueError, match="at least one value"):
        ProductSource(axes={"locale": []}).rows()
    with pytest.raises(ValueError, match="has no `id`"):
        RowsSource(records=[{"text": "x"}]).rows()


# -- property test: random chains through the real runner -------------------------------------------
def _random_chain(rng: random.Random) -> list:
    chain = []
    for _ in range(rng.randint(2, 5)):
        kind = rng.choice(["filter", "expand", "twins", "aggregate"])
        if kind == "filter":
            chain.append(DropEveryNth(modulus=rng.randint(2, 5)))
        elif kind == "expand":
            chain.append(SplitWords(max_words=rng.randint(1, 3)))
        elif kind == "twins":
            chain.append(DropMarked())
        elif any(isinstance(s, GroupByKey) for s in chain) is False:
            chain.append(GroupByKey())
    return chain


def _check_lineage(lake_root, rec) -> None:
    """Children of this stage name exactly the parents its lineage table says it consumed."""
    if rec.kind == "source":
        return
    if rec.kind not in ("expand", "aggregate"):
        assert rec.rows_created == rec.rows_consumed == 0
        return
    lineage = read_table(lake_root / rec.outputs["lineage"])
    written = [read_table(lake_root / rec.outputs[k]) for k in ("kept", "rejected")]
    born = [t.filter(pc.equal(t.column(BORN), rec.name)) for t in written if t.num_rows and BORN in t.schema.names]
    children = pa.concat_tables(born, promote_options="permissive") if born else None
    child_ids = children.column(C.ID).to_pylist() if children is not None else []
    assert len(child_ids) == len(set(child_ids)) == rec.rows_created
    listed = [c for ids in (lineage.column("child_ids").to_pylist() if lineage.num_rows else []) for c in ids]
    assert set(listed) == set(child_ids)
    if rec.kind == "expand":
        assert sorted(children.column(C.PARENT_ID).to_pylist()) == sorted(
            p for p, n in zip(lineage.column(C.PARENT_ID).to_pylist(), lineage.column("n_children").to_pylist(),
                              strict=True) for _ in range(n))
        assert set(lineage.column(C.PARENT_ID).to_pylist()) == set(children.column(C.PARENT_ID).to_pylist())


@pytest.mark.ray
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_chains_obey_the_law_and_their_lineage_is_exact(ray_local, tmp_path, seed):
    rng = random.Random(seed)
    # seed 0 is every kind in one chain: expand → expand with dropped children → aggregate → expand → filter
    chain = ([SplitWords(), DropMarked(), GroupByKey(), SplitWords(max_words=2), DropEveryNth()] if seed == 0
             else _random_chain(rng))
    if not any(isinstance(s, ExpandStage | AggregateStage) for s in chain):
        chain.append(SplitWords())
    rows = _rows(rng.randint(150, 400), seed)
    source = RowsSource(records=rows.to_pylist())
    lake = Lake(tmp_path / "lake")
    manifest = run_pipeline(job="prop", dataset="prop", source=source, stages=chain, lake=lake, config={},
                            run_id=f"prop-{seed}", partition_rows=64)
    assert manifest.status == "succeeded"
    assert conservation_errors(manifest) == []
    assert manifest.stages[0].rows_created == rows.num_rows and manifest.stages[0].rows_in == 0
    for rec in manifest.stages:
        assert rec.conserved(), rec
        _check_lineage(lake.root, rec)
    # every row ever written has a unique id within its stage's output, and the rejected rows of each
    # stage carry that stage's name
    for rec in manifest.stages[1:]:
        rejected = read_table(lake.root / rec.outputs["rejected"])
        if rejected.num_rows:
            assert set(rejected.column(C.DROP_STAGE).to_pylist()) == {rec.name}
            assert sum(rec.rows_dropped.values()) == rejected.num_rows


@pytest.mark.ray
def test_lineage_walks_a_row_back_through_creating_stages_and_runs(ray_local, tmp_path):
    from transforms.core.lineage import print_trace, trace
    from transforms.io.sources import RunSource

    lake = Lake(tmp_path / "lake")
    rows = pa.table({C.ID: ["q1", "q2", "q3"], C.TEXT: ["물 끓이다", "", "컵 닫다"], "key": ["a", "b", "a"]})
    first = run_pipeline(job="crawl", dataset="d", source=RowsSource(records=rows.to_pylist()),
                         stages=[SplitWords(), DropMarked()], lake=lake, config={}, run_id="crawl-1")
    second = run_pipeline(job="next", dataset="d2", source=RunSource(lake=str(lake.root), run_id="crawl-1"),
                          stages=[GroupByKey()], lake=lake, config={}, run_id="next-1", parents=["crawl-1"])
    assert second.parents == ["crawl-1"] and conservation_errors(first) == conservation_errors(second) == []
    out = read_table(Path(first.outputs["curated"]))
    leaf = out.filter(pc.equal(out.column(C.TEXT), "끓이다#0")).column(C.ID)[0].as_py()
    hops = trace(lake, "crawl-1", leaf)
    assert [h.stage for h in hops] == ["twins", "split_words", "read_rows"]
    assert hops[0].parents == [hops[1].row_id] and hops[1].parents == ["q1"] and hops[2].row_id == "q1"
    assert hops[1].status == "consumed by twins" and hops[2].status == "consumed by split_words"
    # across runs: a group of the second run → its member rows → the first run's chain
    group = read_table(Path(second.outputs["curated"])).column(C.ID)[0].as_py()
    hops = trace(lake, "next-1", group)
    assert hops[0].kind == "aggregate" and len(hops[0].parents) >= 1
    # every member's chain is walked (depth first; a parent reached twice is listed once): the chains end
    # at the first run's source rows
    members = [h for h in hops if h.depth == 1]
    assert [h.row_id for h in members] == hops[0].parents
    assert {h.row_id for h in hops if h.run_id == "crawl-1" and h.stage == "read_rows"} == {"q1", "q3"}
    assert "split_words" in print_trace(hops)
    with pytest.raises(KeyError, match="no stage output"):
        trace(lake, "crawl-1", "nope")
