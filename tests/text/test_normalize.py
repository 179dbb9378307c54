"""`normalize` runs NFKC and the whitespace fold only on the rows that need them; every row must come out as the
whole-column expressions make it. The skip rests on a claim about Unicode, checked here code point by code point."""

from __future__ import annotations

import csv
import json
import sys
import unicodedata
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.text.normalize import CONTROL, NFKC_MAY_CHANGE, NormalizeText

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"

# what no crawl sample is sure to hold: compatibility forms, other spaces, controls, jamo, marks
ODD = ["ＡＢＣ　ｄｅｆ１２３", "ﾊﾝｶｸ ｶﾀｶﾅ", "ﬁnance ① ㈜ ㎏ ¼ x²", "tab\there\nnew  line\r\n end ", "\u3000앞뒤 공백\u3000",
       "제로\u200b폭\ufeff문자\u200e", "한글 자모", "한\u1161 결합", "e\u0301 café", "가\u0308 나", "豈 更 車 (호환 한자)",
       "絵文字 👍🏽 ❤️", "  ", "", "\x07bell\x1b", "ㄱㄴㄷ ㅏㅓ", "﹖？！ 。、「」", "Ⅻ ℃ ™", "a\u00a0b\u2009c\u202fd"]


def reference(texts: list[str | None]) -> list[str | None]:
    """The whole-column expressions the stage used before it skipped rows."""
    text = pl.col(C.TEXT).str.normalize("NFKC").str.replace_all(CONTROL, "")
    text = text.str.replace_all(r"\s+", " ").str.strip_chars()
    out = pl.DataFrame({C.TEXT: pl.Series(texts, dtype=pl.String)}).select(text)
    return out.get_column(C.TEXT).to_list()


def _corpora(shared: Path) -> dict[str, list[str | None]]:
    crawl = [json.loads(line)["text"] for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    fci = [line.split("\t", 1)[-1] for line in (shared / "ko_3i4k" / "fci.txt").read_text(encoding="utf-8").splitlines()]
    with open(shared / "ko_chatbot_songys" / "ChatbotData.csv", encoding="utf-8") as fh:
        chat = [v for row in csv.DictReader(fh) for v in (row["Q"], row["A"])]
    kin = [r.get("question") or r.get("title") or "" for r in map(json.loads, (shared / "ko_naverkin_certifiedjoon" /
                                                                              "dataset.jsonl").open(encoding="utf-8"))]
    ja = (shared / "ja_jglue" / "jsquad_valid_questions.txt").read_text(encoding="utf-8").splitlines()
    return {"crawl": crawl, "3i4k": fci[:20000], "chatbot": chat, "kin": kin, "jsquad": ja, "odd": [*ODD, None]}


def test_every_row_comes_out_as_the_whole_column_expressions_make_it(shared_data):
    for name, texts in _corpora(shared_data).items():
        out = NormalizeText()(pa.table({C.ID: [str(i) for i in range(len(texts))], C.TEXT: pa.array(texts, pa.string())}))
        assert out.column(C.TEXT).to_pylist() == reference(texts), name
        assert out.column("text_original").to_pylist() == texts, name
    changed = reference(ODD)
    assert changed[0] == "ABC def123" and changed[3] == "tab here new line end" and changed[5] == "제로폭문자"


def test_every_code_point_the_nfkc_skip_trusts_is_its_own_nfkc_and_never_composes():
    everything = pl.Series([chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF])
    trusted = everything.filter(~everything.str.contains(NFKC_MAY_CHANGE)).to_list()
    # ASCII, Hangul syllables, CJK unified ideographs (U+4E00-9FFF), hiragana, katakana: nothing else
    assert len(trusted) == 128 + 11_172 + 20_992 + 86 + 90
    assert [c for c in trusted if unicodedata.normalize("NFKC", c) != c] == []
    # a canonical composition needs a second character some decomposition ends with: none is trusted
    seconds = {d.split()[1] for c in range(sys.maxunicode + 1)
               if (d := unicodedata.decomposition(chr(c))) and not d.startswith("<") and len(d.split()) == 2}
    assert not {chr(int(s, 16)) for s in seconds} & set(trusted)
    # nor does Hangul's algorithmic composition (a syllable + a trailing jamo): the jamo are not trusted
    assert not {chr(c) for c in range(0x1100, 0x1200)} & set(trusted)


@pytest.mark.parametrize("field", ["nfkc", "strip_control", "collapse_whitespace"])
def test_each_step_can_be_turned_off(field):
    out = NormalizeText(**{field: False})(pa.table({C.ID: ["a"], C.TEXT: ["ＡＢ\u200b  c "]})).column(C.TEXT)[0].as_py()
    assert out == {"nfkc": "ＡＢ c", "strip_control": "AB\u200b c", "collapse_whitespace": "AB  c "}[field]
