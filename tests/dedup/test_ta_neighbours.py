"""Dedup for reviewers on real Tamil items: the bundled writer files (XCOPA-ta) hold 3 verbatim copies,
3 near copies and 3 paraphrases we wrote (scripts/build_ta_items.py); each level must find its own,
checked against independent computations (exact Jaccard of 5-gram sets, brute-force cosine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transforms.dedup.review_neighbours import (
    ConfirmedDuplicates,
    ReviewNeighbours,
    e5_vectors,
    exact_groups,
    near_pairs,
    normalise_item,
    semantic_neighbours,
)
from transforms.io.writers_intake import WriterColumns, WritersIntake

ITEMS = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ta_items"


@pytest.fixture(scope="module")
def items() -> pa.Table:
    t = WritersIntake(path=str(ITEMS), allow_malformed=True, columns=WriterColumns(id="item_no", source="source", keep=["xcopa_id"])).rows()
    return t.filter(pc.is_null(t.column("drop_reason")))


@pytest.fixture(scope="module")
def planted(items) -> dict[str, tuple[str, str]]:
    """planted id → (its original's id, kind), through the XCOPA id both carry."""
    rows = items.to_pylist()
    first = {}
    for r in rows:
        first.setdefault(r["xcopa_id"], r["id"])
    kinds = {"xcopa-ta-val": "exact", "written-near-copy": "near", "written-paraphrase": "semantic"}
    return {r["id"]: (first[r["xcopa_id"]], kinds[r["source"]]) for r in rows if r["id"] != first[r["xcopa_id"]]}


def shingles(text: str, n: int = 5) -> set[str]:
    return {text[i:i + n] for i in range(max(1, len(text) - n + 1))}


def test_planted_copies_are_what_the_build_says(planted):
    assert sorted(k for _, k in planted.values()) == ["exact"] * 3 + ["near"] * 3 + ["semantic"] * 3


def test_exact_level_including_swapped_solutions(items, planted):
    rows = items.to_pylist()
    keys = [normalise_item(r["goal"], r["sol1"], r["sol2"]) for r in rows]
    found = {frozenset(rows[i]["id"] for i in g) for g in exact_groups(keys)}
    assert found == {frozenset((p, o)) for p, (o, kind) in planted.items() if kind == "exact"}
    a, b = rows[0], rows[1]
    assert normalise_item(a["goal"], a["sol1"], a["sol2"]) == normalise_item(a["goal"] + " .", a["sol2"], a["sol1"])
    assert normalise_item(a["goal"], a["sol1"], a["sol2"]) != normalise_item(b["goal"], b["sol1"], b["sol2"])


def test_near_level_matches_exact_jaccard(items, planted):
    rows = items.to_pylist()
    keys = [normalise_item(r["goal"], r["sol1"], r["sol2"]) for r in rows]
    pairs, scores = near_pairs(keys, threshold=0.7)
    found = {frozenset((rows[a]["id"], rows[b]["id"])) for a, b in pairs.tolist()}
    # independent: every pair's exact Jaccard of character 5-gram sets (597 items: 178k pairs)
    sets = [shingles(k) for k in keys]
    truth = {frozenset((rows[i]["id"], rows[j]["id"])) for i in range(len(sets)) for j in range(i + 1, len(sets))
             if len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= 0.75}
    assert truth <= found  # LSH misses none clearly above the threshold
    expected = {frozenset((p, o)) for p, (o, kind) in planted.items() if kind in ("exact", "near")}
    assert expected <= found and len(found) <= len(expected) + 2
    for (a, b), s in zip(pairs.tolist(), scores.tolist(), strict=True):
        exact = len(sets[a] & sets[b]) / len(sets[a] | sets[b])
        assert abs(s - exact) < 0.15  # 128 permutations: standard error <= 0.045


@pytest.fixture(scope="module")
def sample(items, planted) -> pa.Table:
    """The 9 planted items, their originals and 21 other real items (33 rows: quick to embed)."""
    wanted = set(planted) | {o for o, _ in planted.values()}
    ids = items.column("id").to_pylist()
    others = [i for i in ids if i not in wanted][::27][:21]
    keep = [i in wanted or i in set(others) for i in ids]
    return items.filter(pa.array(keep))


@pytest.fixture(scope="module")
def reviewed(sample) -> pa.Table:
    return ReviewNeighbours(k=3)(sample)


def test_semantic_level_finds_the_paraphrases(sample, planted):
    rows = sample.to_pylist()
    texts = [f"{r['goal']} {r['sol1']} {r['sol2']}" for r in rows]
    vectors = e5_vectors(texts)
    assert vectors.shape == (len(rows), 384)
    idx, cos, margin = semantic_neighbours(vectors, k=3)
    brute = vectors @ vectors.T  # independent: brute-force cosine, not FAISS
    np.fill_diagonal(brute, -2)
    pos = {r["id"]: i for i, r in enumerate(rows)}
    for p, (o, kind) in planted.items():
        i = pos[p]
        assert rows[idx[i][0]]["id"] == o, (p, kind)  # the original is the first neighbour at every level
        assert cos[i][0] == pytest.approx(brute[i, pos[o]], abs=1e-4)
        assert margin[i][0] > 1.0
    others = [i for i, r in enumerate(rows) if r["id"] not in planted and r["id"] not in
              {o for o, _ in planted.values()}]
    paraphrase_margins = [margin[pos[p]][0] for p, (_, k) in planted.items() if k == "semantic"]
    # a paraphrase stands out from its neighbourhood more than the best match of an unrelated item
    assert min(paraphrase_margins) > float(np.median([margin[i][0] for i in others]))


def test_stage_suggests_each_planted_item_at_its_level(reviewed, planted):
    rows = {r["id"]: r for r in reviewed.to_pylist()}
    assert set(reviewed.column("_status").to_pylist()) == {"kept"}  # suggestions drop nothing
    for p, (o, kind) in planted.items():
        r = rows[p]
        assert r["dup_suggested_of"] == o and (kind == "semantic" or r["dup_level"] == kind), (p, r["dup_level"])
        assert r["dup_semantic"][0]["id"] == o and len(r["dup_semantic"]) == 3
        if kind == "exact":
            assert r["dup_exact"] == [o]
        if kind in ("exact", "near"):
            assert r["dup_near"][0]["id"] == o and r["dup_near"][0]["score"] >= 0.7
    assert all(rows[o]["dup_suggested_of"] is None for o, _ in planted.values())  # originals are kept


def test_confirmed_duplicates_are_dropped_with_duplicate_of(reviewed, planted):
    exact_only = ConfirmedDuplicates(auto_confirm=["exact"])(reviewed)
    dropped = {r["id"]: r["duplicate_of"] for r in exact_only.to_pylist() if r["_status"] == "rejected"}
    assert dropped == {p: o for p, (o, k) in planted.items() if k == "exact"}
    assert set(exact_only.column("drop_reason").drop_null().to_pylist()) == {"duplicate"}
    # a reviewer's decision (e.g. from the review import) drops a paraphrase the same way
    para = next(p for p, (_, k) in planted.items() if k == "semantic")
    decided = ConfirmedDuplicates(decisions={para: planted[para][0]})(reviewed)
    assert [r["id"] for r in decided.to_pylist() if r["_status"] == "rejected"] == [para]
    with pytest.raises(Exception, match="itself"):
        ConfirmedDuplicates(decisions={para: para})(reviewed)
