"""The report's prompts and replies for a classifier-shaped LLM stage (the cultural tagger's `llm`).

The tagger runs in-process on real Korean questions from the bundled crawl sample, with the
project's own prompt (prompts/classify_cultural/ko.yaml) and an engine double (a test double of the
engine *interface*, not a model: it answers by a rule written here). The report then re-renders the
prompts from the stage's recorded config and must show only conversations whose cache key it found,
each with the answer its own row got. test_report_examples.py covers the LLMCall-shaped stages.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.core import columns as C
from transforms.core.manifest import RunManifest, StageRecord
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.cultural import CulturalTagger
from transforms.llm.prompts import load_prompt
from transforms.report.prompts import llm_examples

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"


def rule(conv: list[ChatMessage]) -> str:
    question = conv[-1]["content"].split("<question>")[-1].split("</question>")[0].strip()
    return "예" if int(hashlib.sha1(question.encode()).hexdigest(), 16) % 3 == 0 else "아니오"


class RuleEngine(LLMEngine):
    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [rule(c) for c in conversations]

    def option_logprobs(self, prompts, options):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the double only chats")

    def loglikelihood(self, requests):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the double only chats")


def _manifest(tmp_path: Path, tagger: CulturalTagger, rows: pa.Table) -> RunManifest:
    before = tmp_path / "staged" / "00_read"
    before.mkdir(parents=True)
    pq.write_table(rows, before / "p00000.parquet")
    read = StageRecord(index=0, name="read", kind="source", rows_in=0, rows_created=rows.num_rows,
                       rows_kept=rows.num_rows, seconds=0.1, outputs={"kept": str(before)})
    tag = StageRecord(index=1, name="cultural_tag", kind="filter", rows_in=rows.num_rows, rows_kept=rows.num_rows,
                      seconds=0.1,
                      config=tagger.describe(), outputs={"kept": str(tmp_path / "staged" / "01_cultural_tag")})
    return RunManifest(run_id="t", job="t", dataset="t", config={}, code_version={}, stages=[read, tag])


@pytest.mark.parametrize("views", ["whole", "first"])
def test_a_classifier_stage_shows_the_prompts_it_sent_and_each_rows_answer(tmp_path, views):
    lines = [json.loads(x) for x in SAMPLE.read_text(encoding="utf-8").splitlines()[:30]]
    rows = pa.table({C.ID: [str(r["id"]) for r in lines], C.TEXT: [r["text"] for r in lines]})
    engine = RuleEngine(EngineConfig(backend="transformers", model="rule-double"))
    tagger = CulturalTagger(language="ko", cache_dir=str(tmp_path / "cache"), chunk_size=4,
                            llm={"name": "rule", "engine": engine.config, "prompt": "classify_cultural/ko",
                                 "mode": "generate", "views": views, "view_chars": 60}).use_engine(engine)
    out = tagger(rows)
    asked = {i for i, s in zip(out.column(C.ID).to_pylist(), out.column("cultural_source").to_pylist(),
                               strict=True) if s != "lexicon"}
    manifest = _manifest(tmp_path, tagger, rows)
    page = llm_examples(manifest, manifest.stages[1])
    assert "classifier rule · prompt classify_cultural/ko@1 · generate" in page
    examples = re.findall(r"<div class='llm-example'><p>row <code>([^<]+)</code>(.*?)</div>", page, re.S)
    assert len(examples) == 3
    options = load_prompt("classify_cultural/ko").options
    texts = dict(zip(rows.column(C.ID).to_pylist(), rows.column(C.TEXT).to_pylist(), strict=True))
    for row_id, body in examples:
        assert row_id in asked
        system, user = (html.unescape(m) for m in re.findall(r"<pre class='msg'>(.*?)</pre>", body, re.S))
        fenced = user.split("<question>")[1].split("</question>")[0].strip()
        assert fenced and texts[row_id].startswith(fenced[:15])  # the row's own question, or its first view
        option = html.unescape(re.search(r"<b>option</b>: (.*?)</p>", body).group(1))
        assert option == rule([{"role": "system", "content": system}, {"role": "user", "content": user}])
        assert option in options


def test_without_a_matching_cache_the_report_says_why_and_shows_no_prompt(tmp_path):
    lines = [json.loads(x) for x in SAMPLE.read_text(encoding="utf-8").splitlines()[:12]]
    rows = pa.table({C.ID: [str(r["id"]) for r in lines], C.TEXT: [r["text"] for r in lines]})
    engine = RuleEngine(EngineConfig(backend="transformers", model="rule-double"))
    tagger = CulturalTagger(language="ko", cache_dir=str(tmp_path / "cache"),
                            llm={"name": "rule", "engine": engine.config, "prompt": "classify_cultural/ko",
                                 "mode": "generate"}).use_engine(engine)
    tagger(rows)
    manifest = _manifest(tmp_path, tagger, rows)
    manifest.stages[1].config["llm"]["engine"]["model"] = "another-model"  # not the model that answered
    page = llm_examples(manifest, manifest.stages[1])
    assert "llm-example" not in page and "has an answer in" in page
    manifest.stages[1].config["cache_dir"] = None
    assert "no prompts and replies on disk" in llm_examples(manifest, manifest.stages[1])
