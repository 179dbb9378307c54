"""`piqaforge run pindic` end to end with the real local models (slow tier): Qwen2.5-Coder-1.5B-Instruct
through llama.cpp for every JSON step, review=auto and the LLM translation backend, multilingual-e5-small,
scikit-learn k-means, FAISS, the pindic release gate. Small on purpose (6 pool items, 2 locales, 1 item
each); it checks that every phase runs on the runner, every stage's rows are accounted for, and every
figure lands in the manifest. It does not check quality: a 1.5B coder model translates Kannada poorly,
and the gate may rightly refuse what it made (the test then checks that the refusal is reported)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_pindic_job_end_to_end(tmp_path):
    import yaml

    import jobs.pindic as job
    from transforms.core.lake import Lake
    from transforms.core.manifest import RunManifest
    from transforms.core.runner import conservation_errors

    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "jobs/configs/pindic.yaml").read_text())
    data.update({"lake": str(tmp_path / "lake"), "input": str(root / "lake/samples/pindic_piqa_slice.jsonl"),
                 "limit": 6, "quota": 1, "max_rounds": 2, "reference_sentences": 1, "num_cpus": 2,
                 "locales": [{"name": "Delhi", "code": "IN-DL", "lang": "hi"},
                             {"name": "Karnataka", "code": "IN-KA", "lang": "kn"}]})
    out = job.run(job.Config.model_validate(data), run_id="pindic-test")
    lake = Lake(str(tmp_path / "lake"))
    final = RunManifest.load(lake.manifest_path("pindic-test"))
    assert final.status == "succeeded"
    chain = ["pindic-test-open", "pindic-test-taxonomy", "pindic-test-classify", "pindic-test-gen-r1",
             "pindic-test-gen", "pindic-test"]
    for run_id in chain:
        m = RunManifest.load(lake.manifest_path(run_id))
        assert m.status in ("succeeded", "awaiting_review"), run_id   # the gen run was exported for review
        assert conservation_errors(m) == [], run_id
    figures = final.extras["pindic"]
    for key in ("clustering", "draft_taxonomy", "taxonomy", "combinations", "rounds", "rounds_table",
                "generated_coverage", "diversity_generated_goals", "translation_reference_chrf", "review"):
        assert key in figures, key
    for cat, c in figures["clustering"].items():
        assert c["chosen_k"] in c["ks"] and len(c["inertia"]) == len(c["ks"]), cat
    assert Path(out["taxonomy_draft"]).exists()
    assert figures["taxonomy"]["classes"]["Key_Properties_Materials"] == 39
    assert figures["combinations"]["non_empty_combinations"] >= 1
    assert "IN-DL" in {r["locale"] for r in figures["rounds_table"]}
    report = Path(out["report"]).read_text()
    assert "Elbow curves" in report and "<svg" in report
    rel = figures["release"]                      # a verdict of the gate, or why there was nothing to gate
    assert rel.get("checks") or rel.get("skipped") or rel.get("error")
    assert out.get("exit_code", 0) == (0 if rel.get("released") else 1)
    print(json.dumps({k: figures[k] for k in ("rounds_table", "correction", "release")}, indent=1, default=str))
