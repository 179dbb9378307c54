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


def test_a_raylet_that_registers_late_gets_another_start_and_other_errors_do_not(monkeypatch):
    import ray

    calls: list[str] = []

    def init(**kwargs):
        calls.append(kwargs["address"])
        if len(calls) == 1:  # Ray's own message when its fixed 30 s pass on a loaded machine
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setattr(execution, "_configure_data_context", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    execution.init_ray(num_cpus=2)
    assert calls == ["local", "shutdown", "local"]

    def broken(**kwargs):
        calls.append("broken")
        raise ValueError("object_store_memory is too large")

    calls.clear()
    monkeypatch.setattr(ray, "init", broken)
    with pytest.raises(ValueError, match="too large"):
        execution.init_ray(num_cpus=2)
    assert calls == ["broken"]  # not retried
