"""Helpers for the tests that run whole jobs as subprocesses and compare their outputs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.core import columns as C

# The LLM back half off: for tests about the front half and the Ray cluster.
FRONT_HALF_ONLY = ["--set", "ensemble=false"]
# The LLM back half shrunk to fit a test: the distilled prefilter (the ensemble labels a 96-row sample)
# passes 1% of the rows on to the ensemble stage (one actor, answers cached in chunks of 16 rows); the
# items runs (refinement, review) are off.
SHRUNK_BACK_HALF = ["--set", "prefilter=distilled", "--set", "runs.crawl.stages.distilled_prefilter.sample_size=96",
                    "--set", "runs.crawl.stages.distilled_prefilter.max_pass_rate=0.01", "--set", "items=false"]
# The crawl run of a ko-piqa recipe run (its id is <recipe run id>-crawl).
CRAWL = "-crawl"
ROOT = Path(__file__).resolve().parents[1]
KO_SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
# The whole ko-piqa job, LLM back half included, shrunk (SHRUNK_BACK_HALF), on the bundled 4,600-row sample.
SHRUNK_JOB_ARGS = ["--set", "num_cpus=2", "--set", f"input.paths=[{KO_SAMPLE}]", *SHRUNK_BACK_HALF]
# The undisturbed run of that job that the SIGKILL (core/test_resume.py) and node-loss (core/test_node_failure.py)
# tests compare with: made once per session in one lake (tests/conftest.py shrunk_clean_lake), under this run id.
SHRUNK_CLEAN_RUN = "clean"


def shrunk_job(lake: Path, *args: str) -> list[str]:
    """`piqaforge run ko-piqa` shrunk (SHRUNK_JOB_ARGS) on `lake`, with `args` (a run id, --resume ...)."""
    return [str(ROOT / ".venv" / "bin" / "piqaforge"), "run", "ko-piqa", "--lake", str(lake), *args, *SHRUNK_JOB_ARGS]


def shrunk_job_env() -> dict[str, str]:
    """A local Ray instance of its own (never an address the test process has), partitions of 200 rows."""
    env = dict(os.environ, PIQAFORGE_PROGRESS="0", PIQAFORGE_PARTITION_ROWS="200",
               PIQAFORGE_OBJECT_STORE_BYTES=str(512 * 2**20))
    env.pop("RAY_ADDRESS", None)
    return env


def answer_files(lake: Path, run_id: str) -> list[Path]:
    """The chunks of LLM answers a ko-piqa run cached (runs/<id>/cache/ensemble/<classifier>/*.parquet)."""
    return sorted((lake / "runs" / run_id / "cache" / "ensemble").glob("*/*.parquet"))


def popen_logged(cmd: list[str], log: Path, **kwargs: Any) -> subprocess.Popen:
    """Start a job with its stdout and stderr in `log`, so a failure can say why (`log_tail`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)


def run_logged(cmd: list[str], log: Path, timeout: float, **kwargs: Any) -> None:
    """Run a job to the end; if it fails, the assertion shows the end of its log."""
    proc = popen_logged(cmd, log, **kwargs)
    assert proc.wait(timeout=timeout) == 0, log_tail(log)


def log_tail(log: Path, lines: int = 60) -> str:
    text = log.read_text(errors="replace").splitlines() if log.exists() else ["(no log)"]
    return f"{log}:\n" + "\n".join(text[-lines:])


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    """Equal tables; model scores may differ a little when a rerun batches rows differently: a language model's
    P(yes) moves with the padding of its batch (Gemma 3 270M on an Intel Xeon with AMX: up to 2.3e-4 between a
    clean run and a resumed one of the same rows, 7e-5 between two clean runs), so floats agree to 1e-3; every
    verdict, id and text is compared exactly."""
    assert got.schema.names == want.schema.names and got.num_rows == want.num_rows
    assert got.column(C.ID).to_pylist() == want.column(C.ID).to_pylist()
    for name in got.schema.names:
        a, b = got.column(name), want.column(name)
        if pa.types.is_floating(a.type):
            x = a.to_numpy(zero_copy_only=False).astype(float)
            y = b.to_numpy(zero_copy_only=False).astype(float)
            assert np.allclose(x, y, rtol=0, atol=1e-3, equal_nan=True), name
        else:
            assert a.equals(b), name


def ko_piqa_judges() -> dict[str, Any]:
    """The ko-piqa recipe's judges as its crawl run declares them, in the shape of the old job config:
    {"prefilter": <the supervised prefilter's fields>, "ensemble": <the ensemble's fields>} (labels absolute;
    the orchestrator's run folders left out, so a test gives its own cache)."""
    from transforms.flow.recipe import load_recipe

    stages = {s.stage: s.fields for s in load_recipe("ko-piqa").run("crawl").stages}
    drop = ("stage", "when", "output_dir", "embed_cache_dir", "cache_dir")
    return {"prefilter": {k: v for k, v in stages["supervised_prefilter"].items() if k not in drop},
            "ensemble": {k: v for k, v in stages["ensemble"].items() if k not in drop}}
