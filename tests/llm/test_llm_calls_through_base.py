"""Every model call goes through the LLM base (transforms/llm/stage.py, transforms/llm/asking.py):
no other module calls an engine's chat/generate/option_logprobs/loglikelihood, and each path that
asks a model (auto-review annotators, evaluation, the solution-only audit, translation) shares the
answer cache (a second run asks nothing, with the same results) and the retries with backoff."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest

from transforms.eval import items as I
from transforms.eval.audit import audit_release
from transforms.eval.evaluator import generate_predictions, loglik_predictions
from transforms.eval.templates import load_loglik_contexts
from transforms.llm.asking import Asker
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.stage import EngineUnavailableError

ROOT = Path(__file__).resolve().parents[2]
ENGINE_CALL = re.compile(r"\.(chat|generate|option_logprobs|loglikelihood)\(")
# The LLM base, and the engines themselves (an engine's own methods call each other).
BASE = {"transforms/llm/stage.py", "transforms/llm/asking.py", "transforms/llm/base.py", "transforms/llm/hf.py",
        "transforms/llm/vllm_engine.py", "transforms/llm/openai_engine.py", "transforms/llm/llamacpp_engine.py",
        # a benchmark of the engine itself, like benchmarks/
        "transforms/llm/bench.py"}


def test_no_module_outside_the_llm_base_calls_an_engine():
    offenders = []
    for folder in ("transforms", "jobs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in BASE:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ENGINE_CALL.search(line.split("#", 1)[0]):
                    offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "engine called outside the LLM base:\n" + "\n".join(offenders)


class CountingEngine(LLMEngine):
    """Not a model: prefers the longer option / continuation, answers "1"; counts what it is asked."""

    def __init__(self, fail: int = 0, error: Exception | None = None):
        super().__init__(EngineConfig(model="counting", options={"base_url": "http://127.0.0.1:9/v1"}))
        self.asked = 0
        self.fail = fail
        self.error = error or ConnectionError("503 Service Unavailable")

    def _maybe_fail(self) -> None:
        if self.fail:
            self.fail -= 1
            raise self.error

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        return "\n".join(m["content"] for m in conversation)

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        self._maybe_fail()
        self.asked += len(conversations)
        return ["1" if len(c[-1]["content"]) % 2 else "2" for c in conversations]

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        self._maybe_fail()
        self.asked += len(prompts)
        return [[-abs(len(p) % 7 - k) - 0.1 * k for k in range(len(options))] for p in prompts]

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        self._maybe_fail()
        self.asked += len(requests)
        return [(-10.0 / max(1, len(c)), len(c.split())) for _, c in requests]


@pytest.fixture
def items(shared_data) -> pa.Table:
    from transforms.piqa.formats import read_piqa

    return I.prepare_items(read_piqa(shared_data / "piqa_en" / "valid_labeled.jsonl").slice(0, 12))


def _asker(tmp_path: Path, engine: LLMEngine, label: str = "m", **kw) -> Asker:
    return Asker.for_engine(engine, label=label, chunk_size=5, cache_dir=str(tmp_path / "cache"), **kw)


def test_evaluation_reuses_its_answers(tmp_path, items):
    contexts = load_loglik_contexts()
    params = GenerationParams(max_tokens=8)
    first, again = CountingEngine(), CountingEngine()
    gen1 = generate_predictions(_asker(tmp_path, first), items, model="m", params=params)
    ll1 = loglik_predictions(_asker(tmp_path, first), items, model="m", contexts=contexts)
    plain = generate_predictions(CountingEngine(), items, model="m", params=params)  # a bare engine: wrapped
    gen2 = generate_predictions(_asker(tmp_path, again), items, model="m", params=params)
    ll2 = loglik_predictions(_asker(tmp_path, again), items, model="m", contexts=contexts)
    assert first.asked == 3 * items.num_rows and again.asked == 0
    assert gen1.equals(gen2) and ll1.equals(ll2) and gen1.equals(plain)
    assert gen1.column("status").to_pylist().count("ok") + gen1.column("correct").null_count >= 0


def test_solution_only_audit_reuses_its_answers(tmp_path, items):
    first, again = CountingEngine(), CountingEngine()
    a = audit_release(items, engine=_asker(tmp_path, first, "audit"), model="m")
    b = audit_release(items, engine=_asker(tmp_path, again, "audit"), model="m")
    assert first.asked > 0 and again.asked == 0
    assert a["baselines"]["solution_only_model"] == b["baselines"]["solution_only_model"]


def test_review_annotators_reuse_their_answers_per_item_annotator_and_order(tmp_path):
    from test_review import ITEMS, make_run

    from transforms.core.lake import Lake
    from transforms.core.rowcache import load
    from transforms.review.auto import AutoReviewConfig, auto_review
    from transforms.review.batch import export_run

    lake = Lake(tmp_path / "lake").create()
    export_run(lake, make_run(lake, ITEMS), to="csv", annotators=2, batch="b1")
    cfg = AutoReviewConfig(engines=[EngineConfig(model="counting")], annotators=2, n_boot=10)
    first, again = CountingEngine(), CountingEngine()
    with mock.patch("transforms.llm.base.build_engine", lambda _cfg: first):
        r1, _ = auto_review(lake, "b1", cfg)
    with mock.patch("transforms.llm.base.build_engine", lambda _cfg: again):
        r2, _ = auto_review(lake, "b1", cfg)
    assert first.asked == ITEMS.num_rows * 2 * 2 and again.asked == 0  # items x annotators x orders
    assert r1.reviewed.equals(r2.reviewed)
    rows = [row for folder in (lake.root / "cache" / "llm").iterdir() for row in load(folder).to_pylist()]
    assert sorted(r["id"] for r in rows) == sorted(f"{i}|{o}" for i in ITEMS.column("id").to_pylist()
                                                   for o in ("shown", "swapped") for _ in range(2))


def test_translation_asks_through_the_base_and_its_cache(tmp_path):
    from transforms.translate.config import LLMTranslateConfig
    from transforms.translate.llm import LLMTranslator

    def translator(engine: LLMEngine) -> LLMTranslator:
        cfg = LLMTranslateConfig(engine=EngineConfig(model="counting"), cache_dir=str(tmp_path / "tr"),
                                 retry_backoff_s=0.0)
        t = LLMTranslator(cfg, engine=engine)
        t.setup()
        return t

    first, again = CountingEngine(fail=1), CountingEngine()
    a = translator(first).translate_with_status(["Boil the water.", "Fold the umbrella."], "en", "ko")
    b = translator(again).translate_with_status(["Boil the water.", "Fold the umbrella."], "en", "ko")
    assert first.asked == 2 and again.asked == 0 and a == b  # one failure retried, then cached


def test_failing_endpoint_is_retried_with_backoff_then_named(tmp_path, items, monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr("transforms.llm.stage.time.sleep", waits.append)
    flaky = CountingEngine(fail=2)
    ok = generate_predictions(_asker(tmp_path, flaky, retry_backoff_s=0.5), items, model="m",
                              params=GenerationParams(max_tokens=8))
    assert ok.num_rows == items.num_rows and waits == [0.5, 1.0]
    dead = CountingEngine(fail=10**6, error=TimeoutError("read timeout"))
    with pytest.raises(EngineUnavailableError, match=r"http://127\.0\.0\.1:9/v1\) failed 3 times: TimeoutError"):
        generate_predictions(_asker(tmp_path / "other", dead, retry_backoff_s=0.5), items, model="m",
                             params=GenerationParams(max_tokens=8))


def test_asker_records_the_questions_it_asked(tmp_path, items):
    asker = _asker(tmp_path, CountingEngine())
    generate_predictions(asker, items, model="m", params=GenerationParams(max_tokens=8))
    (ref, conv), = asker.questions.items()
    assert ref.startswith("eval_") and conv[-1]["content"].count(items.column("goal")[0].as_py()) == 1


def test_questions_are_recorded_beside_the_answers_and_the_report_reads_them(tmp_path, items):
    import json

    from transforms.core.rowcache import load
    from transforms.report.prompts import recorded_answers

    asker = _asker(tmp_path, CountingEngine())
    generate_predictions(asker, items, model="m", params=GenerationParams(max_tokens=8))
    (folder,) = (tmp_path / "cache").iterdir()
    rows = load(folder).to_pylist()
    with_question = [r for r in rows if r["question"]]
    assert len(rows) == items.num_rows and len(with_question) == -(-items.num_rows // 5)  # one per chunk of 5
    shown = recorded_answers(folder, 3)
    assert len(shown) == 3 and json.loads(shown[0]["question"])[-1]["role"] == "user"


class NoScoreEngine(CountingEngine):
    """Gives no usable option scores for prompts about rice (밥): a reply the review cannot read."""

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        good = super().option_logprobs(prompts, options)
        return [[float("-inf")] * len(options) if "밥" in p else g for p, g in zip(prompts, good, strict=True)]


def test_review_withholds_unusable_scores_with_the_raw_reply_and_reason(tmp_path):
    import json

    from test_review import ITEMS, make_run

    from transforms.core.lake import Lake
    from transforms.review.auto import AutoReviewConfig, auto_review
    from transforms.review.batch import export_run

    lake = Lake(tmp_path / "lake").create()
    export_run(lake, make_run(lake, ITEMS), to="csv", annotators=2, batch="b1")
    cfg = AutoReviewConfig(engines=[EngineConfig(model="counting")], annotators=2, n_boot=10)
    with mock.patch("transforms.llm.base.build_engine", lambda _cfg: NoScoreEngine()):
        result, _ = auto_review(lake, "b1", cfg)
    folder = lake.root / "review" / "b1"
    held = [json.loads(x) for x in (folder / "auto-abstained.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(held) == 2 and all(j["invalid"] == "no finite option log-probability" and j["raw"] for j in held)
    assert {j["item_id"] for j in held} == {"q1"} and result.stats["invalid_output"] == 2
    reviewed = {r["id"]: r for r in result.reviewed.to_pylist()}
    assert reviewed["q1"].get("drop_reason") is not None  # no judgment kept for it: not reviewed


class NaNEngine(CountingEngine):
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        got = super().loglikelihood(requests)
        return [(float("nan"), n) if i % 4 == 0 else (v, n) for i, (v, n) in enumerate(got)]


def test_loglik_scores_that_are_not_numbers_are_unparsable_not_guesses(items):
    preds = loglik_predictions(NaNEngine(), items, model="m", contexts=load_loglik_contexts(), batch_size=4)
    bad = [r for r in preds.to_pylist() if r["status"] != "scored"]
    assert bad and all(r["status"] == "unparsable" and r["pred"] is None and r["correct"] is None for r in bad)


class BigBatchEngine(CountingEngine):
    preferred_batch = 40  # what the transformers engine reports on a GPU (its batch_size, 256)

    def __init__(self):
        super().__init__()
        self.calls: list[int] = []

    def chat(self, conversations, params):
        self.calls.append(len(conversations))
        return super().chat(conversations, params)


def test_unset_chunk_size_follows_the_engines_preferred_batch():
    convs = [[{"role": "user", "content": f"question {i}"}] for i in range(100)]
    engine = BigBatchEngine()
    asker = Asker(label="m", engine=engine.config)
    asker.attach_engine("m", engine)
    asker.ask_chat(convs, GenerationParams())
    assert engine.calls == [40, 40, 20]
    engine = BigBatchEngine()
    Asker.for_engine(engine, label="m", chunk_size=30).ask_chat(convs, GenerationParams())
    assert engine.calls == [30, 30, 30, 10]  # a chunk size that is set is kept


def test_evaluation_report_shows_the_recorded_questions(monkeypatch, tmp_path, shared_data):
    import sys

    from ray import cloudpickle as ray_cloudpickle

    import transforms.flow.evaluate as evaluate_job
    from jobs.config import resolve_config
    from transforms.piqa.formats import read_piqa, write_items

    ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the engine travels to the Ray actor
    release = tmp_path / "release" / "tiny.parquet"
    write_items(read_piqa(shared_data / "piqa_en" / "valid_labeled.jsonl").slice(0, 6), release)
    monkeypatch.setattr(evaluate_job, "build_engine", lambda cfg: CountingEngine())
    config = resolve_config("evaluate", None, {
        "release": str(release), "lake": str(tmp_path / "lake"), "models": "dummy", "audit": False,
        "engines.dummy.backend": "transformers", "engines.dummy.model": "none", "modes": "generate,loglik"})
    evaluate_job.run(config, run_id="t")
    cache = tmp_path / "lake" / "runs" / "t" / "cache" / "llm"
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir()) == ["ask_dummy_chat", "ask_dummy_loglikelihood"]
    html = (tmp_path / "lake" / "runs" / "t" / "report.html").read_text(encoding="utf-8")
    assert "question as recorded" in html and "Answer:" in html
