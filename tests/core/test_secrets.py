"""Secrets never land in the lake, the report, the console or our logs (issue 19, docs/secrets.md).

The canary tests plant a different random canary in every place a user might put a secret: an
environment variable forwarded by name (`secrets:`), a literal `runtime_env.env_vars` value in a config
file, an engine `base_url` with userinfo, and a `--set` item. They run ko-piqa (front half, then the LLM
ensemble on two OpenAI-compatible engines pointed at a real HTTP server on 127.0.0.1, prefilter off)
and scan every file of the lake (Parquet decoded too), the report, the captured console and our log
file: zero hits. The server checks each engine's credentials, so the run also shows that the key
forwarded by name reached the workers (which were started before the variable was set) and
authenticated. The local run is in-process on the shared local Ray; the slow test goes through a real
Ray Jobs API head with `piqaforge submit` and also checks what Ray itself recorded about the job.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import secrets
import stat
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from test_submit import jobs_client, ray_head  # noqa: F401,F811  (the real Jobs API head fixture)

from jobs import JOBS
from jobs.config import load_job_module
from jobs.submit import seal, split_secret_sets, unseal
from transforms.core import secrets as S
from transforms.core.manifest import RunManifest, StageRecord, fingerprint_config
from transforms.core.stage import Resources
from transforms.report.run_report import render_report

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
KEY_VAR = "PIQAFORGE_TEST_API_KEY"
URL_USER = "crawler"


# -- a real OpenAI-compatible endpoint that checks credentials ------------------------------------------
class _Endpoint(BaseHTTPRequestHandler):
    bearer = ""
    basic = ""
    seen: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        auth = self.headers.get("Authorization", "")
        kind = ("bearer" if auth == f"Bearer {self.bearer}" else
                "basic" if auth == "Basic " + base64.b64encode(self.basic.encode()).decode() else "refused")
        type(self).seen.append(kind)
        if kind == "refused" or not self.path.endswith("/completions"):
            self.send_response(401)
            self.end_headers()
            return
        # "yes" for every other prompt, by length: a real decision the ensemble has to combine
        yes = len(body.get("prompt", "")) % 2 == 0
        top = {"예": -0.05, "아니오": -3.0} if yes else {"예": -3.0, "아니오": -0.05}
        data = json.dumps({"choices": [{"text": "", "logprobs": {"top_logprobs": [top]}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # keep the test's console to what the job printed
        pass


@pytest.fixture
def fresh_ray(ray_local):
    """Ray restarted for one test. A pooled worker that unpickled a stage keeps the secrets forwarded to it
    in its environment for the rest of the driver's Ray job (the stage needs them there), so an earlier
    test in this session would otherwise leave the canary in a worker this test's precondition asks."""
    from transforms.core.runner import init_ray

    ray_local.shutdown()
    init_ray(num_cpus=2)
    yield ray_local


@pytest.fixture
def canaries():
    return {place: f"cnry-{place}-{secrets.token_hex(8)}" for place in ("forwarded", "envvars", "url", "set")}


@pytest.fixture
def endpoint(canaries):
    handler = type("Endpoint", (_Endpoint,), {"bearer": canaries["forwarded"], "seen": [],
                                              "basic": f"{URL_USER}:{canaries['url']}"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()


def job_files(tmp: Path, canaries: dict[str, str], port: int) -> tuple[Path, Path, list[str]]:
    """A 40-row input, a config file with a literal secret and two engines, and the --set items."""
    small = tmp / "ko_small.jsonl"
    small.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:40]), encoding="utf-8")
    engine = {"backend": "openai", "model": "stub", "params_b": 1}
    # a recipe `--config` file: params and dotted keys into the ko-piqa recipe's crawl run
    config = {
        "secrets": [KEY_VAR],
        "params": {"items": False},
        "runs.crawl.stages.normalize.resources": {"runtime_env": {"env_vars": {"OPENAI_API_KEY": canaries["envvars"]}}},
        "runs.crawl.stages.ensemble.chunk_size": 8,
        "runs.crawl.stages.ensemble.classifiers": [
            {"name": "by-name", "prompt": "classify_piqa/ko", "threshold": 0.5,
             "engine": {**engine, "options": {"base_url": f"http://127.0.0.1:{port}/v1",
                                              "api_key_env": KEY_VAR, "max_retries": 0}}},
            {"name": "by-url", "prompt": "classify_piqa/ko", "threshold": 0.5,
             "engine": {**engine, "options": {
                 "base_url": f"http://{URL_USER}:{canaries['url']}@127.0.0.1:{port}/v1",
                 "api_key_env": "PIQAFORGE_TEST_UNSET_KEY", "max_retries": 0}}}],
        "runs.crawl.stages.cultural_tag.when": False,
        "runs.crawl.stages.sample.when": False,
    }
    path = tmp / "secret_job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    sets = ["--set", "prefilter=null",
            "--set", f"runs.crawl.stages.langid.resources.runtime_env.env_vars.HF_TOKEN={canaries['set']}"]
    return small, path, sets


def hits(canaries: dict[str, str], *, lake: Path, texts: dict[str, str]) -> list[str]:
    """Where any canary appears: every file under the lake (Parquet values decoded) and the given texts."""
    found = []
    for path in sorted(p for p in lake.rglob("*") if p.is_file()):
        blobs = [path.read_bytes().decode("utf-8", "replace")]
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            blobs += [json.dumps(table.to_pylist(), default=str, ensure_ascii=False),
                      str(table.schema.metadata)]
        found += [f"{place} in {path}" for place, c in canaries.items() for b in blobs if c in b]
    found += [f"{place} in {name}" for name, text in texts.items() for place, c in canaries.items() if c in text]
    return found


def check_run(lake: Path, run_id: str, handler: type[_Endpoint]) -> RunManifest:
    manifest = RunManifest.load(lake / "runs" / f"{run_id}-crawl" / "manifest.json")
    assert manifest.status == "succeeded", manifest.error
    names = [s.name for s in manifest.stages]
    assert names[:2] == ["read_crawl", "normalize"] and "ensemble" in names
    ensemble = next(s for s in manifest.stages if s.name == "ensemble")
    assert ensemble.rows_in > 0 and 0 < ensemble.rows_kept < ensemble.rows_in  # real answers were combined
    # both engines authenticated: the forwarded key as a bearer token, the URL's userinfo as basic auth
    assert {"bearer", "basic"} <= set(handler.seen) and "refused" not in handler.seen
    # what the records say instead
    normalize = next(s for s in manifest.stages if s.name == "normalize")
    assert normalize.config["resources"]["runtime_env"]["env_vars"] == {"OPENAI_API_KEY": S.REDACTED}
    assert normalize.config["resources"]["secrets"] == [KEY_VAR]
    checkpoint = json.loads((Path(normalize.outputs["kept"]) / "_CHECKPOINT.json").read_text())
    assert checkpoint["config"]["resources"]["runtime_env"]["env_vars"]["OPENAI_API_KEY"] == S.REDACTED
    key = lake / ".piqaforge" / "fingerprint.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    return manifest


# -- the local run ----------------------------------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_no_canary_after_a_short_local_chain(fresh_ray, tmp_path, canaries, endpoint, monkeypatch, capfd, caplog):
    """Default tier: the same canaries through the recipe loader and the runner, on read → normalize → ensemble."""
    from transforms.core.lake import Lake
    from transforms.core.runner import run_pipeline
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    port, handler = endpoint
    monkeypatch.setenv(KEY_VAR, canaries["forwarded"])
    assert fresh_ray.get(fresh_ray.remote(lambda: os.environ.get(KEY_VAR)).remote()) is None
    small, config_file, sets = job_files(tmp_path, canaries, port)
    lake = tmp_path / "lake"
    overrides = dict(item.split("=", 1) for item in sets[1::2])
    caplog.set_level(logging.INFO)
    recipe = load_recipe("ko-piqa", {**overrides, "prefilter": None, "input.paths": [str(small)]},
                         config_file=str(config_file))
    source, stages = run_stages(recipe, "crawl", lake=lake, run_id="short-1")
    S.bind_fingerprint_key(lake)
    chain = [s for s in stages if s.name in ("normalize", "ensemble")]
    run_pipeline(job="ko-piqa:crawl", dataset="ko-piqa", source=source, stages=chain, lake=Lake(lake), config={},
                 run_id="short-1-crawl")
    out, err = capfd.readouterr()
    check_run(lake, "short-1", handler)
    assert "langid.resources.runtime_env.env_vars.HF_TOKEN holds a literal secret" in caplog.text
    assert hits(canaries, lake=lake, texts={"stdout": out, "stderr": err, "log records": caplog.text}) == []


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.ci
def test_no_canary_anywhere_after_a_local_run(fresh_ray, tmp_path, canaries, endpoint, monkeypatch, capfd,
                                              caplog):
    from jobs.cli import main

    port, handler = endpoint
    # Ray and its workers started before the variable exists: only forwarding can bring it to them.
    monkeypatch.setenv(KEY_VAR, canaries["forwarded"])
    assert fresh_ray.get(fresh_ray.remote(lambda: os.environ.get(KEY_VAR)).remote()) is None
    small, config, sets = job_files(tmp_path, canaries, port)
    lake = tmp_path / "lake"
    log_file = tmp_path / "piqaforge.log"
    file_handler = logging.FileHandler(log_file)
    logging.getLogger().addHandler(file_handler)
    caplog.set_level(logging.INFO)
    try:
        code = main(["run", "ko-piqa", "--lake", str(lake), "--input", str(small), "--config", str(config),
                     "--run-id", "local-1", *sets])
    finally:
        logging.getLogger().removeHandler(file_handler)
        file_handler.close()
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    manifest = check_run(lake, "local-1", handler)
    warnings = caplog.text
    for field in ("normalize.resources.runtime_env.env_vars.OPENAI_API_KEY",
                  "langid.resources.runtime_env.env_vars.HF_TOKEN", "ensemble.classifiers[1].engine.options.base_url"):
        assert f"{field} holds a literal secret" in warnings and "secrets: [NAME]" in warnings
    report = (lake / "runs" / "local-1-crawl" / "report.html").read_text(encoding="utf-8")
    assert manifest.run_id in report
    assert hits(canaries, lake=lake, texts={"stdout": out, "stderr": err, "log records": caplog.text,
                                            "log file": log_file.read_text()}) == []


# -- through a real Jobs API head -------------------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.alone  # a whole Ray head beside another test's load can lose its job agent
@pytest.mark.timeout(1800)
@pytest.mark.ci
def test_no_canary_anywhere_after_piqaforge_submit(ray_head, tmp_path, canaries, endpoint):  # noqa: F811
    """The head (tests/jobs/test_submit.py's fixture) starts without the key: only `piqaforge submit` brings it."""

    port, handler = endpoint
    small, config, sets = job_files(tmp_path, canaries, port)
    lake = tmp_path / "lake"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env[KEY_VAR] = canaries["forwarded"]  # the submitting shell's environment, nobody else's
    result = subprocess.run([str(ROOT / ".venv" / "bin" / "piqaforge"), "submit", "ko-piqa", "--address", ray_head,
                             "--lake", str(lake), "--input", str(small), "--config", str(config),
                             "--run-id", "sub-secret", *sets], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ko-piqa: done" in result.stdout and "forwarding secret(s) ['PIQAFORGE_TEST_API_KEY']" in result.stdout
    check_run(lake, "sub-secret", handler)
    # what Ray recorded about the job, as the CLI and SDK get it (the dashboard hides env_vars from browsers only)
    client = jobs_client(ray_head)
    job = next(j for j in client.list_jobs() if (j.submission_id or "").startswith("sub-secret-"))
    recorded = json.dumps(job.model_dump() if hasattr(job, "model_dump") else job.dict(), default=str)
    pointer = job.runtime_env["env_vars"]["PIQAFORGE_SECRETS_URI"]
    assert pointer.startswith("gcs://_piqaforge_secrets_")
    package = pointer[len("gcs://"):]
    assert client._do_request("GET", f"/api/packages/gcs/{package}").status_code == 404  # the driver deleted it
    # Ray's own logs on the head, as the dashboard serves them (runtime_env_agent.log, raylet, job driver...)
    ray_logs = {}
    for node in client._do_request("GET", "/api/v0/nodes").json()["data"]["result"]["result"]:
        node_id = node["node_id"]
        listing = client._do_request("GET", f"/api/v0/logs?node_id={node_id}&glob=*").json()["data"]["result"]
        for name in (n for files in listing.values() for n in files):
            response = client._do_request("GET", f"/api/v0/logs/file?node_id={node_id}&filename={name}&lines=-1")
            ray_logs[f"Ray log {name}"] = response.content.decode("utf-8", "replace")
    assert any("runtime_env_agent" in name for name in ray_logs)
    assert hits(canaries, lake=lake, texts={"submit stdout": result.stdout, "submit stderr": result.stderr,
                                            "Ray's job record": recorded, **ray_logs}) == []


# -- pieces -----------------------------------------------------------------------------------------------
def test_credential_names_and_what_is_recorded():
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "db_password", "clientSecret", "AWS_SECRET_ACCESS_KEY", "api_key",
                 "OPENAI_KEY", "key", "AZURE_SUBSCRIPTION_KEY"):
        assert S.credential_name(name), name
    for name in ("max_tokens", "tokenizer", "api_key_env", "secrets", "TOKENIZERS_PARALLELISM", "sort_keys",
                 "Key_Properties_Materials", "cache_key", "key_points", "partition_key"):
        assert not S.credential_name(name), name
    config = {"resources": {"runtime_env": {"env_vars": {"A": "plain-value-1", "HF_TOKEN": "hf_abcdefgh"}},
                            "secrets": ["HF_TOKEN"]},
              "engine": {"api_key": "sk-abcdefgh", "api_key_env": "OPENAI_API_KEY", "max_tokens": 8,
                         "require_api_key": True, "base_url": "https://me:pw-123456@host/v1"}}
    assert S.redact(config) == {
        "resources": {"runtime_env": {"env_vars": {"A": S.REDACTED, "HF_TOKEN": S.REDACTED}}, "secrets": ["HF_TOKEN"]},
        "engine": {"api_key": S.REDACTED, "api_key_env": "OPENAI_API_KEY", "max_tokens": 8,
                   "require_api_key": True, "base_url": f"https://{S.REDACTED}@host/v1"}}
    found = dict(S.literal_secrets(config))
    assert set(found) == {"resources.runtime_env.env_vars.HF_TOKEN", "engine.api_key", "engine.base_url"}
    # the literals found are scrubbed from free text too (an error message, a log line)
    assert S.scrub_text("failed with sk-abcdefgh at hf_abcdefgh") == f"failed with {S.REDACTED} at {S.REDACTED}"


def test_no_field_of_any_job_looks_like_a_credential():
    """Fingerprints ignore credential-named values: a real setting with such a name would stop re-running."""
    from transforms.flow.registry import STAGES, stage_class

    schemas = {job: load_job_module(job).Config.model_json_schema() for job in sorted(JOBS)}
    schemas.update({name: stage_class(name).model_json_schema() for name in STAGES})
    for job, schema in schemas.items():
        names: set[str] = set()
        todo: list = [schema]
        while todo:
            node = todo.pop()
            if isinstance(node, dict):
                names.update(node.get("properties", {}))
                todo += node.values()
            elif isinstance(node, list):
                todo += node
        assert not [n for n in names if S.credential_name(n)], job


def test_fingerprints_ignore_credentials_and_key_other_env_vars(tmp_path):
    def stage(key, setting):
        return {"name": "x", "resources": {"runtime_env": {"env_vars": {"OPENAI_API_KEY": key, "MODE": setting}},
                                           "secrets": ["OPENAI_API_KEY"]},
                "engine": {"base_url": f"https://u:{key}@h/v1"}}

    S.bind_fingerprint_key(tmp_path)
    first = fingerprint_config("up", stage("sk-old-123456", "fast"))
    assert fingerprint_config("up", stage("sk-new-654321", "fast")) == first  # a rotated key re-runs nothing
    assert fingerprint_config("up", stage("sk-old-123456", "exact")) != first  # another setting does
    view = json.dumps(S.fingerprint_view(stage("sk-old-123456", "fast")))
    assert "sk-old" not in view and "fast" not in view and "hmac-sha256:" in view
    # another lake, another key: the same setting hashes differently, so a hash says nothing across lakes
    S.bind_fingerprint_key(tmp_path / "other")
    assert json.dumps(S.fingerprint_view(stage("k", "fast"))) != view.replace("sk-old-123456", "k")
    # no secrets at all: exactly the old fingerprint (finished checkpoints stay valid)
    plain = {"name": "y", "resources": {"cpus": 1, "secrets": []}}
    old = __import__("hashlib").sha256(json.dumps([{"name": "y", "resources": {"cpus": 1}}],
                                                  sort_keys=True).encode()).hexdigest()[:16]
    assert fingerprint_config(plain) == old
    assert stat.S_IMODE((tmp_path / ".piqaforge" / "fingerprint.key").stat().st_mode) == 0o600


def test_secret_values_travel_with_the_pickled_stage_not_the_runtime_env(monkeypatch):
    monkeypatch.setenv("PIQAFORGE_T_TOKEN", "forwarded-value-1")
    res = Resources(secrets=["PIQAFORGE_T_TOKEN"],
                    runtime_env={"env_vars": {"SERVICE_PASSWORD": "literal-value-2", "MODE": "x"}})
    args = res.ray_remote_args()
    assert args["runtime_env"] == {"env_vars": {"MODE": "x"}}  # Ray logs runtime_envs in plain text
    blob = pickle.dumps(res)
    monkeypatch.delenv("PIQAFORGE_T_TOKEN")
    monkeypatch.delenv("SERVICE_PASSWORD", raising=False)
    pickle.loads(blob)  # what a worker does with the stage it is sent
    assert os.environ["PIQAFORGE_T_TOKEN"] == "forwarded-value-1"
    assert os.environ.pop("SERVICE_PASSWORD") == "literal-value-2"
    assert "forwarded-value-1" not in json.dumps(res.model_dump())
    with pytest.raises(ValueError, match="not names"):
        Resources(secrets=["sk live key"])
    monkeypatch.delenv("PIQAFORGE_T_TOKEN")
    with pytest.raises(RuntimeError, match="not set in the environment"):
        res.ray_remote_args()


def test_recipe_secrets_reach_every_stage_and_must_be_set(monkeypatch, tmp_path):
    from jobs.cli import main
    from transforms.flow.recipe import load_recipe, secret_names_of
    from transforms.flow.runs.common import run_stages

    monkeypatch.delenv(KEY_VAR, raising=False)
    assert main(["run", "ko-piqa", "--lake", str(tmp_path), "--set", f"secrets=[{KEY_VAR}]"]) == 2
    monkeypatch.setenv(KEY_VAR, "value-abcdef")
    recipe = load_recipe("ko-piqa", {"secrets": [KEY_VAR], "runs.crawl.stages.minhash_dedup.resources.secrets": ["HOME"]})
    _, stages = run_stages(recipe, "crawl", lake=tmp_path)
    by_name = {s.name: s for s in stages}
    assert by_name["normalize"].resources.secrets == [KEY_VAR]
    assert by_name["minhash_dedup"].resources.secrets == ["HOME", KEY_VAR]
    assert secret_names_of(recipe) == ["HOME", KEY_VAR]


def test_records_and_report_are_redacted():
    record = StageRecord(index=1, name="s", rows_in=1, rows_kept=1, seconds=0.1,
                         config={"resources": {"runtime_env": {"env_vars": {"X": "value-0001"}}},
                                 "api_token": "tok-000001"})
    manifest = RunManifest(run_id="r", job="j", dataset="d", stages=[record],
                           error="ConnectError: http://u:pw-0000001@host/v1 refused",
                           config={"engine": {"password": "pw-0000002"}}, extras={"traceback": "pw-0000002"})
    S.register_secret_values(["pw-0000002"])
    text = manifest.model_dump_json() + render_report(manifest)
    for value in ("value-0001", "tok-000001", "pw-0000001", "pw-0000002"):
        assert value not in text
    assert json.loads(manifest.model_dump_json())["stages"][0]["config"]["api_token"] == S.REDACTED


def test_submit_moves_secret_sets_out_of_the_entrypoint_and_seals_them():
    kept, moved = split_secret_sets(["--lake", "/l", "--set", "langid.min_score=0.5",
                                     "--set", "a.runtime_env.env_vars.HF_TOKEN=hf_secret1"])
    assert kept == ["--lake", "/l", "--set", "langid.min_score=0.5"]
    assert moved == ["a.runtime_env.env_vars.HF_TOKEN=hf_secret1"]
    payload = {"env": {"K": "secret-value-1"}, "set": moved}
    pad, blob = seal(payload)
    assert b"secret-value-1" not in blob and b"hf_secret1" not in blob
    assert "secret-value-1" not in base64.b64decode(pad).decode("latin-1")
    assert unseal(pad, blob) == payload


def test_literal_warning_names_the_field(tmp_path, caplog):
    from transforms.flow.recipe import load_recipe

    path = tmp_path / "c.yaml"
    path.write_text("runs.crawl.stages.normalize.resources: {runtime_env: {env_vars: {HF_TOKEN: hf_zzzzzzzz}}}\n")
    with caplog.at_level(logging.WARNING, logger="piqaforge"):
        load_recipe("ko-piqa", config_file=str(path))
    assert "normalize.resources.runtime_env.env_vars.HF_TOKEN holds a literal secret" in caplog.text
    assert "secrets: [NAME]" in caplog.text and "hf_zzzzzzzz" not in caplog.text


def test_the_scan_finds_a_canary_in_parquet_values_and_plain_files(tmp_path):
    import pyarrow as pa

    canary = {"x": "cnry-x-0123456789abcdef"}
    pq.write_table(pa.table({"text": [f"row {i} {canary['x'] if i == 500 else ''}" for i in range(1000)]}),
                   tmp_path / "a.parquet", compression="zstd")
    assert canary["x"].encode() not in (tmp_path / "a.parquet").read_bytes()  # compressed: bytes alone miss it
    assert hits(canary, lake=tmp_path, texts={}) == [f"x in {tmp_path / 'a.parquet'}"]
    (tmp_path / "m.json").write_text(json.dumps({"url": f"https://u:{canary['x']}@h"}))
    assert len(hits(canary, lake=tmp_path, texts={"console": "nothing"})) == 2
