"""Crawled HTML becomes the text a reader sees (normalize, strip_html); the original stays in text_original."""

from __future__ import annotations

import pyarrow as pa

from transforms.text.html import html_to_text
from transforms.text.langid import LanguageFilter
from transforms.text.normalize import NormalizeText

PAGE = ("<!DOCTYPE html><html><head><title>家電Q&amp;A</title><style>p{color:red}</style></head><body>"
        "<nav><a href='/'>ホーム</a> | <a href='/faq'>よくある質問</a></nav><header>家電なんでも相談室</header>"
        "<div class='q'><p>洗濯機の<b>糸くず</b>フィルターは&nbsp;どのくらいの頻度で掃除しますか？</p>"
        "<!-- ad slot --><script>track('q')</script></div><footer>&copy; 2024 Example</footer></body></html>")


def test_tags_entities_and_boilerplate_are_removed() -> None:
    assert html_to_text("<p>洗濯機の仕事は?</p>&nbsp;<br/>").strip() == "洗濯機の仕事は?"
    text = html_to_text(PAGE)
    assert text is not None and "糸くずフィルター" in text
    for gone in ("ホーム", "よくある質問", "相談室", "color", "track", "ad slot", "2024", "家電Q&A", "<", "&"):
        assert gone not in text
    assert html_to_text("<li>塩</li><li>砂糖</li>") == "塩\n砂糖\n"  # block ends keep words apart


def test_plain_text_with_angle_brackets_and_ampersands_is_left_alone() -> None:
    for text in ("x < 3 and y > 2", "a<b; c>d", "<3 love", "no markup", "R&D"):
        assert html_to_text(text) == text
    assert html_to_text("AT&amp;T &quot;ok&quot;") == 'AT&T "ok"'


def test_normalize_keeps_the_original_and_the_row_reads_as_its_language() -> None:
    rows = ["<p>洗濯機の仕事は?</p>&nbsp;<br/>", PAGE, "普通の文です", None]
    out = NormalizeText()(pa.table({"text": rows}))
    assert out.column("text_original").to_pylist() == rows
    text = out.column("text").to_pylist()
    assert text[0] == "洗濯機の仕事は?" and text[2] == "普通の文です" and text[3] is None
    assert text[1].startswith("洗濯機の糸くずフィルターは どのくらい")
    kept = LanguageFilter(languages=["ja"])(out.slice(0, 3))
    assert kept.column("drop_reason").to_pylist() == [None, None, None]
    assert NormalizeText(strip_html=False)(pa.table({"text": rows[:1]})).column("text")[0].as_py().startswith("<p>")
