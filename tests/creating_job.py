"""A small creating job for the kill -9 / resume test (run as a script by tests/core/test_resume_creating.py).

    python tests/creating_job.py LAKE RUN_ID PROMPTS LOG [--resume]

Real Korean questions from the bundled crawl sample → `LLMGenerate` (each question becomes PIQA-like
items, a JSON list) → `LLMTransform` (each item rewritten, JSON). The engine below is a test double
of the *engine interface*, not a model: its replies are built from the question text, and it logs
every conversation it is asked (`begin`/`end` lines, fsynced) so the test can prove that nothing
answered before a kill is asked again after the resume. It sleeps a little per conversation so the
test can kill the job mid-stage.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.core.lake import Lake  # noqa: E402
from transforms.core.runner import init_ray, run_pipeline  # noqa: E402
from transforms.io.sources import RowsSource  # noqa: E402
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine  # noqa: E402
from transforms.llm.generate import LLMGenerate  # noqa: E402
from transforms.llm.transform import LLMTransform  # noqa: E402

SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
N_QUESTIONS = 40


def content_hash(conversation: list[ChatMessage]) -> str:
    return hashlib.sha1(conversation[-1]["content"].encode()).hexdigest()[:16]


class ScriptedEngine(LLMEngine):
    """Replies derived from the question; every ask is logged with its content hash."""

    def __init__(self, config: EngineConfig, log_path: str = "", delay: float = 0.15):
        super().__init__(config)
        self.log_path, self.delay = log_path, delay

    def _log(self, lines: list[str]) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        hashes = [content_hash(c) for c in conversations]
        self._log([f"begin\t{h}" for h in hashes])
        replies = []
        for conv in conversations:
            time.sleep(self.delay)
            text = conv[-1]["content"]
            question = text.split("<question>")[-1].split("</question>")[0].strip()
            digest = int(hashlib.sha1(question.encode()).hexdigest(), 16)
            if "GENERATE" in conv[0]["content"]:
                if digest % 7 == 0:  # some replies are not JSON: their parents fail generation
                    replies.append("죄송합니다, 지금은 답할 수 없습니다.")
                    continue
                items = [{"goal": f"{question[:40]} ({k})", "sol1": f"방법 {k}A", "sol2": f"방법 {k}B"}
                         for k in range(1 + digest % 2)]
                replies.append(json.dumps({"items": items}, ensure_ascii=False))
            else:
                replies.append(json.dumps({"refined": f"{question} — 다듬음"}, ensure_ascii=False))
        self._log([f"end\t{h}" for h in hashes])
        return replies

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        raise NotImplementedError


def questions() -> list[dict]:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    kin = [r for r in rows if "kin" in str(r.get("source", "")).lower() or "naver" in str(r.get("url", ""))]
    rows = (kin or rows)[:N_QUESTIONS]
    return [{"id": str(r["id"]), "text": str(r.get("text") or r.get("question") or r.get("title") or "")} for r in rows]


def main(argv: list[str]) -> int:
    lake, run_id, prompts, log_path = argv[:4]
    resume = "--resume" in argv
    cfg = EngineConfig(backend="transformers", model="scripted", name="scripted")
    engine = ScriptedEngine(cfg, log_path)
    cache = str(Path(lake) / "cache" / "llm" / run_id)
    generate = LLMGenerate.model_validate({
        "engine": cfg, "prompt": {"id": "gen/ko", "root": prompts}, "variables": {"text": "text"},
        "output": {"kind": "json", "fields": {"goal": "str", "sol1": "str", "sol2": "str"}, "items": True},
        "cache_dir": cache, "chunk_size": 4}).use_engine(engine)
    refine = LLMTransform.model_validate({
        "engine": cfg, "prompt": {"id": "refine/ko", "root": prompts}, "variables": {"text": "goal"},
        "output": {"kind": "json", "fields": {"refined": "str"}}, "cache_dir": cache, "chunk_size": 4}
    ).use_engine(engine)
    generate.resources.batch_size = refine.resources.batch_size = 8
    init_ray(num_cpus=2)
    manifest = run_pipeline(job="creating", dataset="creating", source=RowsSource(records=questions()),
                            stages=[generate, refine], lake=Lake(lake), config={}, run_id=run_id, resume=resume,
                            partition_rows=8)
    print(json.dumps({"status": manifest.status, "stages": [s.model_dump() for s in manifest.stages]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
