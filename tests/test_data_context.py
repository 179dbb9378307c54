"""Ray Data settings every run gets from init_ray, whether it started Ray or joined one."""

from __future__ import annotations

import pytest

from transforms.core import execution


@pytest.mark.ray
def test_a_slow_llm_batch_does_not_trip_ray_datas_no_progress_timeout(ray_local, monkeypatch):
    ctx = ray_local.data.DataContext.get_current()
    if not hasattr(ctx, "execution_no_progress_timeout_s"):
        pytest.skip("this Ray Data has no no-progress timeout")
    ctx.execution_no_progress_timeout_s = 1800.0  # Ray's default: a 30-min batch would fail the stage
    execution.init_ray(num_cpus=2)  # already running: only the context is configured
    assert ctx.execution_no_progress_timeout_s == execution.NO_PROGRESS_TIMEOUT_S > 1800
    monkeypatch.setenv("PIQAFORGE_NO_PROGRESS_TIMEOUT_S", "-1")  # a user may turn it off
    execution.init_ray(num_cpus=2)
    assert ctx.execution_no_progress_timeout_s == -1
    monkeypatch.delenv("PIQAFORGE_NO_PROGRESS_TIMEOUT_S")
    execution.init_ray(num_cpus=2)
