"""Crawl language ID by script (`langid`, method auto): decisions on clear cases, never fastText's floats.

Kana decide Japanese, a text mostly outside every wanted language's script is another language's, a
script only one language writes decides it, and fastText counts only as far as a text's length allows.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import ValidationError

from transforms.core import columns as C
from transforms.piqa.item_checks import ItemLanguageCheck
from transforms.text.langid import LanguageFilter


@pytest.fixture(scope="module")
def japanese() -> LanguageFilter:
    stage = LanguageFilter(languages=["ja"])
    stage.ensure_setup()
    return stage


def decisions(stage: LanguageFilter, texts: list[str | None]) -> list[tuple[str | None, str | None, str | None]]:
    out = stage(pa.table({"text": texts}))
    return list(zip(out.column("lang").to_pylist(), out.column("lang_method").to_pylist(),
                    out.column(C.DROP_REASON).to_pylist(), strict=True))


def test_short_japanese_is_kept_without_a_shortcut(japanese: LanguageFilter) -> None:
    texts = ["洗濯機の仕事は?", "ガスコンロの火が消えない", "電子レンジ", "雪だるまの作り方", "お米を研ぐ"]
    assert decisions(japanese, texts) == [("ja", "script", None)] * len(texts)


def test_other_scripts_and_chinese_are_dropped_for_a_japanese_crawl(japanese: LanguageFilter) -> None:
    texts = ["How do I keep bread from going stale?", "Как быстро разморозить курицу?",
             "냉장고에 김치를 얼마나 오래 둬도 되나요?", "我们应该怎么修理这辆自行车的刹车呢", "ரொட்டியை எப்படி சேமிப்பது?"]
    got = decisions(japanese, texts)
    assert [r for _, _, r in got] == ["wrong_language"] * len(texts)
    assert [m for _, m, _ in got] == ["script"] * len(texts)
    assert [lang for lang, _, _ in got][2:] == ["ko", "zh", "ta"]


def test_a_single_language_script_decides_and_latin_terms_do_not_count_against_it() -> None:
    stage = LanguageFilter(languages=["ko"])
    texts = ["휴", "LCD/LED/OLED 차이. LCD/LED/OLED 차이가 뭔가요? 셋다 화면표시장치 맞나요?",
             "영상에나오는 믹서기 제품 좀 알려주세요. https://youtu.be/du-hUPHUz1k28초때",
             "Put the rice in the cooker and press the button to start it."]
    got = decisions(stage, texts)
    assert got[:3] == [("ko", "script", None)] * 3
    assert got[3][2] == "wrong_language"


def test_same_script_languages_go_to_fasttext_and_long_text_is_read() -> None:
    stage = LanguageFilter(languages=["en"])
    texts = ["How do I keep bread from going stale for a whole week in summer?",
             "¿Cómo puedo evitar que el pan se ponga duro durante toda una semana en verano?"]
    got = decisions(stage, texts)
    assert got[0] == ("en", "fasttext", None)
    assert got[1][:2] == ("es", "fasttext") and got[1][2] == "wrong_language"


def test_null_text_and_the_old_fasttext_method() -> None:
    assert decisions(LanguageFilter(languages=["ja"]), [None])[0][:2] == (None, None)
    old = decisions(LanguageFilter(languages=["ko"], method="fasttext", script_shortcut={"ko": 0.9}),
                    ["냉장고에 김치를 얼마나 오래 둬도 되나요?"])
    assert old == [("ko", "script", None)]


def test_script_shortcut_for_japanese_points_at_auto() -> None:
    with pytest.raises(ValidationError, match="method: auto"):
        LanguageFilter(languages=["ja"], script_shortcut={"ja": 0.9})


def test_item_language_reads_the_columns_it_is_given() -> None:
    stage = ItemLanguageCheck(lang="en", columns=["question", "answer"])
    batch = pa.table({"question": ["How do I open a stuck jar lid?"], "answer": ["Run it under hot water."]})
    out = stage(batch)
    assert out.column(C.DROP_REASON).to_pylist() == [None]
    with pytest.raises(Exception, match=r"\['answer'\]"):
        stage(pa.table({"question": ["How do I open a stuck jar lid?"]}))
