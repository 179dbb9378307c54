"""The evaluate job end to end: bookkeeping with degenerate engines, and the real local model.

The small engine classes below are not models and do not pretend to be: each always gives the
same kind of non-answer (a refusal, an empty string, a reply in the wrong language), which is
what the job's bookkeeping must survive and count.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ray import cloudpickle as ray_cloudpickle

import transforms.flow.evaluate as evaluate_job
from jobs.config import ConfigError, resolve_config
from transforms.llm.base import ChatMessage, GenerationParams, LLMEngine
from transforms.llm.prepare import is_prepared
from transforms.piqa.formats import read_piqa, write_items

# The engines below travel with the prediction stage to its Ray actor; workers cannot import tests/.
ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FixedReplyEngine(LLMEngine):
    reply = ""

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [self.reply for _ in conversations]

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        return [[0.0] * len(options) for _ in prompts]

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        return [(0.0, 1) for _ in requests]  # every solution equally likely: ties go to sol1


class RefusingEngine(FixedReplyEngine):
    reply = "I'm sorry, but I can't help with that."


class EmptyEngine(FixedReplyEngine):
    reply = ""


class WrongLanguageEngine(FixedReplyEngine):
    reply = "Je pense que la deuxième solution est meilleure."


@pytest.fixture
def tiny_release(tmp_path, shared_data) -> Path:
    path = tmp_path / "release" / "tiny.parquet"
    table = read_piqa(shared_data / "piqa_en" / "valid_labeled.jsonl").slice(0, 8)
    cultural = pa.array([True, False] * 4)
    table = table.set_column(table.schema.get_field_index("is_cultural"), "is_cultural", cultural)
    write_items(table, path)
    return path


def _config(release: Path, tmp_path: Path, **overrides):
    base = {"release": str(release), "lake": str(tmp_path / "lake"), "models": "dummy",
            "engines.dummy.backend": "transformers", "engines.dummy.model": "none", "modes": "generate"}
    return resolve_config("evaluate", None, {**base, **overrides})


@pytest.mark.parametrize("engine_cls,status", [(RefusingEngine, "refusal"), (EmptyEngine, "empty"),
                                               (WrongLanguageEngine, "unparsable")])
def test_non_answers_are_counted_and_omitted(monkeypatch, tmp_path, tiny_release, engine_cls, status):
    monkeypatch.setattr(evaluate_job, "build_engine", lambda cfg: engine_cls(cfg))
    config = _config(tiny_release, tmp_path)
    result = evaluate_job.run(config, run_id="t")
    assert result["exit_code"] == 0
    summary = json.loads(Path(result["json"]).read_text())
    for run in summary["runs"]:  # original and swapped
        assert run["overall"]["acc"] is None and run["overall"]["scored"] == 0
        assert run["overall"]["omitted_by"] == {status: 8} and run["statuses"] == {status: 8}
    assert summary["swap_consistency"]["dummy"]["consistency"] is None
    with open(result["csv"], encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and rows[0]["acc"] == "" and rows[0][status] == "8"
    md = Path(result["results"]).read_text()
    assert "n/a" in md and "| 0/8 |" in md
    assert Path(result["plot"]).stat().st_size > 0


def test_tied_loglikelihoods_and_a_one_label_release(monkeypatch, tmp_path, shared_data):
    monkeypatch.setattr(evaluate_job, "build_engine", lambda cfg: EmptyEngine(cfg))
    table = read_piqa(shared_data / "piqa_en" / "valid_labeled.jsonl").slice(0, 40)
    rows = table.to_pylist()
    for r in rows:  # make label 0 everywhere by swapping, so the items stay true
        if r["label"] == 1:
            r["sol1"], r["sol2"], r["label"] = r["sol2"], r["sol1"], 0
    path = tmp_path / "one_label.parquet"
    write_items(pa.Table.from_pylist(rows, schema=table.schema), path)
    config = _config(path, tmp_path, modes="loglik", fail_on_flag=True)
    result = evaluate_job.run(config, run_id="one-label")
    summary = json.loads(Path(result["json"]).read_text())
    assert summary["random_baseline"]["empirical"] == 1.0 and summary["random_baseline"]["majority"] == 1.0
    acc = {r["method"]: r["overall"]["acc"] for r in summary["runs"]}
    assert acc == {"loglik_acc": 1.0, "loglik_acc_norm": 1.0, "loglik_acc_bytes": 1.0}  # ties pick sol1: always right here
    assert result["flagged"] and "majority_position" in summary["audit"]["flags"]
    assert result["exit_code"] == 3


def test_unknown_model_and_comma_lists(tmp_path, tiny_release):
    config = resolve_config("evaluate", None, {"release": str(tiny_release), "models": "local, other",
                                               "modes": "generate,loglik", "lake": str(tmp_path)})
    assert config.models == ["local", "other"] and config.modes == ["generate", "loglik"]
    with pytest.raises(ConfigError, match="unknown model"):
        evaluate_job.run(config, run_id="x")
    with pytest.raises(ConfigError):
        resolve_config("evaluate", None, {"release": "x", "modes": "sample"})


@pytest.mark.slow
@pytest.mark.skipif(not is_prepared("gemma3-270m"), reason="run `python -m transforms.llm.prepare` first")
def test_real_local_model_end_to_end(tmp_path, tiny_release):
    """Gemma 3 270M on two items, both modes, swapped order, then a resume that reuses every part.

    ~40 s on an idle 2-core machine (model load ~15 s), 9 min measured on the shared, loaded one, so
    it is in the slow tier: `.venv/bin/pytest -m slow tests/eval/test_evaluate_job.py`.
    """
    config = resolve_config("evaluate", None, {
        "release": str(tiny_release), "lake": str(tmp_path / "lake"), "models": "local",
        "generate_limit": 2, "loglik_limit": 2, "chunk_size": 1, "generation.max_tokens": 3})
    result = evaluate_job.run(config, run_id="real")
    out = Path(result["out"])
    preds = pq.read_table(out / "predictions.parquet")
    # 2 items x (generate original + swapped) + 2 items x (acc + acc_norm + acc_bytes)
    assert preds.num_rows == 10
    assert sorted(set(preds.column("method").to_pylist())) == ["generate", "loglik_acc", "loglik_acc_bytes",
                                                               "loglik_acc_norm"]
    gen = preds.filter(pa.compute.equal(preds.column("method"), "generate"))
    assert set(gen.column("prompt").to_pylist()) == {"eval_generic/en@1+eval_loglik@1"}
    assert set(gen.column("status").to_pylist()) <= {"exact", "lenient", "refusal", "empty", "unparsable"}
    ll = preds.filter(pa.compute.equal(preds.column("method"), "loglik_acc"))
    assert all(x < 0 for x in ll.column("ll_sol1").to_pylist())  # real log-probabilities
    assert all(n > 0 for n in ll.column("ntok_sol1").to_pylist())
    manifest = json.loads((tmp_path / "lake" / "runs" / "real" / "manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["extras"]["table"]
    assert Path(result["lm_eval"]).exists() and Path(result["plot"]).exists()
    # the predictions are a run of stages: 8 items in, 2 sampled items consumed into 10 predictions
    predict = next(s for s in manifest["stages"] if s["name"] == "predict")
    assert predict["rows_in"] == 8 and predict["rows_consumed"] == 2 and predict["rows_created"] == 10
    assert predict["rows_dropped"] == {"not_sampled": 6} and predict["partitions"] == 8
    again = evaluate_job.run(config, run_id="real", resume=True)
    resumed = json.loads((tmp_path / "lake" / "runs" / "real" / "manifest.json").read_text())
    assert all(s["resumed"] for s in resumed["stages"])  # every stage reused, nothing rescored
    assert pq.read_table(Path(again["out"]) / "predictions.parquet").num_rows == 10
