"""`piqaforge submit --dry-run` and a submit that cannot reach its cluster (issue 50 §4).

The dry run checks what a submit would send with nothing started: no socket connects anywhere while it runs
(`socket.socket.connect` fails the test). A dead address is one line naming it. Every recipe has a cluster
config that loads.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from netutil import free_ports

from jobs.cli import main
from jobs.submit import EXCLUDES, upload_files

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_connections(monkeypatch):
    def refuse(self, address):  # noqa: ARG001
        raise AssertionError(f"the dry run connected to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def test_the_dry_run_checks_the_recipe_lists_the_upload_places_every_stage_and_plans_starting_nothing(
        no_connections, capsys):
    assert main(["submit", "crawl-filter", "--dry-run", "--address", "http://ray-head.invalid:8265", "--config",
                 "jobs/configs/crawl-filter-cluster.yaml", "--input", "/mnt/lake/raw/th_crawl/",
                 "--set", "language.code=th", "--rows", "20000000"]) == 0
    out = capsys.readouterr().out
    assert "nothing is uploaded or started, no address is contacted" in out
    assert "would submit to http://ray-head.invalid:8265: python -m jobs.cli run crawl-filter --config" in out
    assert "recipe: crawl-filter" in out and "7 stages built" in out
    files = upload_files()
    assert f"upload: {len(files):,} files" in out and "MiB" in out
    for where, node in (("runs.crawl.source", "cpu_worker"), ("runs.crawl.stages.langid", "cpu_worker"),
                        ("runs.crawl.stages.supervised_prefilter", "gpu_h100x1_vllm")):
        line = next(line for line in out.splitlines() if line.strip().startswith(where))
        assert node in line.split("->")[1], line
    assert "plan for crawl-filter, 20,000,000 input rows" in out and "supervised_prefilter" in out
    assert out.rstrip().endswith("piqaforge: dry run passed")


def test_a_stage_no_node_type_holds_fails_the_dry_run(tmp_path, no_connections, capsys):
    small = tmp_path / "cluster.yaml"
    small.write_text("available_node_types:\n  cpu_worker:\n    max_workers: 2\n    resources: {CPU: 8, env_cpu: 1000}\n",
                     encoding="utf-8")
    assert main(["submit", "crawl-filter", "--dry-run", "--config", "jobs/configs/crawl-filter-cluster.yaml",
                 "--cluster", str(small), "--rows", "1000"]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "supervised_prefilter" in line and "->" in line)
    assert "NO node type holds it" in line and "GPU 1 (the node has 0)" in line
    assert "dry run found 1 problem(s)" in out


def test_the_upload_list_is_what_rays_packager_would_zip(tmp_path):
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    target = tmp_path / "pkg.zip"
    create_package(str(ROOT), target, include_gitignore=False, excludes=list(EXCLUDES))
    zipped = {n for n in zipfile.ZipFile(target).namelist() if not n.endswith("/")}
    assert {path for path, _ in upload_files()} == zipped


def test_a_dead_address_is_one_line_naming_it_and_what_to_check(capsys):
    (port,) = free_ports(1)
    address = f"http://127.0.0.1:{port}"
    assert main(["submit", "crawl-filter", "--address", address]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"cannot reach the Ray Jobs API at {address}" in err and "http://HEAD:8265" in err
    assert "Traceback" not in err


def test_every_recipe_has_a_cluster_config_that_loads():
    from transforms.flow.recipe import list_recipes, load_recipe

    for name, _ in list_recipes():
        config = ROOT / "jobs" / "configs" / f"{name}-cluster.yaml"
        assert config.exists(), f"{name} has no cluster config {config.relative_to(ROOT)}"
        assert load_recipe(name, {}, config_file=str(config)).recipe == name


def test_a_wrong_address_is_one_line_too(capsys):
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):  # noqa: ARG002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)  # an HTTP server that is not a Ray head
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert main(["submit", "crawl-filter", "--address", address]) == 2
    finally:
        server.shutdown()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot reach the Ray Jobs API at {address}" in err, err
