"""Ko-PIQA after the crawl, on the runner: questions → items → review by two people → dedup → balance → release
→ zero-shot evaluation (overall and cultural subset) with the local Gemma 3 270M.

The crawl's output is stood in for by real KiN questions (a run of its own, so the chain has a real
parent). The refinement engine is a test double of the *engine interface* (its Korean replies are
written here, one of them broken JSON); the review judgments are a filled CSV, as two annotators
would return it, with a disagreement and a rejection; dedup, balancing and the release gate are real.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from ray import cloudpickle as ray_cloudpickle

from jobs.ko_piqa_items import ItemsConfig, finish, make_items
from transforms.core.lake import Lake, read_table
from transforms.core.manifest import RunManifest
from transforms.core.runner import conservation_errors, run_pipeline
from transforms.io.sources import RowsSource
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.review.batch import export_run
from transforms.review.consensus import ConsensusRule
from transforms.review.importing import import_files

ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])

# (goal, correct solution, the word to change, its wrong replacement) per question keyword, written for this test
# (no edit of the prompt's own examples: those are dropped as copies_prompt_example)
ITEMS = {
    0: ("라면 국물이 너무 짤 때 맛을 맞추려면", "물을 조금 더 붓고 다시 끓인다.", "물", "소금"),
    1: ("프라이팬에 눌어붙은 기름때를 지우려면", "베이킹소다를 뿌리고 물로 불린 뒤 닦는다.", "베이킹소다", "밀가루"),
    2: ("겨울에 수도관이 얼지 않게 하려면", "수도계량기 함을 헌 옷으로 채워 둔다.", "헌 옷", "젖은 수건"),
    3: ("김치찌개의 신맛을 줄이려면", "설탕을 조금 넣어 끓인다.", "설탕", "식초"),
    4: ("운동화의 냄새를 없애려면", "신문지를 넣어 습기를 빨아들이게 한다.", "신문지", "물"),
    5: ("라면 국물이 짤 때 맛을 맞추는 방법은", "물을 조금 더 붓고 다시 끓인다.", "물", "간장"),
    6: ("흰 셔츠에 묻은 커피 얼룩을 빼려면", "찬물에 적신 뒤 주방세제를 묻혀 두드린다.", "찬물", "뜨거운 물"),
}


class RefineDouble(LLMEngine):
    """Replies to the refinement prompt from ITEMS by the question's number; question 7 gets broken JSON."""

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        out = []
        for conv in conversations:
            text = conv[-1]["content"]
            k = int(text.split("#")[1].split()[0]) if "#" in text else -1
            if k in ITEMS:
                g, a, w, x = ITEMS[k]
                out.append(json.dumps({"goal": g, "answer": a, "word": w, "wrong_word": x}, ensure_ascii=False))
            else:
                out.append("{\"goal\": \"반쯤 쓰다 만")
        return out

    def option_logprobs(self, prompts, options):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def loglikelihood(self, requests):  # type: ignore[no-untyped-def]
        raise NotImplementedError


@pytest.mark.ray
def test_questions_become_a_reviewed_deduplicated_balanced_evaluated_release(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake")
    kin = [json.loads(x) for x in (Path(__file__).parents[2] / "shared" / "data" / "ko_naverkin_certifiedjoon" /
                                   "questions_unique.jsonl").read_text(encoding="utf-8").splitlines()[:8]]
    rows = [{"id": f"kin-{i}", "text": f"#{i} {q['question'][:200]}", "lang": "ko", "source": "kin",
             "is_cultural": i in (0, 3)} for i, q in enumerate(kin)]
    run_pipeline(job="ko-piqa", dataset="ko-piqa", source=RowsSource(records=rows), stages=[], lake=lake,
                 config={}, run_id="crawl")
    cfg = ItemsConfig(release_version="t1")  # evaluation with the default local engine (Gemma 3 270M, CPU)
    items_run = make_items(lake, "crawl", cfg, "ko-piqa", resume=False,
                           engine=RefineDouble(EngineConfig(backend="transformers", model="double")))
    items = RunManifest.load(lake.manifest_path(items_run))
    assert items.parents == ["crawl"] and conservation_errors(items) == []
    refine = next(s for s in items.stages if s.name == "llm_transform")
    assert refine.rows_dropped == {"invalid_output": 1}  # question 7: broken JSON, retried once, then dropped
    kept = read_table(Path(items.outputs["curated"]))
    assert kept.num_rows == 7 and set(kept.column("_prompt").to_pylist()) == {"ko_piqa/refine@2"}
    for row in kept.to_pylist():  # the correct solution sits where the label says; the other is the substitution
        assert (row["sol1"], row["sol2"])[row["label"]] == row["answer"]
        assert row["wrong_word"] in (row["sol1"], row["sol2"])[1 - row["label"]]
    wrong3 = next(r for r in kept.to_pylist() if r["id"] == "kin-3")
    assert (wrong3["sol1"], wrong3["sol2"])[1 - wrong3["label"]] == "식초를 조금 넣어 끓인다."  # 설탕을 → 식초를
    # two annotators review through a CSV; item 4 is rejected by both, item 2 is disputed
    record = export_run(lake, items_run, to="csv", annotators=2, batch="b1", rule=ConsensusRule(rule="unanimous"))
    assert RunManifest.load(lake.manifest_path(items_run)).status == "awaiting_review"
    folder = lake.root / "review" / "b1"
    with open(folder / "review.csv", encoding="utf-8") as f:
        slots = list(csv.DictReader(f))
    by_id = {r["id"]: r for r in kept.to_pylist()}
    for slot in slots:
        item = by_id[slot["item_id"]]
        right = ("sol1", "sol2")[item["label"]]
        wrong = ("sol2", "sol1")[item["label"]]
        n = int(item["id"].split("-")[1])
        verdict = right
        if n == 4:
            verdict = "not_physical"
        elif n == 2 and slot["annotator"] == record.annotators[1]:
            verdict = wrong
        slot["verdict"] = verdict
    filled = tmp_path / "filled.csv"
    with open(filled, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(slots[0]))
        writer.writeheader()
        writer.writerows(slots)
    result, review = import_files(lake, "b1", [filled])
    assert review.parents == [items_run]
    out = finish(lake, review.run_id, cfg, "ko-piqa", resume=False)
    final = RunManifest.load(lake.manifest_path(out["final_run"]))
    assert final.parents == [review.run_id] and conservation_errors(final) == []
    dedup = next(s for s in final.stages if s.name == "semantic_dedup")
    assert dedup.rows_dropped  # item 5 restates item 0's goal
    released = read_table(Path(final.outputs["curated"]))
    ids = set(released.column("id").to_pylist())
    assert ids == {"kin-0", "kin-1", "kin-3", "kin-6"}  # 2 disputed, 4 rejected, 5 a near-copy of 0
    labels = released.column("label").to_pylist()
    assert abs(sum(labels) - len(labels) / 2) <= 0.5
    assert out["released"], out
    release_run = RunManifest.load(lake.manifest_path(f"{out['final_run']}-release"))
    assert release_run.parents == [out["final_run"]]
    # the release's zero-shot evaluation: every released item scored by the real local model, overall and on
    # the cultural subset (kin-0 and kin-3 were sampled as cultural), the eval run a child of the release run
    ev = RunManifest.load(lake.manifest_path(out["eval_run"]))
    assert ev.parents == [release_run.run_id] and ev.status == "succeeded" and conservation_errors(ev) == []
    summary = json.loads(Path(ev.outputs["json"]).read_text(encoding="utf-8"))
    assert summary["n_items"] == 4 and summary["runs"]
    for run in summary["runs"]:
        assert run["overall"]["n"] == 4 and run["overall"]["scored"] + run["overall"]["omitted"] == 4
        cultural = {g["is_cultural"]: g for g in run["by"]["is_cultural"]}
        assert cultural[True]["n"] == 2 and cultural[False]["n"] == 2
    # the evaluation's report (the chain's last) draws the whole chain, oldest first: crawl → items → review →
    # final → release, and the accuracy overall and on the cultural subset
    assert out["report"] == str(lake.root / "runs" / out["eval_run"] / "report.html")
    report = Path(out["report"]).read_text(encoding="utf-8")
    chain = report.split("Chain of runs", 1)[1]
    order = ["crawl", items_run, review.run_id, out["final_run"], release_run.run_id]
    positions = [chain.index(f"<code>{r}</code>") for r in order]
    assert positions == sorted(positions), positions
    table = report.split("<h2>Evaluation</h2>", 1)[1].split("</table>", 1)[0]
    assert "<th>cultural</th>" in table and "(n=2)" in table and table.count("<tr>") == 1 + len(summary["runs"])
    assert all((lake.root / "runs" / r / "report.html").exists() for r in order[1:])  # every run of the chain has one
