"""Slow tier: the review round trip against a real Label Studio server, and review=auto with the
real local model.

Label Studio runs from its own environment (scripts/setup_labelstudio.sh) on 127.0.0.1 with SQLite
in a temporary folder and every phone-home switch off; an HTTP(S) proxy pointing at a closed local
port makes any outbound request fail instead of leaving the machine. Four annotators sign up, get
their API tokens, and annotate as themselves through the SDK; the pull + import must reproduce the
verdicts, edits and skips, and the agreement figures must equal ones computed here from the plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.cli import main
from tests.netutil import free_ports
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.review.batch import export_run
from transforms.review.labelstudio import server_env, verdict_result

ROOT = Path(__file__).resolve().parents[2]
LS_BIN = ROOT / ".venv-labelstudio" / "bin" / "label-studio"
ADMIN, ADMIN_PASSWORD, ADMIN_TOKEN = "admin@example.com", "admin-pass-4821", "piqaforge0admin0token0a1b2c3d4"
ANNOTATORS = [f"annotator{i}@example.com" for i in range(1, 5)]
N_ITEMS = 12


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    if not LS_BIN.exists():
        pytest.skip("Label Studio is not installed: bash scripts/setup_labelstudio.sh")
    home = tmp_path_factory.mktemp("labelstudio")
    (port,) = free_ports(1)
    dead = "http://127.0.0.1:9"  # discard port, nothing listens: an outbound request fails at once
    env = {**os.environ, **server_env(home / "data"), "HOME": str(home),
           "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    with open(home / "server.log", "w") as log:
        proc = subprocess.Popen([str(LS_BIN), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port",
                                 str(port), "--username", ADMIN, "--password", ADMIN_PASSWORD, "--user-token",
                                 ADMIN_TOKEN], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield wait_until_up(proc, f"http://127.0.0.1:{port}", home / "server.log"), home
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_until_up(proc: subprocess.Popen, url: str, log: Path) -> str:
    import httpx

    deadline = time.time() + 900  # the first start migrates a fresh SQLite database: minutes on a busy machine
    while True:
        if proc.poll() is not None:
            pytest.fail(f"Label Studio exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=5, trust_env=False).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            pytest.fail(f"Label Studio did not come up in 15 min:\n{log.read_text()[-3000:]}")
        time.sleep(3)


def sign_up(url: str, email: str, password: str) -> str:
    """Sign up through the web form (as a person would) and read the account's API token."""
    import httpx

    with httpx.Client(base_url=url, follow_redirects=True, trust_env=False, timeout=60) as c:
        c.get("/user/signup/")
        c.post("/user/signup/", data={"email": email, "password": password,
                                      "csrfmiddlewaretoken": c.cookies.get("csrftoken")},
               headers={"Referer": f"{url}/user/signup/"})
        r = c.get("/api/current-user/token")
        assert r.status_code == 200, f"sign-up of {email} failed: {r.status_code} {r.text[:300]}"
        return str(r.json()["token"])


def plan(shared_data: Path) -> tuple[pa.Table, dict[tuple[str, str], dict]]:
    """Real PIQA dev items; annotators 1-3 give the real survey answers of the item's three
    annotators, annotator 4 the PIQA gold label; plus one edit and one skip."""
    base = shared_data / "annot_piqa_qualtrics_en"
    items = [json.loads(line) for line in (base / "piqa_items.jsonl").open(encoding="utf-8")][:N_ITEMS]
    real: dict[str, list[int]] = {}
    for line in (base / "piqa_annotations.jsonl").open(encoding="utf-8"):
        a = json.loads(line)
        real.setdefault(a["item_id"], []).append(a["label"])
    table = pa.table({"id": [d["item_key"] for d in items], "lang": ["en"] * N_ITEMS,
                      "goal": [d["goal"] for d in items], "sol1": [d["sol1"] for d in items],
                      "sol2": [d["sol2"] for d in items], "label": [d["gold_label"] for d in items],
                      "prelabel": [["sol1", "sol2"][d["gold_label"]] if i % 2 == 0 else None
                                   for i, d in enumerate(items)]})
    verdicts: dict[tuple[str, str], dict] = {}
    for d in items:
        labels = [*real[d["item_key"]][:3], d["gold_label"]]
        for who, lab in zip(ANNOTATORS, labels, strict=True):
            verdicts[(d["item_key"], who)] = {"verdict": ["sol1", "sol2"][lab], "edits": {}, "skip": False}
    first, last = items[0]["item_key"], items[-1]["item_key"]
    for who in ANNOTATORS:  # everyone agrees on item 0; annotator 3 also fixes solution 1's wording
        verdicts[(first, who)]["verdict"] = ["sol1", "sol2"][items[0]["gold_label"]]
    verdicts[(first, ANNOTATORS[2])]["edits"] = {"sol1": items[0]["sol1"].strip() + " (carefully)"}
    verdicts[(last, ANNOTATORS[1])]["skip"] = True
    return table, verdicts


def fleiss_np(rows: list[list[str]]) -> float:
    cats = sorted({v for r in rows for v in r})
    counts = np.array([[r.count(c) for c in cats] for r in rows], float)
    n = counts.sum(1)[0]
    p_i = (counts * (counts - 1)).sum(1) / (n * (n - 1))
    p_j = counts.sum(0) / counts.sum()
    return float((p_i.mean() - (p_j**2).sum()) / (1 - (p_j**2).sum()))


def alpha_nominal_np(units: list[list[str]]) -> float:
    cats = sorted({v for u in units for v in u})
    o = np.zeros((len(cats), len(cats)))
    for u in (u for u in units if len(u) >= 2):
        for i in range(len(u)):
            for j in range(len(u)):
                if i != j:
                    o[cats.index(u[i]), cats.index(u[j])] += 1 / (len(u) - 1)
    n_c = o.sum(1)
    n = n_c.sum()
    return float(1 - (n - 1) * (o.sum() - np.trace(o)) / (np.outer(n_c, n_c).sum() - (n_c**2).sum()))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_label_studio_round_trip(label_studio, shared_data, tmp_path):
    from label_studio_sdk import LabelStudio

    url, home = label_studio
    lake = Lake(tmp_path / "lake").create()
    table, verdicts = plan(shared_data)
    curated = lake.zone("curated", "piqa-dev", "run-ls")
    curated.mkdir(parents=True)
    import pyarrow.parquet as pq

    pq.write_table(table, curated / "part-00000.parquet")
    RunManifest(run_id="run-ls", job="ko-piqa", dataset="piqa-dev", status="succeeded",
                outputs={"curated": str(curated)}).write(lake.manifest_path("run-ls"))
    export_run(lake, "run-ls", to="labelstudio", annotators=4, batch="ls4")
    args = ["--url", url, "--api-key", ADMIN_TOKEN, "--lake", str(lake.root)]
    assert main(["review", "push", "ls4", *args]) == 0
    record = json.loads((lake.root / "review" / "ls4" / "batch.json").read_text())
    project = record["labelstudio"]["project_id"]

    # four people sign up and annotate as themselves
    for who in ANNOTATORS:
        ls = LabelStudio(base_url=url, api_key=sign_up(url, who, "pass-" + who))
        assert ls.users.whoami().email == who
        for task in ls.tasks.list(project=project, fields="all"):
            v = verdicts[(task.data["item_id"], who)]
            if v["skip"]:
                ls.annotations.create(id=task.id, result=[], was_cancelled=True)
            else:
                ls.annotations.create(id=task.id, result=verdict_result(v["verdict"], v["edits"]))

    assert main(["review", "pull", "ls4", *args]) == 0
    folder = lake.root / "review" / "ls4"
    pulled = json.loads((folder / "labelstudio-export-1.json").read_text())
    assert sum(len(t["annotations"]) for t in pulled) == N_ITEMS * 4
    assert sum(len(t["predictions"]) for t in pulled) == N_ITEMS // 2  # the pre-labels went in as predictions
    stats = json.loads((folder / "import.json").read_text())
    assert stats["judgments"] == N_ITEMS * 4 and stats["judgments_rejected"] == {"skipped_by_annotator": 1}

    # consensus: unanimous of 4, computed here from the plan
    ids = table.column("id").to_pylist()
    got = {r["id"]: r for r in pq.read_table(folder / "reviewed.parquet").to_pylist()}
    for i in ids:
        given = [verdicts[(i, w)] for w in ANNOTATORS if not verdicts[(i, w)]["skip"]]
        same = len({g["verdict"] for g in given}) == 1
        expected = "not_reviewed" if len(given) < 4 else (None if same else "no_consensus")
        assert got[i]["drop_reason"] == expected, i
        assert got[i]["review_annotators"] == sorted(w for w in ANNOTATORS if not verdicts[(i, w)]["skip"])
    assert got[ids[0]]["sol1"] == table.column("sol1")[0].as_py().strip() + " (carefully)"
    assert json.loads(got[ids[0]]["review_edits"])[0]["annotators"] == [ANNOTATORS[2]]

    # agreement against the plan, independently
    units = [[verdicts[(i, w)]["verdict"] for w in ANNOTATORS if not verdicts[(i, w)]["skip"]] for i in ids]
    agreement = stats["agreement"]
    assert agreement["fleiss_kappa"]["value"] == pytest.approx(fleiss_np([u for u in units if len(u) == 4]))
    assert agreement["fleiss_kappa"]["items_excluded"] == 1
    assert agreement["krippendorff_alpha"]["value"] == pytest.approx(alpha_nominal_np(units))
    assert agreement["percent_agreement"]["value"] == pytest.approx(np.mean([len(set(u)) == 1 for u in units]))
    manifest = RunManifest.load(lake.manifest_path(json.loads((folder / "batch.json").read_text())
                                                   ["imports"][0]["run_id"]))
    assert manifest.parents == ["run-ls"] and manifest.stages[0].conserved()
    log = (home / "server.log").read_text()
    assert "pypi.org" not in log and "sentry.io" not in log  # nothing tried to phone home


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_auto_review_with_the_real_local_model(tmp_path, shared_data):
    """review=auto with Gemma 3 270M (transformers): two annotators (two prompts) on four real PIQA items."""
    pytest.importorskip("transformers")
    from transforms.review.auto import AutoReviewConfig, auto_review

    lake = Lake(tmp_path / "lake").create()
    table = plan(shared_data)[0].slice(0, 4).drop_columns(["prelabel"])
    curated = lake.zone("curated", "auto", "run-auto")
    curated.mkdir(parents=True)
    import pyarrow.parquet as pq

    pq.write_table(table, curated / "part-00000.parquet")
    RunManifest(run_id="run-auto", job="ko-piqa", dataset="auto", outputs={"curated": str(curated)}).write(
        lake.manifest_path("run-auto"))
    export_run(lake, "run-auto", to="labelstudio", annotators=2, batch="auto")
    cfg = AutoReviewConfig(annotators=2, n_boot=50)
    result, manifest = auto_review(lake, "auto", cfg)
    record = json.loads((lake.root / "review" / "auto" / "batch.json").read_text())
    assert record["automatic"] is True
    assert record["annotators"] == ["llm:gemma3-270m:review/en@1", "llm:gemma3-270m:review/en_strict@1"]
    lines = [json.loads(x) for x in (lake.root / "review" / "auto" / "auto-judgments.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * table.num_rows and {x["verdict"] for x in lines} <= {
        "sol1", "sol2", "both_wrong", "not_physical", "unsafe", "needs_edit"}
    assert result.stats["judgments_valid"] == 2 * table.num_rows and result.stats["automatic"] is True
    assert all(result.reviewed.column("review_automatic").to_pylist())
    assert manifest.parents == ["run-auto"] and manifest.extras["review"]["automatic"] is True
