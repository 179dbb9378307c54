"""Semantic dedup: kNN backends against brute-force numpy, SemDeDup recall, the keep rule, real goals."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from transforms.dedup.semantic import SemanticDedup, char_ngram_pairs, clustered_pairs, greedy_keep
from transforms.embed.base import UnsupportedLanguageError
from transforms.embed.knn import KnnConfig, similar_pairs
from transforms.piqa.formats import read_piqa, read_xcopa


def planted(n: int, d: int, groups: int, noise: float, seed: int = 0) -> np.ndarray:
    """Random unit vectors; the first `groups` rows each get 1-3 noisy copies appended."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    copies = [x[g] + noise * rng.standard_normal(d).astype(np.float32)
              for g in range(groups) for _ in range(1 + g % 3)]
    x = np.vstack([x, np.array(copies, dtype=np.float32).reshape(-1, d)])
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute_pairs(x: np.ndarray, threshold: float) -> set[tuple[int, int]]:
    sims = x @ x.T
    i, j = np.nonzero(np.triu(sims >= threshold, k=1))
    return set(zip(i.tolist(), j.tolist(), strict=True))


@pytest.mark.floats
@pytest.mark.parametrize("backend", ["faiss-cpu", "sklearn"])
def test_similar_pairs_equal_brute_force(backend):
    x = planted(3000, 64, 100, noise=0.03)
    got = similar_pairs(x, 0.85, KnnConfig(backend=backend))
    expected = brute_pairs(x, 0.85)
    assert len(expected) >= 100 + 100  # every planted copy, plus copy-copy pairs
    assert set(map(tuple, got.tolist())) == expected


@pytest.mark.floats
def test_clustered_recall_against_exact():
    x = planted(10000, 64, 300, noise=0.05, seed=1)
    exact = set(map(tuple, similar_pairs(x, 0.85).tolist()))
    one = set(map(tuple, clustered_pairs(x, 0.85, n_probe=1).tolist()))
    two = set(map(tuple, clustered_pairs(x, 0.85, n_probe=2).tolist()))
    assert one <= exact and two <= exact  # clustering can miss pairs, never invent them
    recall1, recall2 = len(one) / len(exact), len(two) / len(exact)
    assert recall1 >= 0.9
    assert recall2 >= recall1


def test_greedy_keep_chain_and_order():
    # a~b, b~c, a≁c: keeping a drops b, and c survives (no dropping through a chain)
    assert greedy_keep(3, np.array([[0, 1], [1, 2]]), np.arange(3)).tolist() == [-1, 0, -1]
    # visiting order decides who survives: row 2 first
    assert greedy_keep(3, np.array([[0, 2], [1, 2]]), np.array([2, 0, 1])).tolist() == [2, 2, -1]


@pytest.fixture(scope="module")
def piqa_goals(shared_data):
    d = shared_data / "piqa_en"
    return read_piqa(d / "valid.jsonl", d / "valid-labels.lst").slice(0, 400).select(["id", "lang", "goal"])


@pytest.mark.floats
def test_stage_on_real_piqa_goals(piqa_goals):
    stage = SemanticDedup(threshold=0.85)
    out = stage(piqa_goals)
    assert out.num_rows == piqa_goals.num_rows
    ids = out.column("id").to_pylist()
    goals = out.column("goal").to_pylist()
    dup_of = out.column("duplicate_of").to_pylist()
    reasons = out.column("drop_reason").to_pylist()
    assert all((d is None) == (r is None) for d, r in zip(dup_of, reasons, strict=True))
    assert set(filter(None, reasons)) == {"semantic_duplicate"}
    # identical goals (compared here as strings) always collapse onto the smallest id
    first_seen: dict[str, str] = {}
    for i, g in sorted(zip(ids, goals, strict=True)):
        if g in first_seen:
            assert dup_of[ids.index(i)] is not None
        first_seen.setdefault(g, i)
    assert dup_of[ids.index("piqa-valid-00270")] == "piqa-valid-00013"  # both goals are "peeler"
    # invariants, checked with our own cosine: kept rows are pairwise below the threshold, and a
    # dropped row points at a kept, smaller id at or above it
    v = stage.embed([str(g) for g in goals])
    sims = v @ v.T
    kept = [k for k, d in enumerate(dup_of) if d is None]
    ks = sims[np.ix_(kept, kept)]
    assert (ks[np.triu_indices(len(kept), 1)] < 0.85).all()
    for row, d in enumerate(dup_of):
        if d is not None:
            j = ids.index(d)
            assert dup_of[j] is None and d < ids[row] and sims[row, j] >= 0.85 - 1e-5


def test_unsupported_language_names_the_model_to_configure(shared_data):
    items = read_xcopa(shared_data / "xcopa_ta", "val").select(["id", "lang", "goal"])
    with pytest.raises(UnsupportedLanguageError, match="sentence-transformers"):
        SemanticDedup().duplicate_of(items)


def test_char_ngrams_work_in_any_script(shared_data):
    items = read_xcopa(shared_data / "xcopa_ta", "val").select(["id", "lang", "goal"])
    copy = items.slice(5, 1).to_pylist()[0]
    copy = {**copy, "id": "zz-copy", "goal": "  " + copy["goal"].replace(".", " ") + "  "}
    table = pa.concat_tables([items, pa.Table.from_pylist([copy], schema=items.schema)])
    dup = SemanticDedup(representation="char-ngrams", threshold=0.9).duplicate_of(table)
    assert dup[-1] == items.column("id")[5].as_py()
    pairs = char_ngram_pairs(["a b c d", "a b c d", "x y z"], 0.99)
    assert pairs.tolist() == [[0, 1]]


@pytest.mark.floats
@pytest.mark.ray
def test_global_stage_on_ray(ray_local, piqa_goals):
    import ray

    goals = piqa_goals.slice(0, 300)  # holds the known near-duplicate pair 00013 / 00270
    local = SemanticDedup(threshold=0.85)(goals)
    assert sum(d is not None for d in local.column("duplicate_of").to_pylist()) > 0
    ds = ray.data.from_arrow(goals)
    out = pa.concat_tables(ray.get(SemanticDedup(threshold=0.85).run_dataset(ds).to_arrow_refs()))
    assert out.column("duplicate_of").to_pylist() == local.column("duplicate_of").to_pylist()


@pytest.mark.floats
def test_precomputed_vectors_and_clustered_method_give_the_same_groups():
    x = planted(3000, 32, 60, noise=0.03, seed=3)
    ids = [f"r{i:05d}" for i in range(len(x))]
    table = pa.table({"id": ids, "goal": [""] * len(x), "vec": pa.array(x.tolist(), pa.list_(pa.float32()))})
    exact = SemanticDedup(vector_column="vec", method="exact").duplicate_of(table)
    clustered = SemanticDedup(vector_column="vec", method="clustered", n_probe=3).duplicate_of(table)
    expected_pairs = brute_pairs(x, 0.85)
    assert sum(d is not None for d in exact) == len({j for _, j in expected_pairs})  # each planted copy
    assert clustered == exact


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["faiss-gpu", "cuml"])
def test_gpu_backends_match_cpu(backend):
    x = planted(5000, 64, 100, noise=0.03)
    cpu = set(map(tuple, similar_pairs(x, 0.85).tolist()))
    gpu = set(map(tuple, similar_pairs(x, 0.85, KnnConfig(backend=backend, k=16)).tolist()))
    assert gpu == cpu  # groups are ≤ 4 rows, so k=16 neighbours see every pair


def test_every_dedup_stage_leaves_an_earlier_duplicate_of_standing():
    """Exact dedup marked r3 as a copy of r0; semantic dedup agrees it is a duplicate but must not rename
    the row it duplicates, and its own finds (r4 ~ r1) are added. Vectors may be fixed-size lists."""
    x = planted(5, 16, 0, noise=0.0, seed=1)[:5]
    x[3], x[4] = x[0], x[1]
    table = pa.table({"id": [f"r{i}" for i in range(5)], "goal": [""] * 5,
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 16),
                      "drop_reason": [None, None, None, "exact_duplicate", None],
                      "duplicate_of": [None, None, None, "r0-by-exact", None]})
    out = SemanticDedup(vector_column="vec", method="exact")(table)
    assert out.column("duplicate_of").to_pylist() == [None, None, None, "r0-by-exact", "r1"]
    assert out.column("drop_reason").to_pylist() == [None, None, None, "exact_duplicate", "semantic_duplicate"]
    ragged = table.set_column(2, "vec", pa.array([[0.1, 0.2]] * 4 + [[0.3]], pa.list_(pa.float32())))
    with pytest.raises(ValueError, match="differ in length"):
        SemanticDedup(vector_column="vec", method="exact").duplicate_of(ragged)
