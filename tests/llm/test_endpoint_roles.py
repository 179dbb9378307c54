"""The review annotators and the evaluated models on a team's endpoint (issue 35 §2, §3): their requests
are accounted like a stage's and equal the real local server's log, and a question the endpoint never
answers is recorded with its reason (a withheld judgment, a `request_failed` prediction), never as an
empty answer or a guess."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.endpoint_server import Faults, FaultyEndpoint, fake_thai
from transforms.core.accounting import read_ledgers
from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest
from transforms.llm.base import EngineConfig

ENGLISH = [  # (goal, correct, wrong): short PIQA-like items, made Thai by the server's own word map
    ("Cool a drink fast", "Put it in ice water", "Put it in warm water"),
    ("Dry wet shoes", "Stuff them with newspaper", "Stuff them with wet towels"),
    ("Open a stuck jar lid", "Run the lid under hot water", "Run the lid under cold oil"),
    ("Keep bread fresh", "Seal it in a bag", "Leave it open on the counter"),
    ("Sharpen a pencil", "Turn it in a sharpener", "Turn it in a cup"),
    ("Light a dark room", "Switch on the lamp", "Switch off the lamp"),
]
DOOMED = 3  # the endpoint answers every question about this item with HTTP 500


def items() -> tuple[pa.Table, set[str]]:
    rows = []
    for i, (goal, good, bad) in enumerate(ENGLISH):
        label = i % 2
        sols = (good, bad) if label == 0 else (bad, good)
        rows.append({"id": f"t{i}", "lang": "th", "goal": fake_thai(goal), "sol1": fake_thai(sols[0]),
                     "sol2": fake_thai(sols[1]), "label": label})
    return pa.Table.from_pylist(rows), {fake_thai(good) for _, good, _ in ENGLISH}


def engine(ep: FaultyEndpoint) -> EngineConfig:
    return EngineConfig(backend="openai", model="team-model", name="team", options={
        "base_url": ep.base_url, "api_key_env": "TEAM_KEY", "max_retries": 2, "backoff_base": 0.01,
        "backoff_max": 0.1, "timeout": 5, "max_concurrency": 4})


def faults(correct: set[str], doomed: str) -> Faults:
    return Faults(http500_every=3, http429_every=4, always_fail={doomed}, key="k-1", correct=correct)


def assert_accounting_equals(acc: dict, log: list[dict], doomed: str, questions_per_item: int) -> None:
    statuses = [e["status"] for e in log]
    doomed_requests = [e for e in log if doomed in e["question"]]
    assert acc["requests"] == len(log) and acc["questions"] == len({e["question"] for e in log})
    assert acc["answered"] == statuses.count(200)
    assert acc["failed"] == {"http_500": questions_per_item}                    # the doomed item's questions
    assert len(doomed_requests) == questions_per_item * 3                       # each asked 1 + max_retries times
    assert acc["retries"].get("http_500", 0) == statuses.count(500) - questions_per_item
    assert acc["retries"].get("http_429", 0) == statuses.count(429) > 0
    assert statuses.count(500) > len(doomed_requests)                           # the 500s hit other questions too


def test_auto_review_accounts_its_requests_and_withholds_an_unanswered_judgment(tmp_path, monkeypatch, ray_local):
    from transforms.review.auto import AutoReviewConfig, auto_review
    from transforms.review.batch import export_run

    monkeypatch.setenv("TEAM_KEY", "k-1")
    table, correct = items()
    doomed = table.column("goal")[DOOMED].as_py()
    lake = Lake(tmp_path / "lake").create()
    out = lake.zone("curated", "th-piqa", "th-items")
    out.mkdir(parents=True)
    pq.write_table(table, out / "part-00000.parquet")
    RunManifest(run_id="th-items", job="th", dataset="th-piqa", status="succeeded",
                outputs={"curated": str(out)}).write(lake.manifest_path("th-items"))
    export_run(lake, "th-items", to="csv", annotators=1, batch="b")
    with FaultyEndpoint(faults(correct, doomed)) as ep:
        cfg = AutoReviewConfig(engines=[engine(ep)], prompts=["review/en"], annotators=1, n_boot=0)
        result, manifest = auto_review(lake, "b", cfg)
        log = list(ep.log)
    assert {e["path"] for e in log} == {"/v1/completions"}
    (acc,) = RunManifest.load(lake.manifest_path(manifest.run_id)).stages[0].requests.values()
    assert_accounting_equals(acc, log, doomed, questions_per_item=2)           # shown and swapped
    assert acc == read_ledgers(lake.run_dir(manifest.run_id) / "requests" / "00-review_import")[
        f"team-model @ {ep.base_url}"]
    # the unanswered item: no verdict, its reason recorded, not reviewed; every other item judged right
    abstained = (lake.root / "review" / "b" / "auto-abstained.jsonl").read_text("utf-8").splitlines()
    assert len(abstained) == 1 and '"item_id": "t3"' in abstained[0] and "request_failed: http_500" in abstained[0]
    assert result.stats["request_failed"] == 1 and result.stats["invalid_output"] == 0
    assert manifest.stages[0].rows_dropped == {"not_reviewed": 1} and manifest.stages[0].rows_kept == 5


def test_evaluated_models_account_their_requests_and_record_a_failed_question(tmp_path, monkeypatch):
    from transforms.eval.stages import IN_GENERATE, IN_LOGLIK, PredictItems

    monkeypatch.setenv("TEAM_KEY", "k-1")
    table, correct = items()
    doomed = table.column("goal")[DOOMED].as_py()
    batch = table.append_column(IN_GENERATE, pa.array([True] * table.num_rows)).append_column(
        IN_LOGLIK, pa.array([True] * table.num_rows))
    with FaultyEndpoint(faults(correct, doomed)) as ep:
        stage = PredictItems(engines={"team": engine(ep)}, batch_size=4, swap=True)
        stage.record_requests_to(str(tmp_path / "requests"))
        stage.setup()
        preds = stage.expand(batch).to_pylist()
        stage.close()
        log = list(ep.log)
    (acc,) = read_ledgers(tmp_path / "requests").values()
    # generation in both orders (2 questions) and two log-likelihood requests per item
    assert_accounting_equals(acc, log, doomed, questions_per_item=4)
    assert {e["path"] for e in log} == {"/v1/chat/completions", "/v1/completions"}
    failed = [p for p in preds if p["item_id"] == "t3"]
    assert failed and all(p["status"] == "request_failed" and p["pred"] is None and p["correct"] is None
                          for p in failed)
    assert all(str(p["reply"]).startswith("http_500") for p in failed)        # the reason, not ""
    generated = [p for p in preds if p["item_id"] != "t3" and p["method"] == "generate"]
    assert generated and all(p["status"] == "exact" and p["correct"] for p in generated)
    assert all(p["status"] == "scored" for p in preds if p["item_id"] != "t3" and p["method"] != "generate")
    # left out of accuracy and counted as what it was, in the summary and the results table
    from transforms.eval.report import markdown, summarize

    raw = pa.Table.from_pylist(preds).drop_columns(["_parent"])
    table_preds = raw.rename_columns(["id" if c == "item_id" else c for c in raw.column_names])
    summary = summarize(table_preds, table)
    assert all(r["overall"]["omitted_by"] == {"request_failed": 1} and r["overall"]["scored"] == 5
               for r in summary["runs"])
    assert "| 5/6 | 1 (0/0/0/1) |" in markdown(summary)
