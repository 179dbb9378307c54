"""The CSV-table reply parser on the replies models really write: fences, prose, Markdown, quoting,
Japanese headers, full-width commas, cut-off rows, no table at all; and the expand stage around it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from transforms.core.creating import CHILD, CONSUMED, INPUT, ROLE
from transforms.core.stage import StageError
from transforms.piqa.tables import ParseTableReply, correct_to_label, parse_table_reply, rows_to_items

HEADER = "id,category,question,option1,option2,correct,reasoning,question_en,option1_en,option2_en"

FENCED_WITH_PROSE = f"""はい、ご依頼の形式で3問作成しました。

```csv
{HEADER}
1,台所,ご飯を早く冷ましたい。,ご飯をうちわであおぐ。,ご飯を布団であおぐ。,1,うちわは軽く風を送れる。,I want to cool rice quickly.,Fan the rice with an uchiwa.,Fan the rice with a futon.
2,掃除,"窓の汚れを落としたい。","新聞紙で窓を拭く。","新聞紙で窓を叩く。",1,"拭くと汚れが取れる, 叩いても取れない。",I want to clean a window.,"Wipe the window with newspaper, then dry it.","Hit the window with newspaper, then dry it."
3,季節,冬に手を温めたい。,カイロを手に持つ。,保冷剤を手に持つ。,1,"理由：
カイロは発熱する。",I want to warm my hands.,Hold a heat pack.,Hold an ice pack.
4,台所,味噌汁を温めたい。,鍋を弱火にかける。
```
以上です。ご確認ください。"""


def test_fenced_table_with_prose_around_it_quotes_and_a_cut_off_last_row():
    t = parse_table_reply(FENCED_WITH_PROSE)
    rows = t.to_pylist()
    assert [r["id"] for r in rows] == ["1", "2", "3", "4"]
    assert [r["drop_reason"] for r in rows] == [None, None, None, "partial_row"]
    assert rows[1]["reasoning"] == "拭くと汚れが取れる, 叩いても取れない。"  # a comma inside quotes
    assert rows[1]["option1_en"] == "Wipe the window with newspaper, then dry it."
    assert rows[2]["reasoning"] == "理由：\nカイロは発熱する。"  # a line break inside quotes
    assert rows[3]["option1"] == "鍋を弱火にかける。" and rows[3]["option2"] is None
    assert [r["reply_line"] for r in rows] == [5, 6, 7, 9]


def test_markdown_table_with_japanese_headers_and_a_bad_correct_value():
    reply = """以下の表をご覧ください。

| 番号 | カテゴリー | 質問 | 選択肢1 | 選択肢2 | 正解 | 理由 |
|:---|---|---|---|---|:---:|---|
| 1 | 住まい | 畳の部屋を掃除したい。 | 畳の目に沿って掃除機をかける。 | 畳の目に逆らって掃除機をかける。 | 1 | 目に沿うと傷まない。 |
| 2 | 道具 | 包丁を研ぎたい。 | 砥石を水で濡らす。 | 砥石を油で濡らす。 | ３ | |
| 3 | 道具 | 鍋の焦げを落としたい。 | 重曹を入れて煮る。 | | 1 | |

注意：3問目は未完成です。"""
    rows = parse_table_reply(reply).to_pylist()
    assert [r["question"] for r in rows] == ["畳の部屋を掃除したい。", "包丁を研ぎたい。", "鍋の焦げを落としたい。"]
    assert [r["drop_reason"] for r in rows] == [None, None, "empty_field:option2"]
    assert rows[1]["correct"] == "３" and correct_to_label(rows[1]["correct"]) is None  # the filter's job
    assert rows[0]["reasoning"] == "目に沿うと傷まない。" and rows[1]["reasoning"] is None


def test_full_width_commas_repeated_header_and_too_many_fields():
    reply = "\n".join([
        "id，category，question，option1，option2，correct",
        "1，台所，お湯を早く沸かしたい。，鍋に蓋をする。，鍋に氷を入れる。，1",
        "id，category，question，option1，option2，correct",  # repeated by the model
        "2，台所，卵をゆでたい。，卵を鍋で煮る。，卵を鍋で、焼く。，2，余分",
        "3，台所，「熱い」鍋を持ちたい。，鍋つかみで持つ。，素手で持つ。，１",
    ])
    rows = parse_table_reply(reply).to_pylist()
    assert [r["id"] for r in rows] == ["1", "2", "3"]
    assert [r["drop_reason"] for r in rows] == [None, "too_many_fields", None]
    assert rows[0]["option1"] == "鍋に蓋をする。"
    assert rows[2]["question"] == "「熱い」鍋を持ちたい。"  # Japanese quotes are content
    assert correct_to_label(rows[2]["correct"]) == 0  # full-width １


def test_no_table_and_unfenced_table_with_english_prose_after_it():
    assert parse_table_reply("申し訳ありませんが、作成できません。").column("drop_reason").to_pylist() == ["no_table"]
    assert parse_table_reply(None).column("drop_reason").to_pylist() == ["no_table"]
    reply = "\n".join([
        "Here is the table you asked for:",
        "question,option1,option2,correct",
        "紙を乾かしたい。,紙を日なたに置く。,紙を日陰に置く。,1",
        "",
        "Note: these are easy, but realistic.",
    ])
    rows = parse_table_reply(reply).to_pylist()
    assert len(rows) == 1 and rows[0]["drop_reason"] is None and rows[0]["id"] is None


def test_unclosed_quote_at_the_end_of_a_cut_off_reply_is_one_partial_row():
    reply = f'{HEADER}\n1,台所,湯を沸かす。,鍋で沸かす。,皿で沸かす。,1,"鍋は火にかけられ'
    rows = parse_table_reply(reply).to_pylist()
    assert [r["drop_reason"] for r in rows] == ["partial_row"]


def test_rows_to_items_maps_correct_to_label_and_english_to_glosses():
    items = rows_to_items(parse_table_reply(FENCED_WITH_PROSE))
    assert items.column("label").to_pylist() == [0, 0, 0, None]
    assert items.column("goal_gloss").to_pylist()[0] == "I want to cool rice quickly."
    assert items.column("gen_item_id").to_pylist() == ["1", "2", "3", "4"]
    assert set(items.column("lang").to_pylist()) == {"ja"}


def test_parse_stage_makes_children_and_drops_a_reply_without_a_table():
    batch = pa.table({"id": ["req-0", "req-1"], "llm_text": [FENCED_WITH_PROSE, "できません。"]})
    out = ParseTableReply()(batch)
    roles = out.column(ROLE).to_pylist()
    assert roles.count(CHILD) == 4 and roles.count(INPUT) == 1 and roles.count(CONSUMED) == 1
    children = out.filter(pa.compute.equal(out.column(ROLE), CHILD))
    assert children.column("parent_id").to_pylist() == ["req-0"] * 4
    assert children.column("drop_reason").to_pylist() == [None, None, None, "partial_row"]
    assert len(set(children.column("id").to_pylist())) == 4
    dropped = out.filter(pa.compute.equal(out.column(ROLE), INPUT))
    assert dropped.column("drop_reason").to_pylist() == ["no_table"]
    again = ParseTableReply()(batch)  # deterministic child ids
    assert again.column("id").to_pylist() == out.column("id").to_pylist()
    renamed = batch.rename_columns(["id", "reply"])
    assert ParseTableReply(reply_column="reply")(renamed).num_rows == out.num_rows
    with pytest.raises(StageError, match="reply column 'llm_text'"):
        ParseTableReply()(renamed)
