"""`dtype: auto` takes the faster dtype on the machine it runs on (transforms/embed/dtype_choice.py, issue 42).

The timings are given to the choice here, both ways round: no test times anything or asserts a speed. What is
checked is the decision, the per-machine record (one measurement per machine, the first writer's choice kept by
every later process), the log line with both figures, the fallback without bfloat16 instructions and the pin.
"""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("torch")

from transforms.embed import base, dtype_choice  # noqa: E402
from transforms.embed.base import EmbedderConfig, resolved_dtype  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setenv(dtype_choice.CACHE_ENV, str(tmp_path / "dtype"))
    monkeypatch.delenv(dtype_choice.PIN_ENV, raising=False)
    monkeypatch.setattr(dtype_choice, "_memo", {})


def _timed(monkeypatch, figures):
    calls = []

    def fake(shapes=dtype_choice.E5_SMALL, *args, **kwargs):
        calls.append(shapes)
        return dict(figures)

    monkeypatch.setattr(dtype_choice, "measure", fake)
    return calls


def _cfg(**kw) -> EmbedderConfig:
    return EmbedderConfig(**({"backend": "e5-torch", "model": "multilingual-e5-small", "device": "cpu"} | kw))


@pytest.mark.parametrize(("figures", "want"), [({"float32": 239.0, "bfloat16": 143.5}, "float32"),
                                               ({"float32": 122.7, "bfloat16": 200.0}, "bfloat16")])
def test_auto_takes_the_faster_dtype_where_bfloat16_has_instructions(monkeypatch, caplog, figures, want):
    calls = _timed(monkeypatch, figures)
    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: True)
    with caplog.at_level(logging.INFO, logger="piqaforge.embed"):
        assert resolved_dtype(_cfg(dtype="auto")) == want
    assert len(calls) == 1
    # the log says what was chosen and why: both figures
    assert f"dtype auto: {want}" in caplog.text and str(figures["float32"]) in caplog.text
    assert str(figures["bfloat16"]) in caplog.text
    [record] = dtype_choice.recorded_choices()
    assert record["choice"] == want and record["figures"] == figures
    assert record["cpu"] == dtype_choice.cpu_model() and record["torch"]


def test_one_measurement_per_machine_the_record_is_read_by_later_processes(monkeypatch):
    calls = _timed(monkeypatch, {"float32": 2.0, "bfloat16": 1.0})
    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: True)
    assert base.auto_dtype("cpu") == "float32"
    monkeypatch.setattr(dtype_choice, "_memo", {})  # another process on the same machine
    _timed(monkeypatch, {"float32": 1.0, "bfloat16": 2.0})
    assert base.auto_dtype("cpu") == "float32" and len(calls) == 1
    # another CPU model is another machine: measured afresh
    monkeypatch.setattr(dtype_choice, "cpu_model", lambda: "Some Other CPU")
    assert base.auto_dtype("cpu") == "bfloat16"
    assert len(dtype_choice.recorded_choices()) == 2


def test_a_concurrent_first_writer_wins(monkeypatch, tmp_path):
    """Two workers start together: the one that writes second takes the first one's choice."""
    _timed(monkeypatch, {"float32": 1.0, "bfloat16": 2.0})
    path = dtype_choice.cache_dir() / f"e5-{dtype_choice.machine_key()}.json"
    path.parent.mkdir(parents=True)
    real_read = dtype_choice._read
    seen = []

    def read_after_the_other_wrote(p):
        if not seen:  # this process looked first and found nothing; meanwhile the other one wrote
            seen.append(p)
            got = real_read(p)
            p.write_text(json.dumps({"choice": "float32", "figures": {"float32": 3.0, "bfloat16": 2.5}}))
            return got
        return real_read(p)

    monkeypatch.setattr(dtype_choice, "_read", read_after_the_other_wrote)
    assert dtype_choice.choose_cpu_dtype(lambda: True) == "float32"


def test_float32_without_bfloat16_instructions_and_on_a_gpu_no_measurement(monkeypatch):
    calls = _timed(monkeypatch, {"float32": 1.0, "bfloat16": 9.0})
    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: False)
    assert resolved_dtype(_cfg(dtype="auto")) == "float32"
    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: True)
    assert resolved_dtype(_cfg(dtype="auto", device="cuda")) == "float32"
    assert calls == [] and dtype_choice.recorded_choices() == []


@pytest.mark.parametrize("pinned", ["float32", "bfloat16"])
def test_the_environment_pins_auto(monkeypatch, pinned):
    calls = _timed(monkeypatch, {"float32": 1.0, "bfloat16": 1.0})
    monkeypatch.setattr(base, "cpu_multiplies_bfloat16", lambda: True)
    monkeypatch.setenv(dtype_choice.PIN_ENV, pinned)
    assert resolved_dtype(_cfg(dtype="auto")) == pinned
    assert resolved_dtype(_cfg(dtype="auto", device="cuda")) == pinned
    assert resolved_dtype(_cfg(dtype="float32")) == "float32"  # a dtype the config names is not auto's to change
    assert calls == []
    monkeypatch.setenv(dtype_choice.PIN_ENV, "int8")
    with pytest.raises(ValueError, match="PIQAFORGE_EMBED_DTYPE"):
        resolved_dtype(_cfg(dtype="auto"))


def test_the_measurement_returns_both_figures_on_e5_small_shapes():
    """The real measurement runs (a few hundred ms at most); its figures are positive, nothing about speed."""
    figures = dtype_choice.measure(tokens=32, repeats=1)
    assert set(figures) == {"float32", "bfloat16"} and all(v > 0 for v in figures.values())
