"""Translation engine pieces without a model: segmentation, the cache, configs, the corpora and the
chrF figure, reply cleaning, and the `openai` backend's HTTP path through httpx.MockTransport (the
handler stands in for an endpoint, not a model; real models: test_translate_ct2.py and
test_translate_llm.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from jobs.translate_eval import engine_config
from transforms.llm.openai_engine import OpenAIEngine
from transforms.translate.base import build_translator, parse_translator_config
from transforms.translate.cache import SegmentCache, segment_key
from transforms.translate.config import CT2Config, LLMTranslateConfig, OpenAITranslateConfig
from transforms.translate.languages import madlad_tag, nllb_code
from transforms.translate.llm import LLMTranslator, clean_reply
from transforms.translate.quality import data_root, load_pair, score
from transforms.translate.segment import Segmenter


# -- segmentation --------------------------------------------------------------------------------
@pytest.mark.parametrize("text, segments", [
    ("Boil the water. Then add salt, e.g. a pinch! Done?",
     ["Boil the water.", "Then add salt, e.g. a pinch!", "Done?"]),
    ('Mr. Kim said "Stop." Then he left.', ['Mr. Kim said "Stop."', "Then he left."]),
    ("水を沸かす。塩を入れる。\n\n完了", ["水を沸かす。", "塩を入れる。", "完了"]),
    ("यह एक वाक्य है। यह दूसरा है।", ["यह एक वाक्य है।", "यह दूसरा है।"]),
    ("Step 3. Stir well", ["Step 3. Stir well"]),
    ("   ", []),
])
def test_split_sentences(text, segments):
    assert Segmenter().split(text)[0] == segments


def test_join_keeps_newlines_and_spaces_by_script():
    seg = Segmenter()
    parts, seps = seg.split("One. Two.\nThree.")
    assert seg.join(["A.", "B.", "C."], seps, "hi") == "A. B.\nC."
    assert seg.join(["あ。", "い。", "う。"], seps, "ja") == "あ。い。\nう。"
    assert Segmenter(enabled=False).split("One. Two.")[0] == ["One. Two."]


def test_long_segments_are_cut_under_the_limit():
    text = "word " * 60 + "end, " + "más " * 40
    parts, seps = Segmenter(max_chars=50).split(text.strip())
    assert all(len(p) <= 50 for p in parts) and len(seps) == len(parts) - 1
    assert " ".join(parts).split() == text.split()
    assert all(len(p) <= 20 for p in Segmenter(max_chars=20).split("あ" * 70)[0])


# -- cache, languages, configs ---------------------------------------------------------------------
def test_segment_key_covers_every_part():
    base = ("ctranslate2", "m", "en", "hi", "Boil water.")
    keys = {segment_key(*base)} | {segment_key(*(base[:i] + ("x",) + base[i + 1:])) for i in range(5)}
    assert len(keys) == 6 and all(len(k) == 64 for k in keys)


def test_segment_cache_persists_in_chunks(tmp_path):
    cache = SegmentCache(tmp_path / "c")
    cache.put("k1", "एक")
    cache.put("k1", "other")  # first answer stands
    cache.flush()
    cache.flush()  # nothing pending: no empty chunk
    again = SegmentCache(tmp_path / "c")
    assert again.load() == 1 and again.get("k1") == "एक"
    assert len(list((tmp_path / "c").glob("*.parquet"))) == 1
    assert SegmentCache(None).load() == 0


def test_language_tags():
    assert madlad_tag("hi") == "<2hi>" and nllb_code("ta") == "tam_Taml" and nllb_code("hin_Deva") == "hin_Deva"
    assert [nllb_code(c) for c in ("bn", "kn", "ml", "ja", "ko", "ru")] == [
        "ben_Beng", "kan_Knda", "mal_Mlym", "jpn_Jpan", "kor_Hang", "rus_Cyrl"]
    with pytest.raises(ValueError, match="unknown language"):
        madlad_tag("xx")


def test_backend_tag_picks_the_config():
    assert isinstance(parse_translator_config({"backend": "ctranslate2", "model": "/m"}), CT2Config)
    assert isinstance(parse_translator_config({"backend": "llm"}), LLMTranslateConfig)
    assert isinstance(parse_translator_config({"backend": "openai", "model": "gpt"}), OpenAITranslateConfig)
    with pytest.raises(ValueError):
        parse_translator_config({"backend": "ctranslate2", "model": "/m", "beam": 2})  # typo: extra field
    with pytest.raises(ValueError, match="needs --model"):
        engine_config("madlad-ct2")
    cfg = engine_config("madlad-ct2", model="/models/madlad", device="cuda", compute_type="int8_float16")
    assert build_translator(cfg).config.device == "cuda"


def test_import_stays_light():
    code = ("import sys, transforms.translate.stage, transforms.translate.quality, jobs.translate_eval; "
            "print([m for m in ('torch', 'transformers', 'ctranslate2', 'sacrebleu', 'sentencepiece') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- corpora and the figure ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpora():
    if not (data_root() / "parallel_indic_joshua").exists():
        pytest.skip(f"parallel corpora not found under {data_root()}")


def test_load_pair_is_a_seeded_aligned_sample(corpora):
    src, ref = load_pair("en-hi", limit=20, seed=1)
    assert len(src) == len(ref) == 20 and load_pair("en-hi", limit=20, seed=1) == (src, ref)
    assert load_pair("en-hi", limit=20, seed=2) != (src, ref)
    back, fwd = load_pair("hi-en", limit=20, seed=1)
    assert (back, fwd) == (ref, src)
    ja_src, ja_ref = load_pair("en-ja", limit=5)
    assert all(" " not in r for r in ja_ref) and all(s[0].isupper() and " 't" not in s for s in ja_src)
    with pytest.raises(ValueError, match="known pairs"):
        load_pair("en-fr")


def test_score_rewards_the_reference(corpora):
    src, ref = load_pair("en-ta", limit=10)
    perfect = score(ref, ref, "ta")
    assert perfect == {"chrf": 100.0, "bleu": 100.0}
    shuffled = score(ref[1:] + ref[:1], ref, "ta")
    assert shuffled["chrf"] < 40 and score(src, ref, "ta")["chrf"] < shuffled["chrf"] + 20
    assert score([""] * 10, ref, "ta")["chrf"] == 0.0


# -- LLM replies and the openai backend ------------------------------------------------------------
@pytest.mark.parametrize("reply, expected", [
    ('Translation: "彼は泳いだ。"\n\nNote: casual register.', "彼は泳いだ。"),
    ("<text>\nवह तैर गया।\n</text>", "वह तैर गया।"),
    ("Japanese: 彼は泳いだ。", "彼は泳いだ。"),
    ("Translation:\n彼は泳いだ。", "彼は泳いだ。"),
    ("```\n彼は泳いだ。\n```", "彼は泳いだ。"),
    ("   ", ""),
])
def test_clean_reply(reply, expected):
    assert clean_reply(reply, "text", "Japanese") == expected


def test_openai_backend_prompt_key_and_cache(monkeypatch):
    monkeypatch.setenv("MT_KEY", "sk-translate-test")
    seen: list[tuple[dict, str | None]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        seen.append((body, req.headers.get("authorization")))
        sentence = body["messages"][-1]["content"].split("<text>")[1].split("</text>")[0].strip()
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant",
                                                                  "content": f"Translation: [hi] {sentence}"}}]})

    cfg = OpenAITranslateConfig(model="served-mt", base_url="http://mt.test/v1", api_key_env="MT_KEY")
    engine = LLMTranslator(cfg, engine=OpenAIEngine(cfg.engine_config(), transport=httpx.MockTransport(handler)))
    out = engine.translate(["Boil the water. Add rice.", "Add rice."], "en", "hi")
    assert out == ["[hi] Boil the water. [hi] Add rice.", "[hi] Add rice."]
    assert len(seen) == 2  # "Add rice." once: deduplicated within the call
    body, auth = seen[0]
    assert auth == "Bearer sk-translate-test" and body["model"] == "served-mt" and body["temperature"] == 0.0
    system = body["messages"][0]["content"]
    assert "from English into Hindi" in system and "sk-translate" not in json.dumps(body)
    assert engine.translate(["Add rice. Boil the water."], "en", "hi") == ["[hi] Add rice. [hi] Boil the water."]
    assert len(seen) == 2 and engine.stats.cache_hits == 2
    assert engine.provenance() == {"model": "openai:served-mt", "prompt": "translate/en@1",
                                   "gen_params": json.dumps(cfg.generation.model_dump(), sort_keys=True)}


def test_openai_backend_errors_become_failed_rows():
    cfg = OpenAITranslateConfig(model="m", base_url="http://mt.test/v1", options={"max_retries": 0})
    engine = LLMTranslator(cfg, engine=OpenAIEngine(cfg.engine_config(), transport=httpx.MockTransport(
        lambda req: httpx.Response(400, json={"error": "bad request"}))))
    assert engine.translate_with_status(["Boil the water."], "en", "ta") == [(None, "translation_failed")]
