"""The run report's example rows, prompts and lineage, read back from a real run's lake.

Real Korean questions from the bundled crawl sample, plus one planted row whose text holds a
`<script>` tag, go through normalize → length filter → an LLM classifier (LLMTransform, choice) →
LLM item generation (LLMGenerate, an expand stage). The engine is a test double of the engine
*interface*, not a model: its replies follow a rule written below, so the test can check that each
prompt shown in the report is paired with the reply its own row got. The report must show, per
stage, rows that really are in that stage's files, with the stage's own columns, escaped.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ray import cloudpickle as ray_cloudpickle

from transforms.core import columns as C
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest
from transforms.core.runner import run_pipeline
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.generate import LLMGenerate
from transforms.llm.transform import LLMTransform
from transforms.report.examples import CELL_CHARS
from transforms.report.run_report import render_report, write_report
from transforms.text.normalize import NormalizeText
from transforms.text.quality import LengthFilter

ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
PLANTED = "<script>alert('report')</script> 냄비 뚜껑을 덮고 물을 끓이면 더 빨리 끓나요? " + "아주 긴 질문 " * 300
PROMPTS = {
    "is_physical/ko": ("yes/no", '["예", "아니요"]', "다음 질문이 물건을 다루는 일상적인 방법을 묻는지 "
                       "'예' 또는 '아니요'로만 답하세요."),
    "make_items/ko": ("items", "[]", "질문을 바탕으로 상식 문항을 JSON으로만 쓰세요: "
                      '{"items": [{"goal": ..., "sol1": ..., "sol2": ...}]}'),
}


def question(conv: list[ChatMessage]) -> str:
    return conv[-1]["content"].split("<question>")[-1].split("</question>")[0].strip()


def digest(text: str) -> int:
    return int(hashlib.sha1(text.encode()).hexdigest(), 16)


def expected_reply(conv: list[ChatMessage]) -> str:
    """The double's rule (also the test's oracle for the report's prompt/reply pairs)."""
    q = question(conv)
    if "예' 또는 '아니요'" in conv[0]["content"]:
        return "글쎄요" if digest(q) % 6 == 0 else ("예" if "?" in q else "아니요")
    n = digest(q) % 3
    if n == 0:
        return "문항을 만들 수 없습니다."
    return json.dumps({"items": [{"goal": f"{q[:30]} ({k})", "sol1": f"방법 {k}A", "sol2": f"방법 {k}B"}
                                 for k in range(n)]}, ensure_ascii=False)


class RuleEngine(LLMEngine):
    """A test double of the engine interface (not a model): replies by `expected_reply`."""

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [expected_reply(c) for c in conversations]

    def option_logprobs(self, prompts, options):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the double only chats")

    def loglikelihood(self, requests):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the double only chats")


def write_prompts(root: Path) -> str:
    for pid, (task, options, system) in PROMPTS.items():
        path = root / f"{pid}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"id: {pid}\nversion: \"1\"\ntask: {task.replace('/', '_')}\nlanguage: ko\n"
                        f"options: {options}\nsystem: |-\n  {system}\ntemplate: |-\n  <question>\n  "
                        "{{ text }}\n  </question>\n", encoding="utf-8")
    return str(root)


@pytest.fixture(scope="module")
def run(ray_local, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:40]
    lines.insert(17, json.dumps({"id": "planted-script", "text": PLANTED, "source": "test"}, ensure_ascii=False))
    crawl = tmp / "crawl.jsonl"
    crawl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    prompts = write_prompts(tmp / "prompts")
    engine = RuleEngine(EngineConfig(backend="transformers", model="rule-double"))
    lake = Lake(tmp / "lake")
    cache = str(lake.run_dir("rep") / "cache" / "llm")
    classify = LLMTransform.model_validate({
        "engine": engine.config, "prompt": {"id": "is_physical/ko", "root": prompts},
        "output": {"kind": "choice", "column": "is_physical"}, "params": {"max_tokens": 4},
        "cache_dir": cache, "chunk_size": 4}).use_engine(engine)
    generate = LLMGenerate.model_validate({
        "engine": engine.config, "prompt": {"id": "make_items/ko", "root": prompts},
        "output": {"kind": "json", "fields": {"goal": "str", "sol1": "str", "sol2": "str"}, "items": True},
        "cache_dir": cache, "chunk_size": 4}).use_engine(engine)
    manifest = run_pipeline(job="report", dataset="report", source=CrawlSource(CrawlInput(paths=[str(crawl)])),
                            # strip_html off: the planted markup must reach the report, which escapes it
                            stages=[NormalizeText(strip_html=False), LengthFilter(min_chars=25, max_chars=1500),
                                    classify, generate],
                            lake=lake, config={}, run_id="rep", fuse=False)  # every stage's own kept files
    report = write_report(manifest, lake.run_dir("rep") / "report.html")
    return manifest, report.read_text(encoding="utf-8"), report


def blocks(page: str) -> dict[str, str]:
    return dict(re.findall(r"<details open class='stage-examples' data-stage='([^']+)'>(.*?)</details>", page, re.S))


def tables(block: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(caption, headers, rows of cell texts) of each example table, cells unescaped."""
    out = []
    for body in re.findall(r"<table class='ex'>(.*?)</table>", block, re.S):
        caption = re.search(r"<caption[^>]*>(.*?)</caption>", body)
        heads = re.findall(r"<th class='l'>(.*?)</th>", body)
        rows = [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td class='t'>(.*?)</td>", tr, re.S)]
                for tr in re.findall(r"<tr>(<td.*?)</tr>", body, re.S)]
        out.append((html.unescape(caption.group(1)) if caption else "", heads, rows))
    return out


def shown(value, chars: int = CELL_CHARS) -> str:
    """A value as the report prints it: JSON for lists and dicts, cut to `chars` with an ellipsis."""
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value)
    return text if len(text) <= chars else text[:chars - 1] + "…"


def test_every_stage_shows_rows_that_are_in_its_files_with_its_own_columns(run):
    manifest, page, _ = run
    found = blocks(page)
    assert list(found) == [s.name for s in manifest.stages]
    for rec in manifest.stages:
        for caption, heads, rows in tables(found[rec.name]):
            if not caption:
                continue  # a creating stage's children (test_the_expand_stage_shows_parents_with_their_children)
            zone = "kept" if " kept" in caption else "rejected"
            disk = {r[C.ID]: r for r in read_table(Path(rec.outputs[zone])).to_pylist()}
            for row in rows:
                actual = disk[row[heads.index(C.ID)]]  # a KeyError would mean the row is not the stage's
                for head, value in zip(heads, row, strict=True):
                    if head in actual and actual[head] is not None and not isinstance(actual[head], float):
                        assert value == shown(actual[head]), (rec.name, head)
    normalize = tables(found["normalize"])
    assert "text_original" in normalize[0][1]
    classify = tables(found["llm_transform"])
    kept_heads = classify[0][1]
    assert {"is_physical", C.PROMPT, C.MODEL} <= set(kept_heads)
    dropped = next(t for t in classify if "dropped" in t[0])
    assert {C.DROP_REASON, "llm_raw"} <= set(dropped[1])
    assert {r[dropped[1].index(C.DROP_REASON)] for r in dropped[2]} == {"invalid_output"}
    assert {r[dropped[1].index("llm_raw")] for r in dropped[2]} == {"글쎄요"}


def test_planted_markup_is_escaped_and_shown_with_its_reason(run):
    _, page, _ = run
    assert "<script>" not in page and "alert(" in page
    length = tables(blocks(page)["length_filter"])
    dropped = next(t for t in length if "dropped" in t[0])
    text = dropped[1].index(C.TEXT)
    row = next(r for r in dropped[2] if r[text].startswith("<script>alert('report')</script> 냄비"))
    assert row[dropped[1].index(C.DROP_REASON)] == "too_long" and row[text].endswith("…")
    assert "&lt;script&gt;alert(&#x27;report&#x27;)&lt;/script&gt;" in page


def test_llm_stages_show_the_prompts_sent_and_the_replies_each_row_got(run):
    _, page, _ = run
    for stage in ("llm_transform", "llm_generate"):
        block = blocks(page)[stage]
        assert "Prompts and replies" in block
        examples = re.findall(r"<div class='llm-example'>(.*?)</div>", block, re.S)
        assert len(examples) == 3, stage
        for ex in examples:
            messages = [html.unescape(m) for m in re.findall(r"<pre class='msg'>(.*?)</pre>", ex, re.S)]
            conv = [{"role": "system", "content": messages[0]}, {"role": "user", "content": messages[1]}]
            reply = html.unescape(re.search(r"<b>reply</b>: (.*?)</p>", ex, re.S).group(1))
            assert reply == shown(expected_reply(conv), 2000)


def test_the_expand_stage_shows_parents_with_their_children(run):
    manifest, page, _ = run
    rec = manifest.stages[-1]
    block = blocks(page)["llm_generate"]
    parents = re.findall(r"<b>parent</b> <code>([^<]+)</code>: (.*?) → (\d+) children", block)
    assert parents
    lineage = {r[C.PARENT_ID]: r["child_ids"] for r in read_table(Path(rec.outputs["lineage"])).to_pylist()}
    inputs = {r[C.ID]: r[C.TEXT] for r in read_table(Path(manifest.stages[-2].outputs["kept"])).to_pylist()}
    for pid, text, n in parents:
        assert int(n) == len(lineage[pid]) and html.unescape(text) == shown(inputs[pid], 300)
    kids = [t for t in tables(block) if not t[0]]  # the children tables have no caption
    assert kids and all(r[t[1].index(C.ID)] in {c for ids in lineage.values() for c in ids} for t in kids for r in t[2])


def test_the_report_is_the_same_when_rebuilt(run):
    manifest, page, _ = run
    assert render_report(RunManifest.load(Path(manifest.outputs["manifest"])), None) == \
        render_report(RunManifest.load(Path(manifest.outputs["manifest"])), None)
    assert page.count("stage-examples") == len(manifest.stages)


def test_the_report_renders_in_headless_chromium(run, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    from PIL import Image

    _, _, report = run
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri()],
                   capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("L")
    assert image.size == (1200, 1600)
    histogram = image.histogram()
    dark = sum(histogram[:200]) / (image.size[0] * image.size[1])
    assert 0.01 < dark < 0.5, dark  # text and bars on a white page: neither blank nor a black box
    dom = subprocess.run([browser, *flags, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "id=\"examples\"" in dom and dom.count("class=\"stage-examples\"") == 5
    assert "&lt;script&gt;alert" in dom and "<script>alert" not in dom
    assert parquet_files(Path(report).parent / "cache" / "llm")
    assert pq.read_schema(parquet_files(Path(report).parent / "cache" / "llm")[0]).names[:2] == ["key", "id"]


def test_a_fused_member_says_where_its_kept_rows_went(ray_local, tmp_path):
    crawl = tmp_path / "crawl.jsonl"
    crawl.write_text("\n".join(SAMPLE.read_text(encoding="utf-8").splitlines()[:40]) + "\n", encoding="utf-8")
    lake = Lake(tmp_path / "lake")
    manifest = run_pipeline(job="report", dataset="report", source=CrawlSource(CrawlInput(paths=[str(crawl)])),
                            stages=[NormalizeText(), LengthFilter(min_chars=25, max_chars=1500)], lake=lake,
                            config={}, run_id="fused")
    assert manifest.stages[1].fused_with == ["normalize", "length_filter"]
    page = write_report(manifest, lake.run_dir("fused") / "report.html").read_text(encoding="utf-8")
    normalize = blocks(page)["normalize"]
    assert "40 rows, handed to length_filter in the same pass" in normalize
    assert tables(blocks(page)["length_filter"])  # the last member's rows are in its files, shown as usual
    assert "(one pass with length_filter; seconds shared out)" in page  # the stage table says it ran fused
