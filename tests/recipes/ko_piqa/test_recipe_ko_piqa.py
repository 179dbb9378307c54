"""The ko-piqa recipe file after its crawl run: questions → items → review by two people → dedup → balance →
release → zero-shot evaluation (overall and cultural subset) with the local Gemma 3 270M, all through the one
orchestrator, then resumed after the import.

The recipe is jobs/recipes/ko-piqa.yaml itself with only its crawl run replaced by eight real KiN questions
(a recipe is data: the test swaps one run). The refinement engine is a test double of the engine interface
(Korean replies written here, one broken); the judgments are a filled CSV
with a disagreement and a rejection; dedup, balancing, the gate and the evaluation are real.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from hubutil import assert_hub_ready, gated_table
from ray import cloudpickle as ray_cloudpickle

from transforms.core.lake import Lake, read_table
from transforms.core.manifest import RunManifest
from transforms.core.runner import conservation_errors
from transforms.flow.recipe import RECIPES_DIR, load_recipe
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
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


def _recipe(tmp_path: Path, shared_data: Path) -> Path:
    data = yaml.safe_load((RECIPES_DIR / "ko-piqa.yaml").read_text(encoding="utf-8"))
    kin = [json.loads(x) for x in (shared_data / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl")
           .read_text(encoding="utf-8").splitlines()[:8]]
    rows = [{"id": f"kin-{i}", "text": f"#{i} {q['question'][:200]}", "lang": "ko", "source": "kin",
             "is_cultural": i in (0, 3)} for i, q in enumerate(kin)]
    data["runs"][0] = {"name": "crawl", "source": {"stage": "read_rows", "records": rows}}
    data["data"] = {k: str((RECIPES_DIR.parents[1] / v).resolve()) for k, v in data["data"].items()}
    path = tmp_path / "ko-piqa-kin.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.slow  # items, review, release and a real Gemma evaluation in one chain: among the default tier's largest
@pytest.mark.ray
def test_ko_piqa_recipe_items_review_release_evaluation(ray_local, tmp_path, shared_data):
    from transforms.flow.orchestrator import RecipeRecord, run_recipe

    lake = tmp_path / "lake"
    recipe = load_recipe(str(_recipe(tmp_path, shared_data)), {"review_to": "csv", "version": "t1"})
    double = RefineDouble(EngineConfig(backend="transformers", model="double"))
    out = run_recipe(recipe, lake=lake, run_id="ko", doubles={"llm_transform": double})
    assert out["status"] == "awaiting_review" and out["review_batch"] == "review-ko-items"
    items = RunManifest.load(lake / "runs" / "ko-items" / "manifest.json")
    assert items.parents == ["ko-crawl"] and conservation_errors(items) == []
    assert items.status == "awaiting_review" and "piqaforge review import review-ko-items" in items.extras["review"]["next"]
    guard = next(s for s in items.stages if s.name == "input_guard")
    assert guard.rows_dropped == {"injection_suspected": 1}  # question 7: a wall of ASCII-art padding, never asked
    refine = next(s for s in items.stages if s.name == "llm_transform")
    assert refine.rows_in == 7 and not refine.rows_dropped
    kept = read_table(Path(items.outputs["curated"]))
    assert kept.num_rows == 7 and set(kept.column("_prompt").to_pylist()) == {"ko_piqa/refine@2"}
    # two annotators review through the CSV; item 4 is rejected by both, item 2 is disputed
    folder = lake / "review" / "review-ko-items"
    record = json.loads((folder / "batch.json").read_text(encoding="utf-8"))
    with open(folder / "review.csv", encoding="utf-8-sig") as f:
        slots = list(csv.DictReader(f))
    by_id = {r["id"]: r for r in kept.to_pylist()}
    for slot in slots:
        item = by_id[slot["item_id"]]
        n = int(item["id"].split("-")[1])
        slot["verdict"] = ("sol1", "sol2")[item["label"]]
        if n == 4:
            slot["verdict"] = "not_physical"
        elif n == 2 and slot["annotator"] == record["annotators"][1]:
            slot["verdict"] = ("sol2", "sol1")[item["label"]]
    filled = tmp_path / "filled.csv"
    with open(filled, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(slots[0]))
        writer.writeheader()
        writer.writerows(slots)
    _, review = import_files(Lake(lake), "review-ko-items", [filled])
    assert review.parents == ["ko-items"]

    done = run_recipe(recipe, lake=lake, run_id="ko", resume=True, doubles={"llm_transform": double})
    assert done["status"] == "succeeded" and done["released"], done
    assert RunManifest.load(lake / "runs" / "ko-items" / "manifest.json").status == "succeeded"
    final = RunManifest.load(lake / "runs" / "ko-final" / "manifest.json")
    assert final.parents == [review.run_id] and conservation_errors(final) == []
    assert next(s for s in final.stages if s.name == "semantic_dedup").rows_dropped  # 5 restates 0's goal
    released = read_table(Path(final.outputs["curated"]))
    assert set(released.column("id").to_pylist()) == {"kin-0", "kin-1", "kin-3", "kin-6"}
    release_run = RunManifest.load(lake / "runs" / "ko-release" / "manifest.json")
    assert release_run.parents == ["ko-final"] and release_run.status == "succeeded"
    # only benchmark data is published: it loads with `datasets` as the gate passed it, and nothing of the forum
    # post, the raw model output or the annotators' names is in it (they stay in the lake)
    folder = Path(release_run.outputs["release"])
    gated = gated_table(lake, "ko-release")
    assert_hub_ready(folder, gated, tmp_path / "hf")
    data = pq.read_table(folder / "data" / "ko" / "test-00000-of-00001.parquet")
    private = {"text", "body", "url", "title", "llm_raw", "ens_raw_output", "review_comments"}
    assert private & set(gated.column_names) and not private & set(data.column_names)
    assert {a for cell in data.column("review_annotators").to_pylist() for a in cell} == {"annotator-1", "annotator-2"}
    print(f"\nko-piqa release: {len(gated.column_names)} columns gated, {len(data.column_names)} published: "
          f"{data.column_names}")
    ev = RunManifest.load(lake / "runs" / "ko-evaluation" / "manifest.json")
    assert ev.parents == ["ko-release"] and ev.status == "succeeded" and conservation_errors(ev) == []
    summary = json.loads(Path(ev.outputs["json"]).read_text(encoding="utf-8"))
    assert summary["n_items"] == 4
    for run in summary["runs"]:
        cultural = {g["is_cultural"]: g for g in run["by"]["is_cultural"]}
        assert cultural[True]["n"] == 2 and cultural[False]["n"] == 2
    # every run of the chain has its report; the evaluation's draws the chain oldest first
    order = ["ko-crawl", "ko-items", review.run_id, "ko-final", "ko-release"]
    assert all((lake / "runs" / r / "report.html").exists() for r in [*order, "ko-evaluation"])
    chain = (lake / "runs" / "ko-evaluation" / "report.html").read_text(encoding="utf-8").split("Chain of runs", 1)[1]
    positions = [chain.index(f"<code>{r}</code>") for r in order]
    assert positions == sorted(positions), positions
    # lineage follows a released item through review and creation back to the question it was made from,
    # and says where a row dropped in a parent run went
    from transforms.core.lineage import print_trace, trace

    hops = trace(Lake(lake), "ko-final", "kin-0")
    assert {h.run_id for h in hops} >= {"ko-final", review.run_id, "ko-items", "ko-crawl"}
    made = next(h for h in hops if h.run_id == "ko-items")
    assert made.text and made.text.startswith(ITEMS[0][0]) and "✓" in made.text   # the item, not the forum post
    assert any("review_consensus" in h.review for h in hops), print_trace(hops)  # what the reviewers decided
    with pytest.raises(KeyError, match=f"parent run '{review.run_id}': dropped by review_import"):
        trace(Lake(lake), "ko-final", "kin-4")
    record = RecipeRecord.load(Lake(lake), "ko")
    assert record is not None and record.status == "succeeded"
    assert {n: e.status for n, e in record.runs.items()} == {n: "succeeded" for n in record.runs}
