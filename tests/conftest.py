"""Shared fixtures: real data paths and one local Ray instance per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "lake" / "samples"

os.environ.setdefault("PIQAFORGE_PROGRESS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# A stage that drops rows for a reason its class does not declare fails the test (a user's run records a warning
# instead: transforms/core/stage.py check_drop_reasons); Ray workers started by the tests inherit it.
os.environ.setdefault("PIQAFORGE_STRICT_DROP_REASONS", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.exists():
        pytest.fail(f"real test data not found at {SHARED}: clone the project next to shared/")
    return SHARED


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray instance (num_cpus=2) shared by the integration tests."""
    import ray

    from transforms.core.runner import init_ray

    os.environ.setdefault("PIQAFORGE_OBJECT_STORE_BYTES", str(1 * 2**30))
    init_ray(num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def shrunk_clean_lake(tmp_path_factory) -> Path:
    """A lake holding one undisturbed run (jobutil.SHRUNK_CLEAN_RUN) of the shrunk ko-piqa job, made once per
    session: the run that the SIGKILLed drivers (core/test_resume.py) and the lost nodes (core/test_node_failure.py)
    must equal. Their own runs go in the same lake under other run ids."""
    from jobutil import SHRUNK_CLEAN_RUN, run_logged, shrunk_job, shrunk_job_env

    lake = tmp_path_factory.mktemp("shrunk") / "lake"
    run_logged(shrunk_job(lake, "--run-id", SHRUNK_CLEAN_RUN), lake.parent / f"{SHRUNK_CLEAN_RUN}.log", timeout=1800,
               cwd=ROOT, env=shrunk_job_env())
    return lake


if os.environ.get("PIQAFORGE_TEST_OTHER_CPU"):
    # Play another CPU (tests/other_cpu/sitecustomize.py): scripts/test.sh puts that folder on PYTHONPATH so Ray's
    # workers play it too; a pytest started by hand with only the variable set plays it in this process.
    import sys

    if "sitecustomize" not in sys.modules or not getattr(sys.modules["sitecustomize"], "OTHER_CPU", ""):
        sys.path.insert(0, str(ROOT / "tests" / "other_cpu"))
        import importlib

        importlib.import_module("other_cpu_sim").apply()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure is printed the moment it happens, not only in the summary at the end: a CI run stopped at its
    time limit still shows why a test failed before it."""
    if report.failed and os.environ.get("PIQAFORGE_PRINT_FAILURES", "1") == "1":
        import sys

        sys.stderr.write(f"\n== FAILED {report.nodeid} ({report.when}, {report.duration:.0f} s)\n"
                         f"{report.longreprtext[-6000:]}\n")
        sys.stderr.flush()
