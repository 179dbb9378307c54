"""Both exported tasks through a real `lm_eval` (its own environment) with the local Gemma 3 270M,
compared item by item with our evaluator on the same items (slow tier).

    bash scripts/setup_lmeval.sh && .venv/bin/python -m pytest tests/eval/test_lm_eval_run.py -m slow -q

Cloze: lm-eval's per-choice log-likelihoods must be close to ours (the same context, the bare
prompt, and the same continuations " <solution>") and its acc / acc_norm / acc_bytes the same
choices. Generation (`--apply_chat_template` when the model has a chat template): lm-eval must send
the model exactly the string our engine renders from the A/B prompt, and with greedy decoding both
must get the same reply.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from transforms.eval.lm_eval_export import ANSWER_REGEX, export_lm_eval_task
from transforms.eval.templates import load_global_cloze_contexts, prompts_for_style
from transforms.piqa.formats import read_items, read_xcopa

ROOT = Path(__file__).resolve().parents[2]
LM_EVAL = ROOT / ".venv-lmeval" / "bin" / "lm_eval"
N_PER_LANG = 3
MAX_GEN = 24
LL_TOLERANCE = 0.05  # nats; float32 on CPU with other batch shapes gives ~1e-4, a tokenization split far more

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir():
    from transforms.llm.prepare import resolve_model

    path = Path(resolve_model("gemma3-270m"))
    if not (path / "config.json").exists():
        pytest.skip(f"the local Gemma 3 270M checkpoint is not prepared at {path}: python -m transforms.llm.prepare")
    return path


@pytest.fixture(scope="module")
def items(shared_data):
    tamil = read_xcopa(shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl").slice(0, N_PER_LANG)
    russian = read_items(shared_data / "ru_russiansuperglue_humanbench").slice(0, N_PER_LANG)
    cols = ["id", "lang", "goal", "sol1", "sol2", "label", "source"]
    return pa.concat_tables([tamil.select(cols), russian.select(cols)])


def _lm_eval(model_dir: Path, include: str, task: str, out: Path, *, chat: bool, cwd: Path | None = None) -> list[dict]:
    if not LM_EVAL.exists():
        pytest.skip("lm-evaluation-harness is not installed: bash scripts/setup_lmeval.sh")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(out / "hf_home"), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2"}
    cmd = [str(LM_EVAL), "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32", "--device", "cpu",
           "--include_path", include, "--tasks", task, "--batch_size", "1", "--log_samples",
           "--output_path", str(out), *(["--apply_chat_template"] if chat else [])]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-4000:]
    samples: list[dict] = []
    for path in sorted(out.rglob("samples_*.jsonl")):
        samples += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert samples, f"no samples written under {out}: {proc.stdout[-2000:]}"
    return samples


@pytest.fixture(scope="module")
def exported(items, tmp_path_factory):
    return export_lm_eval_task(items, tmp_path_factory.mktemp("tasks"), "lmeval check",
                               generation={"max_gen_toks": MAX_GEN})


@pytest.fixture(scope="module")
def engine(model_dir):
    from transforms.llm.base import EngineConfig, build_engine

    eng = build_engine(EngineConfig(backend="transformers", model="gemma3-270m", name="local"))
    eng.setup()
    yield eng
    eng.close()


def _by_prompt(samples: list[dict]) -> dict[tuple[str, str], dict]:
    return {(s["doc"]["prompt"], s["doc"]["solution0"]): s for s in samples}


def test_cloze_matches_our_loglikelihoods_item_by_item(items, exported, engine, model_dir, tmp_path):
    from transforms.eval.evaluator import LOGLIK_ACC, LOGLIK_BYTES, LOGLIK_NORM, loglik_predictions

    samples = _lm_eval(model_dir, exported["include_path"], "piqaforge_lmeval_check_cloze", tmp_path, chat=False)
    assert len(samples) == items.num_rows
    ours = loglik_predictions(engine, items, model="local", contexts=load_global_cloze_contexts())
    by_method = {m: ours.filter(pa.compute.equal(ours.column("method"), m)).to_pylist()
                 for m in (LOGLIK_ACC, LOGLIK_NORM, LOGLIK_BYTES)}
    theirs = _by_prompt(samples)
    worst = 0.0
    for i, row in enumerate(by_method[LOGLIK_ACC]):
        sample = theirs[(items.column("goal")[i].as_py(), items.column("sol1")[i].as_py())]
        lls = [float(r[0][0]) for r in sample["resps"]]
        worst = max(worst, abs(lls[0] - row["ll_sol1"]), abs(lls[1] - row["ll_sol2"]))
        assert lls[0] == pytest.approx(row["ll_sol1"], abs=LL_TOLERANCE), (row["id"], lls, row)
        assert lls[1] == pytest.approx(row["ll_sol2"], abs=LL_TOLERANCE), (row["id"], lls, row)
        for method, metric in ((LOGLIK_ACC, "acc"), (LOGLIK_NORM, "acc_norm"), (LOGLIK_BYTES, "acc_bytes")):
            assert float(sample[metric]) == float(by_method[method][i]["correct"]), (row["id"], metric)
    print(f"\ncloze: {items.num_rows} items, largest log-likelihood difference {worst:.2e} nats")


def test_generation_sees_our_prompt_and_gives_our_reply(items, exported, engine, model_dir, tmp_path):
    from transforms.eval.evaluator import generate_predictions
    from transforms.eval.templates import prompt_for
    from transforms.llm.base import GenerationParams

    # a chat model gets lm-eval's --apply_chat_template; a base model (the packaged Gemma 270M has no chat
    # template) gets the text as is, which is what our engine sends it too (contents, blank-line separated)
    chat = bool(getattr(engine.tokenizer, "chat_template", None))
    samples = _lm_eval(model_dir, exported["include_path"], "piqaforge_lmeval_check_generation", tmp_path, chat=chat)
    assert len(samples) == items.num_rows
    prompts = prompts_for_style("global_piqa")
    ours = generate_predictions(engine, items, model="local", params=GenerationParams(max_tokens=MAX_GEN),
                                prompts=prompts, cues=None).to_pylist()
    theirs = _by_prompt(samples)
    same_reply = 0
    for i, row in enumerate(ours):
        goal, sol1, sol2 = (items.column(c)[i].as_py() for c in ("goal", "sol1", "sol2"))
        sample = theirs[(goal, sol1)]
        prompt = prompt_for(items.column("lang")[i].as_py(), prompts)
        rendered = engine.render_chat(prompt.render(goal=goal, sol1=sol1, sol2=sol2).messages)
        context = sample["arguments"]["gen_args_0"]["arg_0"] if isinstance(sample["arguments"], dict) \
            else sample["arguments"][0][0]
        if prompt.sanitise(goal) == goal and prompt.sanitise(sol1) == sol1 and prompt.sanitise(sol2) == sol2:
            assert context.removeprefix("<bos>") == rendered.removeprefix("<bos>"), row["id"]
        reply = sample["resps"][0][0]
        same_reply += reply.strip().startswith(row["reply"].strip())
        match = re.findall(ANSWER_REGEX, reply)
        letter = next((g for g in match[-1] if g), None) if match else None
        assert float(sample["exact_match"]) == float(letter == "AB"[row["label"]]), (row["id"], reply)
    assert same_reply == items.num_rows, f"{same_reply}/{items.num_rows} greedy replies agree"


def test_the_release_folder_tasks_run_in_lm_eval_and_match_our_loglikelihoods(items, engine, model_dir, tmp_path):
    """The task files every release ships (lm_eval/, relative Parquet paths, one config per language), run by a
    real lm_eval from inside the release folder before it is published: it loads the configs through `datasets`
    and scores what we score. The release has a Hub id, so lm_eval/hub/ is there too (issue 32 §4): lm_eval
    indexes it beside the local tasks and the local ones still run offline."""
    from transforms.eval.evaluator import LOGLIK_ACC, loglik_predictions
    from transforms.release.writer import HubSettings, build_release

    gate = {"success": True, "suite": "test", "checks": [], "reasons": []}
    release = tmp_path / "release"
    result = build_release(items, gate, out_dir=release, dataset="lmeval release", recipe="generic",
                           version="2026.11.27", audit=False,
                           hub=HubSettings(licence="cc-by-4.0", repo_id="piqaforge/lmeval-release"))
    assert result.released
    assert (release / "lm_eval" / "hub" / "cloze" / "_piqaforge_lmeval_release_hub_cloze.yaml").is_file()
    out = tmp_path / "out"
    samples = _lm_eval(model_dir, "lm_eval", "piqaforge_lmeval_release_cloze", out, chat=False, cwd=release)
    assert len(samples) == items.num_rows
    assert {s["doc"]["id"] for s in samples} == set(items.column("id").to_pylist())
    ours = loglik_predictions(engine, items, model="local", contexts=load_global_cloze_contexts())
    ours = ours.filter(pa.compute.equal(ours.column("method"), LOGLIK_ACC)).to_pylist()
    theirs = {s["doc"]["id"]: s for s in samples}
    for row in ours:
        sample = theirs[row["id"]]
        assert sample["doc"]["label"] == row["label"]
        lls = [float(r[0][0]) for r in sample["resps"]]
        assert lls[0] == pytest.approx(row["ll_sol1"], abs=LL_TOLERANCE), (row["id"], lls, row)
        assert lls[1] == pytest.approx(row["ll_sol2"], abs=LL_TOLERANCE), (row["id"], lls, row)
        assert float(sample["acc"]) == float(row["correct"]), row["id"]
