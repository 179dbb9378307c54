"""`piqaforge run pindic` end to end with the real local models (slow tier): Qwen2.5-Coder-1.5B-Instruct
through llama.cpp for every JSON step, review=auto and the LLM translation backend, multilingual-e5-small,
scikit-learn k-means, FAISS, the pindic release gate. Small on purpose (4 pool items, at most 3 clusters
per category, 2 locales, 1 item each); it checks that every phase runs on the runner, every stage's rows
are accounted for, the back half (translation, correction, release) runs on real rows with their lineage
back to the generation request, and every figure lands in the manifest. It does not check quality: whether the
correction keeps a row is the small model's content (the engine-double flow in tests/flow/test_recipes.py
holds the back half's rows through release).

What the test changes in jobs/recipes/pindic.yaml (by `--set`-style overrides), and why:
* review=auto with ONE annotator (review/en) and `relabel: true`: an item is kept when that annotator
  picks solution 1 or 2, and its pick becomes the label. With the default two annotators and
  `relabel: false`, Qwen's two prompts rejected both items of an earlier CI run (one `no_consensus`,
  one `label_disputed`: an honest verdict on weak items) and the back half ran on 0 rows.
* release_checks without the 25-word rule and with a near-zero script share, and label balancing with
  open bounds, so whatever the correction writes reaches the gate; the gate (the pindic suite, unchanged)
  then gives its own verdict, which must be reported with its checks and the job's exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.recipes]  # scripts/test.sh --all


def test_pindic_job_end_to_end(tmp_path):
    from transforms.core.lake import Lake, read_table
    from transforms.core.lineage import trace
    from transforms.core.manifest import RunManifest
    from transforms.core.runner import conservation_errors
    from transforms.flow.orchestrator import run_recipe
    from transforms.flow.recipe import load_recipe

    locales = [{"name": "Delhi", "code": "IN-DL", "lang": "hi"}, {"name": "Karnataka", "code": "IN-KA", "lang": "kn"}]
    recipe = load_recipe("pindic", {
        "taxonomy": "open", "limit": 4, "quota": 1, "max_rounds": 2, "locales": locales,
        "runs.generation.rounds.quotas": {"IN-DL": 1, "IN-KA": 1},
        "runs.taxonomy.stages.cluster_labels.kmeans.k_max": 3,
        "runs.review.review.annotators": 1,
        "runs.review.review.auto": {"engines": ["@judge"], "prompts": ["review/en"], "batch_size": 8, "n_boot": 50},
        "runs.review.review.consensus": {"rule": "unanimous", "relabel": True},
        "runs.final.stages.release_checks.min_script_share": 0.01,
        "runs.final.stages.release_checks.min_goal_plus_solution_words": 0,
        "runs.final.stages.balance_labels.min_share": 0.0, "runs.final.stages.balance_labels.max_share": 1.0})
    out = run_recipe(recipe, lake=tmp_path / "lake", run_id="pindic-test")
    lake = Lake(str(tmp_path / "lake"))
    gen = RunManifest.load(lake.manifest_path("pindic-test-generation"))
    chain = ["pindic-test-open", "pindic-test-taxonomy", "pindic-test-classify",
             *[r["run_id"] for r in gen.extras["rounds"]], "pindic-test-generation", "pindic-test-final"]
    for run_id in chain:
        m = RunManifest.load(lake.manifest_path(run_id))
        assert m.status in ("succeeded", "awaiting_review"), run_id
        assert conservation_errors(m) == [], run_id
    figures = {}
    for run_id, name in (("pindic-test-taxonomy", "taxonomy"), ("pindic-test-classify", "combinations"),
                         ("pindic-test-final", "pindic")):
        figures.update(json.loads((lake.run_dir(run_id) / f"{name}.json").read_text("utf-8")))
    for key in ("clustering", "draft_taxonomy", "taxonomy", "combinations", "rounds", "rounds_table",
                "generated_coverage", "diversity_generated_goals"):
        assert key in figures, key
    for cat, c in figures["clustering"].items():
        assert c["chosen_k"] in c["ks"] and len(c["inertia"]) == len(c["ks"]) and max(c["ks"]) <= 3, cat
    assert Path(figures["draft_taxonomy"]["path"]).exists()
    assert figures["taxonomy"]["classes"]["Key_Properties_Materials"] == 39
    assert figures["combinations"]["non_empty_combinations"] >= 1
    for r in figures["rounds_table"]:   # every generated item is accounted for by a drop or acceptance
        assert r["generated"] == r["invalid_output"] + r["validation_drops"] + r["novelty_drops"] + \
            r["quota_full"] + r["accepted"], r
    report = (lake.run_dir("pindic-test-taxonomy") / "report.html").read_text()
    assert "Elbow curves" in report and "<svg" in report

    # the back half ran on real rows: the review kept some, the final run read them
    review = RunManifest.load(lake.manifest_path(out["runs"]["review"]))
    assert review.extras["review"]["automatic"] is True and review.stages[0].rows_kept >= 1
    final = RunManifest.load(lake.manifest_path("pindic-test-final"))
    stages = {s.name: s for s in final.stages}
    correct = stages["correct_translation"]
    assert correct.rows_in >= 1, "the correction received no row"
    # what the 1.5B model writes is content (it may loop in Hindi or Kannada until max_tokens, and the row is then
    # `invalid_output`): every row is kept or dropped with its reason and its raw reply, and a kept row is whole
    corrected = read_table(Path(correct.outputs["kept"])).to_pylist()
    rejected = read_table(Path(correct.outputs["rejected"])).to_pylist() if correct.rows_dropped else []
    assert len(corrected) + len(rejected) == correct.rows_in
    for row in rejected:
        assert row["drop_stage"] == "correct_translation" and row["drop_reason"] in correct.rows_dropped, row["id"]
        assert row["drop_reason"] != "invalid_output" or str(row["llm_raw"]).strip(), row["id"]
    for row in corrected:
        assert row["lang"] in ("hi", "kn")
        for f in ("goal", "sol1", "sol2"):
            assert str(row[f"translated_{f}"]).strip() and str(row[f"corrected_{f}"]).strip(), (f, row["id"])
        assert row["review_automatic"] is True
        hops = trace(lake, "pindic-test-final", str(row["id"]))
        made = [h for h in hops if h.stage == "generate_items"]
        assert len(made) == 1 and made[0].provenance.get("_prompt", "").startswith("pindic/generate@")
    assert out.get("exit_code", 0) == (0 if out.get("released") else 1)
