"""Per-stage environments: one job runs stages in different Python environments.

The behavioural test builds a second virtualenv (its own interpreter and sys.prefix, sharing the
project's packages through a .pth file, as a cuML venv would share nothing but Ray and pyarrow),
points the `cuml` preset at it with PIQAFORGE_CUML_PYTHON, and runs two stages in one pipeline on
local Ray: rows must report the venv's interpreter and the preset's marker for the cuML stage,
and the project's own interpreter for the other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.core.envs import ENV_MARKER, PRESETS, get_env
from transforms.core.lake import Lake, read_table
from transforms.core.runner import conservation_errors, run_pipeline
from transforms.core.stage import Resources, Stage

ray_cloudpickle = pytest.importorskip("ray.cloudpickle")
ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])
SAMPLE = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"


class WhereAmI(Stage):
    """Records which interpreter, venv and environment marker processed each row."""

    name: ClassVar[str] = "where_am_i"
    reads: ClassVar[tuple[str, ...]] = (C.TEXT,)
    column: str = "where"

    @property
    def writes(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.column,)

    def process(self, batch: pa.Table) -> pa.Table:
        where = f"{sys.prefix}|{os.environ.get(ENV_MARKER, '')}"
        return batch.append_column(self.column, pa.array([where] * batch.num_rows, pa.string()))


class WhereAmICuml(WhereAmI):
    name: ClassVar[str] = "where_am_i_cuml"


def test_presets_route_to_their_worker_type_and_mark_the_worker():
    args = Resources(env="vllm", gpus=1, runtime_env={"env_vars": {"HF_HOME": "/data/hf"}}).ray_remote_args()
    assert args["resources"] == {"env_vllm": 1}
    assert args["accelerator_type"] == "H100" and args["num_gpus"] == 1
    assert args["runtime_env"]["env_vars"] == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn",
                                               "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "/data/hf",
                                               ENV_MARKER: "vllm"}
    cpu = Resources(env="cpu").ray_remote_args()
    assert "resources" not in cpu and cpu["runtime_env"] == {"env_vars": {ENV_MARKER: "cpu"}}
    # a CPU-only copy of a GPU preset does not demand an H100
    assert "accelerator_type" not in Resources(env="cuml").ray_remote_args()
    assert Resources().ray_remote_args() == {"num_cpus": 1.0}
    with pytest.raises(ValueError, match="unknown environment 'rapids'"):
        Resources(env="rapids").ray_remote_args()
    assert set(PRESETS) == {"cpu", "vllm", "cuml"}


def test_python_override_adds_py_executable(monkeypatch):
    monkeypatch.setenv("PIQAFORGE_VLLM_PYTHON", "/opt/venvs/vllm/bin/python")
    assert get_env("vllm").resolved_runtime_env()["py_executable"] == "/opt/venvs/vllm/bin/python"
    monkeypatch.delenv("PIQAFORGE_VLLM_PYTHON")
    assert "py_executable" not in get_env("vllm").resolved_runtime_env()


@pytest.fixture(scope="module")
def second_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("envs") / "cuml-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths()["purelib"])  # the project's site-packages
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "share_project.pth").write_text(f"import site; site.addsitedir({str(purelib)!r})\n")
    return venv


@pytest.mark.ray
def test_one_job_runs_stages_in_two_python_environments(ray_local, second_venv, tmp_path, monkeypatch):
    monkeypatch.setenv("PIQAFORGE_CUML_PYTHON", str(second_venv / "bin" / "python"))
    from transforms.io.crawl import CrawlInput, CrawlSource

    source = CrawlSource(CrawlInput.model_validate({"paths": [str(SAMPLE)], "format": "jsonl",
                                                    "columns": {"id": "id"}}))
    stages = [WhereAmI(column="where_default"),
              WhereAmICuml(column="where_cuml", resources=Resources(env="cuml", cpus=0.5))]
    lake = Lake(tmp_path / "lake")
    manifest = run_pipeline(job="envs", dataset="envs", source=source, stages=stages, lake=lake, config={})
    assert not conservation_errors(manifest)
    rows = read_table(lake.zone("curated", "envs", manifest.run_id), columns=["where_default", "where_cuml"])
    assert rows.num_rows == 4600
    default = set(rows.column("where_default").to_pylist())
    cuml = set(rows.column("where_cuml").to_pylist())
    assert default == {f"{sys.prefix}|"}
    assert cuml == {f"{second_venv}|cuml"}
    assert str(second_venv) != sys.prefix
