"""MinHash LSH near-duplicate removal: signatures, clustering, the stage, and the Ray path."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.dedup.minhash import NEAR_DUPLICATE, MinHashDedup
from transforms.dedup.minhash_cluster import (
    CandidateRows,
    DuplicateLookup,
    SignatureChunks,
    candidate_refs,
    cluster_buckets,
    collision_probability,
    id_ranks,
    lsh_params,
    ref_positions,
    row_refs,
    shared_buckets,
    shared_keys,
    source_rows,
    star_edges,
    union_find_min,
    verify_edges,
)
from transforms.dedup.minhash_signature import (
    band_keys,
    estimated_jaccard,
    fmix32,
    fmix64,
    minhash_signatures,
    permutations,
    shingle_hashes,
)


def shingles(text: str, n: int = 5) -> set[str]:
    text = text.ljust(n, "\x00")
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def exact_jaccard(a: str, b: str, n: int = 5) -> float:
    x, y = shingles(a, n), shingles(b, n)
    return len(x & y) / len(x | y)


@pytest.fixture(scope="module")
def kin_questions(shared_data: Path) -> list[str]:
    path = shared_data / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl"
    with open(path, encoding="utf-8") as f:
        return [" ".join(json.loads(line)["question"].split()) for line in f if line.strip()]


@pytest.fixture(scope="module")
def question_pairs(shared_data: Path) -> list[tuple[str, str]]:
    pairs = []
    for name in ("kor_pair_train.csv", "kor_Pair_test.csv"):
        with open(shared_data / "ko_question_pair_songys" / name, encoding="utf-8-sig") as f:
            pairs += [(r["question1"].strip(), r["question2"].strip()) for r in csv.DictReader(f)]
    return pairs


def edit(text: str, rng: random.Random, k: int) -> str:
    """k random one-character edits (substitute a Hangul syllable, drop or add a space)."""
    chars = list(text)
    for _ in range(k):
        i = rng.randrange(len(chars))
        op = rng.random()
        if op < 0.5 and "가" <= chars[i] <= "힣":
            chars[i] = chr(0xAC00 + (ord(chars[i]) - 0xAC00 + 28 * rng.randrange(1, 20)) % 11172)
        elif op < 0.75 and chars[i] == " ":
            del chars[i]
        else:
            chars.insert(i, " ")
    return "".join(chars)


# -- signatures -----------------------------------------------------------------------------------
def test_signatures_follow_the_definition(kin_questions: list[str]) -> None:
    """The vectorised path equals min over shingles of (a*h(s) + b) mod 2^32, computed text by text."""
    texts = kin_questions[:40] + ["", "짧음", None, "물 끓이기"]
    a, b = permutations(64, seed=7)
    sig = minhash_signatures(texts, num_perm=64, ngram=5, seed=7, backend="numpy")
    assert sig.shape == (len(texts), 64) and sig.dtype == np.uint32
    for text, row in zip(texts, sig, strict=True):
        padded = (text or "").ljust(5, "\x00")
        hashes = []
        for i in range(len(padded) - 4):
            h = 0
            for ch in padded[i:i + 5]:
                h = (h * 0x01000193 + ord(ch)) % 2**32
            hashes.append(h)
        x = fmix32(np.array(hashes, dtype=np.uint32))
        expected = (np.multiply.outer(a, x) + b[:, None]).min(axis=1)
        np.testing.assert_array_equal(row, expected)
    # chunking and slicing do not change anything
    np.testing.assert_array_equal(minhash_signatures(texts, num_perm=64, seed=7, chunk_shingles=50,
                                                     backend="numpy"), sig)
    np.testing.assert_array_equal(minhash_signatures(pa.array(texts).slice(5, 10), num_perm=64, seed=7), sig[5:15])


def test_numba_kernels_equal_numpy(kin_questions: list[str]) -> None:
    """Both numba kernels (flat hashes; raw UTF-8 to signature) give numpy's signatures bit for bit,
    on real Korean questions and the bundled mixed-language crawl sample, with 1-4 byte UTF-8,
    short/empty/null texts, newlines, a text longer than the kernel's first buffer, and slices."""
    pytest.importorskip("numba", reason="the `fast` extra is not installed")
    from transforms.dedup.minhash_numba import signatures_numba

    sample = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"
    with open(sample, encoding="utf-8") as f:
        crawl = [json.loads(line).get("text") for line in f if line.strip()]
    texts = [*kin_questions[:300], *crawl, "", None, "국", "é😀x", "a\nb\tc", "가" * 700, "😀" * 3]
    for ngram, num_perm in ((5, 128), (3, 64)):
        numpy_sig = minhash_signatures(texts, num_perm=num_perm, ngram=ngram, backend="numpy")
        np.testing.assert_array_equal(minhash_signatures(texts, num_perm=num_perm, ngram=ngram, backend="numba"),
                                      numpy_sig)
    sliced = pa.array(texts, pa.string()).slice(290, 40)
    np.testing.assert_array_equal(minhash_signatures(sliced, backend="numba"),
                                  minhash_signatures(sliced, backend="numpy"))
    hashes, counts = shingle_hashes(texts, ngram=5)
    a, b = permutations(128, seed=42)
    np.testing.assert_array_equal(signatures_numba(hashes, counts, a, b), minhash_signatures(texts, backend="numpy"))
    assert minhash_signatures([], backend="numba").shape == (0, 128)
    assert minhash_signatures(["", None], backend="numba").shape == (2, 128)


def test_numba_band_keys_and_partition_split_equal_numpy(kin_questions: list[str]) -> None:
    """The map task's two numba kernels (the `fast` extra): band keys bit for bit those of the numpy passes,
    on real signatures and on random ones with every bit pattern; the counting sort by reducer gives the
    stable argsort's keys, rows and bounds."""
    pytest.importorskip("numba", reason="the `fast` extra is not installed")
    from transforms.dedup import minhash_numba
    from transforms.dedup.minhash_tasks import split_by_partition

    real = minhash_signatures(kin_questions[:2000])
    noise = np.random.default_rng(3).integers(0, 2**32, size=(500, 128), dtype=np.uint64).astype(np.uint32)
    for sig, (bands, rows) in ((real, (20, 6)), (noise, (14, 9)), (real[:0], (20, 6)), (noise[:1], (1, 128))):
        keys = band_keys(sig, bands, rows, backend="numpy")
        np.testing.assert_array_equal(band_keys(sig, bands, rows, backend="numba"), keys)
        text_rows = np.flatnonzero(np.arange(3 * len(sig)) % 3 == 1)  # rows of the texts with content
        for k in (1, 5, 16):
            part = (keys.ravel() % np.uint64(k)).astype(np.uint16)
            order = np.argsort(part, kind="stable")
            got_keys, got_rows, bounds = minhash_numba.split_by_partition_numba(keys, text_rows, k)
            np.testing.assert_array_equal(got_keys, keys.ravel()[order])
            np.testing.assert_array_equal(got_rows, np.repeat(text_rows, bands)[order])
            np.testing.assert_array_equal(bounds, np.searchsorted(part[order], np.arange(k + 1)))
            for got, want in zip(split_by_partition(keys, text_rows, k), (got_keys, got_rows, bounds), strict=True):
                np.testing.assert_array_equal(got, want)
            small = minhash_numba.split_by_partition_numba(keys, text_rows.astype(np.uint32), k)  # the map task's rows
            assert small[1].dtype == np.uint32 and (small[1] == got_rows).all() and (small[0] == got_keys).all()


def test_lsh_bands_travel_with_the_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pickled stage (what a Ray task gets) knows its bands and rows: no worker imports datasketch and scipy
    to integrate them again; a changed field is resolved anew."""
    import pickle

    from transforms.dedup import minhash

    stage = MinHashDedup(threshold=0.7)
    expected = stage.lsh_bands()
    copy = pickle.loads(pickle.dumps(stage))

    def refuse(*args: object) -> tuple[int, int]:
        raise AssertionError("lsh_params called again")

    monkeypatch.setattr(minhash, "lsh_params", refuse)
    assert copy.lsh_bands() == expected == (20, 6)
    copy.bands, copy.rows = 10, 5
    assert copy.lsh_bands() == (10, 5)


def test_shingle_counts_match_text_lengths(kin_questions: list[str]) -> None:
    texts = kin_questions[:100]
    hashes, counts = shingle_hashes(texts, ngram=5)
    assert counts.tolist() == [max(len(t), 5) - 4 for t in texts]
    assert len(hashes) == counts.sum()


def test_estimated_jaccard_tracks_exact_jaccard_on_korean(kin_questions: list[str]) -> None:
    rng = random.Random(3)
    left, right = [], []
    for q in kin_questions[:600]:
        if len(q) < 30:
            continue
        left.append(q)
        right.append(edit(q, rng, rng.randint(1, max(1, len(q) // 8))))
    exact = np.array([exact_jaccard(a, b) for a, b in zip(left, right, strict=True)])
    sig_l = minhash_signatures(left, num_perm=128)
    sig_r = minhash_signatures(right, num_perm=128)
    est = (sig_l == sig_r).mean(axis=1)
    err = est - exact
    assert exact.min() < 0.5 < 0.9 < exact.max()  # the pairs span the interesting range
    assert abs(err.mean()) < 0.01  # unbiased
    expected_rmse = np.sqrt((exact * (1 - exact) / 128).mean())
    assert np.sqrt((err ** 2).mean()) < 1.3 * expected_rmse  # as good as ideal random permutations
    assert np.abs(err).max() < 0.2


def test_seed_changes_the_permutations(kin_questions: list[str]) -> None:
    a = minhash_signatures(kin_questions[:20], seed=1)
    assert (a == minhash_signatures(kin_questions[:20], seed=1)).all()
    assert (a != minhash_signatures(kin_questions[:20], seed=2)).mean() > 0.9


# -- LSH parameters and clustering ------------------------------------------------------------------
def test_lsh_params_come_from_datasketch() -> None:
    from datasketch.lsh import _optimal_param

    assert lsh_params(0.7, 128) == tuple(_optimal_param(0.7, 128, 0.5, 0.5))
    bands, rows = MinHashDedup(threshold=0.7, false_negative_weight=0.9).lsh_bands()
    assert bands * rows <= 128
    # weighting misses higher buys recall at the threshold
    assert collision_probability(0.75, bands, rows) > collision_probability(0.75, *lsh_params(0.7, 128))
    with pytest.raises(ValueError, match="exceeds num_perm"):
        MinHashDedup(num_perm=64, bands=10, rows=10)


def test_union_find_gives_each_component_its_smallest_node() -> None:
    u = np.array([5, 3, 9, 7, 1])
    v = np.array([3, 9, 2, 8, 4])
    roots = union_find_min(u, v, 10)
    assert roots.tolist() == [0, 1, 2, 2, 1, 2, 6, 7, 7, 2]
    # a long chain given in the worst order still collapses
    n = 1000
    order = np.random.default_rng(0).permutation(n - 1)
    assert (union_find_min(order + 1, order, n) == 0).all()


def test_cluster_buckets_is_transitive_and_deterministic() -> None:
    """Buckets of refs (no verification): each bucket's smallest id is its head, chains collapse to the cluster's
    smallest id, whatever refs the ids sit at and in whatever order the buckets come."""
    buckets = [("b", "c"), ("c", "a"), ("x", "y"), ("d", "c"), ("y", "z"), ("e", "e")]
    names = sorted({n for b in buckets for n in b})
    results = []
    for seed in range(5):
        rng = random.Random(seed)
        refs = dict(zip(names, rng.sample(range(1 << 34), len(names)), strict=True))  # refs of several sources
        shuffled = rng.sample(buckets, len(buckets))
        keys = np.repeat(np.arange(len(shuffled), dtype=np.uint64) * np.uint64(7919), 2)
        members = np.array([refs[n] for b in shuffled for n in rng.sample(b, 2)], np.int64)
        order = rng.sample(names, len(names))
        cands = CandidateRows(np.array([refs[n] for n in order]), pa.array(order), None)
        out = cluster_buckets([(keys[:4], members[:4]), (keys[4:], members[4:])], cands, threshold=0.7)
        results.append(dict(zip(out.column("id").to_pylist(), out.column("duplicate_of").to_pylist(), strict=True)))
        ungrouped = np.array(rng.sample(range(len(keys)), len(keys)))
        assert cluster_buckets([(keys[ungrouped][:5], members[ungrouped][:5]),
                                (keys[ungrouped][5:], members[ungrouped][5:])], cands, 0.7, grouped=False).equals(out)
    assert all(r == results[0] for r in results)
    assert results[0] == {"b": "a", "c": "a", "d": "a", "y": "x", "z": "x"}


def test_row_refs_and_id_ranks() -> None:
    rows = np.array([0, 5, 2**32 - 1])
    refs = row_refs(rows, 3)
    assert (refs >> 32).tolist() == [3, 3, 3] and source_rows(np.sort(np.concatenate([refs, row_refs(rows, 2)])),
                                                              3).tolist() == rows.tolist()
    with pytest.raises(ValueError, match="32 bits"):
        row_refs(np.array([2**32]), 0)
    rank, row_of_rank = id_ranks(pa.array(["9", "10", "b", "a", "가", "Z"]))
    assert rank.tolist() == [1, 0, 4, 3, 5, 2]  # byte order: "10" < "9" < "Z" < "a" < "b" < "가"
    assert row_of_rank[rank].tolist() == list(range(6))
    for last in (11, 2**31):  # a dense lookup table over the sources' rows, and a sparse one (sorted search)
        table = np.sort(np.concatenate([row_refs(np.array([1, 7, 9]), 0), row_refs(np.array([0, last]), 4)]))
        queries = np.repeat(table[[4, 0, 2, 3, 1]], 5)
        assert table[ref_positions(queries, table)].tolist() == queries.tolist()
        for missing in (row_refs(np.array([3]), 0), row_refs(np.array([3]), 9), row_refs(np.array([last + 1]), 4)):
            with pytest.raises(ValueError, match="missing"):
                ref_positions(np.concatenate([queries, missing]), table)
    u, v = star_edges(np.array([1, 1, 1, 2, 2, 3, 3], np.uint64), np.array([4, 2, 9, 2, 4, 4, 2]))
    assert list(zip(u.tolist(), v.tolist(), strict=True)) == [(2, 4), (2, 9)]  # unique, sorted


def test_candidate_rows_and_chunked_verification_agree_with_the_exact_answers(kin_questions: list[str]) -> None:
    """The candidate rows are exactly the rows of shared buckets, with their ids and signatures; verifying in chunks
    of 3 edges keeps the same edges as one pass and as the exact Jaccard of the texts would suggest."""
    stage = MinHashDedup(threshold=0.7)
    base = [q for q in kin_questions if 40 <= len(q) <= 200][:300]
    texts = base + [q + "?" for q in base[:40]] + [edit(q, random.Random(3), 8) for q in base[40:80]]
    table = _table(texts)
    keys, rows = stage.bucket_keys(table)
    bucket_keys, bucket_refs = shared_buckets(keys, rows)
    assert len(_runs(bucket_keys)) == len(np.unique(bucket_keys))  # each bucket one contiguous run
    counts: dict[int, int] = {}
    for key in keys.tolist():
        counts[key] = counts.get(key, 0) + 1
    shared = sorted({int(r) for k, r in zip(keys.tolist(), rows.tolist(), strict=True) if counts[k] > 1})
    cand = candidate_refs([bucket_refs])
    assert cand.tolist() == shared and len(shared) > 40
    cand_rows = stage.candidate_rows(table, cand)
    assert cand_rows.column("_mh_id").to_pylist() == [f"r{i:04d}" for i in shared]
    candidates = CandidateRows.of_tables([cand_rows], stage.num_perm, verify=True)
    sig = stage.signatures(pa.array([texts[i] for i in shared]))
    assert candidates.signatures is not None
    np.testing.assert_array_equal(candidates.signatures.take(np.arange(len(shared))), sig)
    u, v = star_edges(bucket_keys, np.searchsorted(cand, bucket_refs))  # ids r0000.. sort as their rows
    whole = verify_edges(u, v, sig, 0.7)
    chunked = verify_edges(u, v, sig, 0.7, chunk_edges=3)
    pieces = SignatureChunks([sig[:1], sig[1:1], sig[1:50], sig[50:]])  # one view per source, never concatenated
    in_pieces = verify_edges(u, v, pieces, 0.7, chunk_edges=7)
    assert (chunked == whole).all() and (in_pieces == whole).all() and 0 < whole.sum() < len(u)
    exact = [exact_jaccard(texts[shared[a]], texts[shared[b]]) for a, b in zip(u[whole], v[whole], strict=True)]
    assert np.mean(np.array(exact) >= 0.6) > 0.95  # what verification keeps is similar text
    assert len(stage.candidate_rows(pa.table({}), np.zeros(0, np.int64), 5)) == 0


def _runs(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal keys starts."""
    return np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) else np.zeros(0, np.int64)


def test_shared_keys_finds_exactly_the_repeated_keys() -> None:
    """The hashed-pieces search (numba, the `fast` extra) and the numpy sort flag the same keys as np.unique, and
    the rows of shared buckets come out grouped: every key's rows in one run, in input order."""
    from transforms.dedup import minhash_numba

    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 3, 1_000, 300_000):
        keys = fmix64(rng.integers(0, n // 3 + 2, size=n, dtype=np.uint64))
        _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        expected = counts[inverse] > 1
        assert shared_keys(keys).tolist() == expected.tolist()
        refs = rng.permutation(n).astype(np.int64)
        got_keys, got_refs = shared_buckets(keys, refs)
        assert sorted(got_refs.tolist()) == sorted(refs[expected].tolist())
        assert (got_keys == keys[np.argsort(refs)[got_refs]]).all()  # each ref kept its key
        assert len(_runs(got_keys)) == len(np.unique(got_keys))
        if minhash_numba.available():
            assert minhash_numba.shared_keys_numba(keys).tolist() == expected.tolist()
            rows = minhash_numba.shared_rows_numba(keys)
            assert all((np.diff(run) > 0).all() for run in np.split(rows, _runs(keys[rows])[1:]))  # input order


def test_duplicate_lookup_matches_ids_exactly_even_when_hashes_collide() -> None:
    dup_map = pa.table({"id": ["b", "c", "z"], "duplicate_of": ["a", "a", "y"]})
    query = pa.chunked_array([["a", "b"], ["z", "q", "c"], []])
    lookup = DuplicateLookup(dup_map)
    assert lookup.duplicate_of(query).to_pylist() == [None, "a", "y", None, "a"]
    lookup.hash_collision = True  # the exact fallback for two map ids with one 64-bit hash
    assert lookup.duplicate_of(query).to_pylist() == [None, "a", "y", None, "a"]
    assert DuplicateLookup(dup_map.slice(0, 0)).duplicate_of(pa.array(["a"])).to_pylist() == [None]


def _reference_duplicate_of(stage: MinHashDedup, ids: list[str], texts: list[str]) -> dict[str, str]:
    """The stage's definition (docs/minhash.md) in plain Python: buckets per band key, star edges from
    each bucket's smallest id, verification on the signatures, connected components rooted at their
    smallest id. Signatures and band keys come from the kernel, which `test_numba_kernels_equal_numpy`
    and `test_signatures_follow_the_definition` check."""
    keep = [i for i, t in enumerate(texts) if t]
    sig = stage.signatures(pa.array([texts[i] for i in keep], pa.string()))
    bands, rows = stage.lsh_bands()
    buckets: dict[int, list[int]] = {}
    for row, row_keys in zip(keep, band_keys(sig, bands, rows).tolist(), strict=True):
        for key in row_keys:
            buckets.setdefault(key, []).append(row)
    where = {row: i for i, row in enumerate(keep)}
    edges = set()
    for members in buckets.values():
        head = min(members, key=lambda r: ids[r])
        edges.update((head, m) for m in members if m != head)
    parent: dict[int, int] = {}

    def root(r: int) -> int:
        while parent.get(r, r) != r:
            r = parent[r]
        return r

    for a, b in edges:
        if stage.verify and estimated_jaccard(sig[where[a]], sig[where[b]]) < stage.threshold:
            continue
        ra, rb = root(a), root(b)
        if ra != rb:
            lo, hi = sorted((ra, rb), key=lambda r: ids[r])
            parent[hi] = lo
    return {ids[r]: ids[root(r)] for r in parent}


def _crawl_and_pairs(shared_data: Path) -> tuple[list[str], list[str]]:
    """The bundled crawl sample and the songys question pairs: 19,752 rows of real Korean text, ids and texts."""
    sample = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"
    ids, texts = [], []
    with open(sample, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            ids.append(row["id"])
            texts.append(row["text"])
    for name in ("kor_pair_train.csv", "kor_Pair_test.csv"):
        with open(shared_data / "ko_question_pair_songys" / name, encoding="utf-8-sig") as f:
            for i, r in enumerate(csv.DictReader(f)):
                ids += [f"{name[:8]}-{i}-1", f"{name[:8]}-{i}-2"]
                texts += [r["question1"], r["question2"]]
    return ids, texts


@pytest.mark.parametrize("threshold", [0.6, 0.7])
def test_stage_equals_the_reference_on_real_data(shared_data: Path, threshold: float) -> None:
    """On the bundled crawl sample and the songys question pairs (19,752 rows of real Korean text), the
    stage's optimised path (cached LSH parameters, hashed shared-key search, integer row references, ranks of
    the candidates' ids, hashed duplicate lookup) gives every row the `duplicate_of` of the definition,
    computed here without any of that code."""
    ids, texts = _crawl_and_pairs(shared_data)
    stage = MinHashDedup(threshold=threshold)
    out = stage(pa.table({C.ID: ids, C.TEXT: texts}))
    got = {i: d for i, d in zip(ids, out.column(C.DUPLICATE_OF).to_pylist(), strict=True) if d is not None}
    expected = _reference_duplicate_of(stage, ids, texts)
    assert len(expected) > 2_500  # the sample's and the pairs' near and exact copies
    assert got == expected


@pytest.mark.parametrize("verify", [True, False])
def test_refs_across_sources_give_the_reference_duplicate_map(shared_data: Path, verify: bool) -> None:
    """The distributed path's task functions called in turn in this process, on the 19,752 real rows shuffled and cut
    into sources of uneven size (one empty, one of a single row) with 7 reducers: band rows of (key, ref) only, shared
    buckets, each source's candidate rows, the cluster task ranking the candidates' ids. Ids are decimal numbers in
    random order, so string order ("10" < "9"), numeric order and row order all differ, and as an int64 column they
    are compared as strings: the same duplicate map as the plain-Python definition, which chooses each bucket's
    head and each cluster's root by the id string, and as process_table."""
    from transforms.dedup.minhash_tasks import (
        _band_partitions,
        _band_parts,
        _candidate_rows,
        _candidates,
        _cluster,
        _reduce_buckets,
    )

    _, texts = _crawl_and_pairs(shared_data)
    rng = random.Random(11)
    rng.shuffle(texts)
    numbers = rng.sample(range(1, 20 * len(texts)), len(texts))
    ids = [str(n) for n in numbers]
    assert sorted(ids) != sorted(ids, key=int)
    stage = MinHashDedup(threshold=0.7, verify=verify, shuffle_partitions=7, resources={"batch_size": 1000})
    expected = _reference_duplicate_of(stage, ids, texts)
    assert len(expected) > 2_500
    for id_column in (pa.array(ids), pa.array(numbers, pa.int64())):
        table = pa.table({C.ID: id_column, C.TEXT: texts})
        cuts = [0, 1, 1, 2_000, 2_001, 9_000, 13_333, table.num_rows]
        sources = [table.slice(lo, hi - lo) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
        parts = [_band_partitions(block, stage, i) for i, block in enumerate(sources)]
        assert all(len(p[2]) == 8 and p[1].dtype == np.uint32 and p[3] == i for i, p in enumerate(parts))  # no ids
        buckets = [_reduce_buckets(k, *parts) for k in range(7)]
        per_reducer = [_band_parts(block, stage, i) for i, block in enumerate(sources)]  # the several-node form
        for k in range(7):
            for got, want in zip(_reduce_buckets(k, *[p[k] for p in per_reducer]), buckets[k], strict=True):
                np.testing.assert_array_equal(got, want)
        refs = _candidates(*buckets)
        assert len(source_rows(refs, 1)) == 0 and len(refs) < table.num_rows / 2  # ids read for candidates only
        cand = [_candidate_rows(block, stage, i, refs) for i, block in enumerate(sources)]
        assert [len(c) for c in cand] == [len(source_rows(refs, i)) for i in range(len(sources))]
        duplicates, n = _cluster(stage, len(buckets), True, *buckets, *cand)
        got = dict(zip(duplicates.column("id").to_pylist(), duplicates.column("duplicate_of").to_pylist(),
                       strict=True))
        assert n == len(got) and got == expected
        in_process = stage(table)
        assert {str(i): d for i, d in zip(id_column.to_pylist(), in_process.column(C.DUPLICATE_OF).to_pylist(),
                                          strict=True) if d is not None} == expected


# -- the stage -----------------------------------------------------------------------------------
def _table(texts: list[str | None], prefix: str = "r") -> pa.Table:
    return pa.table({C.ID: [f"{prefix}{i:04d}" for i in range(len(texts))], C.TEXT: texts})


def test_stage_drops_injected_near_duplicates_and_keeps_smallest_id(kin_questions: list[str]) -> None:
    base = [q for q in kin_questions if 60 <= len(q) <= 300][:50]
    q = base[0]
    variants = [
        q.replace(" ", "", 1),  # spacing
        q + "?",  # punctuation
        q.replace("는 ", "은 ", 1) if "는 " in q else q.replace("이 ", "가 ", 1),  # particle
        edit(q, random.Random(1), 1),  # typo
        q,  # exact copy
    ]
    texts: list[str | None] = [*variants, *base[1:], None, ""]
    texts.append(q)  # the original comes last: it is *not* the smallest id, r0000 is
    stage = MinHashDedup(threshold=0.7)
    out = stage(_table(texts))
    assert out.num_rows == len(texts)
    dup = out.column(C.DUPLICATE_OF).to_pylist()
    reason = out.column(C.DROP_REASON).to_pylist()
    family = [0, 1, 2, 3, 4, len(texts) - 1]
    assert dup[0] is None and reason[0] is None
    for i in family[1:]:
        assert dup[i] == "r0000" and reason[i] == NEAR_DUPLICATE, (i, texts[i])
    others = [i for i in range(len(texts)) if i not in family]
    assert all(dup[i] is None for i in others), [texts[i] for i in others if dup[i] is not None]
    assert out.column(C.STATUS).to_pylist().count(C.REJECTED) == len(family) - 1


def test_stage_keeps_previous_duplicate_of_and_reasons() -> None:
    table = _table(["라면 물 얼마나 넣어요?", "라면 물 얼마나 넣어요?!", "완전히 다른 질문입니다"]).append_column(
        C.DUPLICATE_OF, pa.array([None, None, "x"], pa.string()))
    out = MinHashDedup(threshold=0.6)(table)
    assert out.column(C.DUPLICATE_OF).to_pylist() == [None, "r0000", "x"]


def test_real_question_pairs_are_detected(question_pairs: list[tuple[str, str]]) -> None:
    """Surface near-duplicates among real paired questions (songys) are found; unrelated ones are not.

    The pairs' label is about meaning, not surface form, so the ground truth here is the exact
    5-gram Jaccard. Pairs just above the threshold are found only most of the time: the 128-value
    estimate has a standard error of ~0.04 there.
    """
    scored = [(a, b, exact_jaccard(a, b)) for a, b in question_pairs if a and b]
    groups = {
        "identical": [(a, b) for a, b, j in scored if a == b],
        "high": [(a, b) for a, b, j in scored if a != b and j >= 0.8],
        "near": [(a, b) for a, b, j in scored if a != b and 0.7 <= j < 0.8],
        "low": [(a, b) for a, b, j in scored if j <= 0.3][:3000],
    }
    assert len(groups["identical"]) > 900 and len(groups["high"]) >= 15 and len(groups["near"]) >= 50
    pairs = [p for g in groups.values() for p in g]
    table = _table([t for a, b in pairs for t in (a, b)])
    out = MinHashDedup(threshold=0.7, false_negative_weight=0.9)(table)
    dup = dict(zip(out.column(C.ID).to_pylist(), out.column(C.DUPLICATE_OF).to_pylist(), strict=True))

    def cluster(i: int) -> str:
        key = f"r{i:04d}"
        return dup[key] or key

    found = [cluster(2 * k) == cluster(2 * k + 1) for k in range(len(pairs))]
    rate, start = {}, 0
    for name, group in groups.items():
        rate[name] = float(np.mean(found[start:start + len(group)]))
        start += len(group)
    assert rate["identical"] == 1.0
    assert rate["high"] >= 0.93, rate
    assert rate["near"] >= 0.6, rate
    assert rate["low"] <= 0.002, rate


def _ray_table(kin_questions: list[str]) -> pa.Table:
    rng = random.Random(5)
    texts: list[str | None] = list(kin_questions[:800])
    texts += [edit(rng.choice(kin_questions[:800]), rng, rng.randint(1, 3)) for _ in range(300)]
    texts += [rng.choice(kin_questions[:800]) for _ in range(50)] + [None, ""]
    rng.shuffle(texts)
    return _table(texts)


def _check_ray_equals_pure(ray_local, stage: MinHashDedup, table: pa.Table) -> None:
    expected = stage(table)
    ds = ray_local.data.from_arrow(table).repartition(6)
    got = pa.concat_tables(ray_local.get(stage.run_dataset(ds).to_arrow_refs())).sort_by(C.ID)
    assert got.num_rows == table.num_rows
    assert got.column(C.ID).to_pylist() == expected.column(C.ID).to_pylist()
    assert got.column(C.DUPLICATE_OF).to_pylist() == expected.column(C.DUPLICATE_OF).to_pylist()
    assert got.column(C.DROP_REASON).to_pylist() == expected.column(C.DROP_REASON).to_pylist()
    assert table.num_rows - expected.column(C.DUPLICATE_OF).null_count >= 250  # it did find duplicates


@pytest.mark.ray
def test_ray_path_equals_process_table(ray_local, kin_questions: list[str]) -> None:
    table = _ray_table(kin_questions)
    stage = MinHashDedup(threshold=0.7, shuffle_partitions=5, rows_per_block=150, resources={"batch_size": 100},
                         local_max_rows=0)
    _check_ray_equals_pure(ray_local, stage, table)


@pytest.mark.ray
def test_small_dataset_one_task_path_equals_process_table(ray_local, kin_questions: list[str]) -> None:
    stage = MinHashDedup(threshold=0.7, local_max_rows=10_000)
    _check_ray_equals_pure(ray_local, stage, _ray_table(kin_questions))


@pytest.mark.ray
@pytest.mark.slow
def test_ray_data_groupby_shuffle_equals_process_table(ray_local, kin_questions: list[str]) -> None:
    """The Ray Data groupby variant (slow: its aggregator actors take ~30 s to start on 2 CPUs)."""
    stage = MinHashDedup(threshold=0.7, shuffle="ray_data", shuffle_partitions=5, resources={"batch_size": 200},
                         local_max_rows=0)
    _check_ray_equals_pure(ray_local, stage, _ray_table(kin_questions))


@pytest.mark.ray
@pytest.mark.parametrize("nodes", [1, 2])
def test_lake_partition_path_equals_process_table(ray_local, kin_questions: list[str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, nodes: int) -> None:
    """The runner's path: map and candidate-rows tasks read the Parquet partitions themselves; with one node a map
    task returns one object for all reducers, with several (as `ray.nodes()` says) one object per reducer."""
    import pyarrow.parquet as pq

    from transforms.dedup import minhash

    monkeypatch.setattr(minhash, "alive_nodes", lambda: nodes)

    from transforms.core.planning import plan_partitions, read_partitions

    table = _ray_table(kin_questions)
    for i, start in enumerate(range(0, table.num_rows, 400)):  # three files, row groups of 150: 8 partitions
        pq.write_table(table.slice(start, 400), tmp_path / f"part-{i}.parquet", row_group_size=150)
    parts = plan_partitions(sorted(tmp_path.glob("*.parquet")), 150)
    assert len(parts) >= 8
    stage = MinHashDedup(threshold=0.7, shuffle_partitions=5, resources={"batch_size": 100}, local_max_rows=0)
    expected = stage(table)
    out = stage.run_partitions(read_partitions(parts, tracked=False), parts)
    got = pa.concat_tables(ray_local.get(out.to_arrow_refs())).sort_by(C.ID)
    assert got.column(C.ID).to_pylist() == expected.column(C.ID).to_pylist()
    assert got.column(C.DUPLICATE_OF).to_pylist() == expected.column(C.DUPLICATE_OF).to_pylist()
    assert got.column(C.DROP_REASON).to_pylist() == expected.column(C.DROP_REASON).to_pylist()
    assert table.num_rows - expected.column(C.DUPLICATE_OF).null_count >= 250


@pytest.mark.ray
def test_lake_partition_path_equals_process_table_on_real_crawl_rows(ray_local, tmp_path: Path) -> None:
    """The runner's path on real crawl rows (the bundled crawl sample, 4,600 rows with its own exact and near copies,
    cut into 10 lake partitions): the same `duplicate_of` and reason for every row as `process_table` and as the
    plain-Python definition, with the marking fused into the partitions' read tasks."""
    import pyarrow.parquet as pq

    from transforms.core.planning import plan_partitions, read_partitions

    sample = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"
    with open(sample, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    table = pa.table({C.ID: [r["id"] for r in rows], C.TEXT: [r.get("text") for r in rows]})
    for i, start in enumerate(range(0, table.num_rows, 1_000)):
        pq.write_table(table.slice(start, 1_000), tmp_path / f"part-{i}.parquet", row_group_size=250)
    parts = plan_partitions(sorted(tmp_path.glob("*.parquet")), 500)
    assert len(parts) >= 10
    stage = MinHashDedup(threshold=0.7, shuffle_partitions=4, local_max_rows=0)
    expected = stage(table).sort_by(C.ID)
    got = pa.concat_tables(ray_local.get(stage.run_partitions(read_partitions(parts, tracked=False), parts)
                                         .to_arrow_refs())).sort_by(C.ID)
    assert got.column(C.ID).to_pylist() == expected.column(C.ID).to_pylist()
    assert got.column(C.DUPLICATE_OF).to_pylist() == expected.column(C.DUPLICATE_OF).to_pylist()
    assert got.column(C.DROP_REASON).to_pylist() == expected.column(C.DROP_REASON).to_pylist()
    reference = _reference_duplicate_of(stage, table.column(C.ID).to_pylist(), table.column(C.TEXT).to_pylist())
    dropped = got.filter(got.column(C.DUPLICATE_OF).is_valid())
    assert dict(zip(dropped.column(C.ID).to_pylist(), dropped.column(C.DUPLICATE_OF).to_pylist(), strict=True)) \
        == reference
    assert len(reference) > 500  # the sample's own copies

