"""Fixtures the job-killing tests of this folder share."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobutil import ROOT, SHRUNK_CLEAN_RUN, run_logged, shrunk_job, shrunk_job_env


@pytest.fixture(scope="session")
def shrunk_clean_lake(tmp_path_factory) -> Path:
    """A lake holding one undisturbed run (SHRUNK_CLEAN_RUN) of the shrunk ko-piqa job, made once per session: the
    run that the SIGKILLed drivers (test_resume.py) and the lost nodes (test_node_failure.py) must equal. Their
    own runs go in the same lake under other run ids."""
    lake = tmp_path_factory.mktemp("shrunk") / "lake"
    run_logged(shrunk_job(lake, "--run-id", SHRUNK_CLEAN_RUN), lake.parent / f"{SHRUNK_CLEAN_RUN}.log", timeout=1800,
               cwd=ROOT, env=shrunk_job_env())
    return lake
