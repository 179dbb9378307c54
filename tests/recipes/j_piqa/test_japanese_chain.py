"""The J-PIQA and Russian pieces on the real runner (local Ray, 2 CPUs): replies → parsed items →
constraint checks → duplicate triplets, and bundled documents as a source; the conservation law
holds for every stage, counted from the files on disk."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("fugashi", reason="the `lang` extra (fugashi, unidic-lite) is not installed")

from transforms.core import columns as C  # noqa: E402
from transforms.core.lake import Lake, read_table  # noqa: E402
from transforms.core.runner import conservation_errors, run_pipeline  # noqa: E402
from transforms.io.documents import DocumentSource  # noqa: E402
from transforms.io.sources import RowsSource  # noqa: E402
from transforms.piqa.piqa_sets import DuplicateTripletFilter  # noqa: E402
from transforms.piqa.tables import ParseTableReply  # noqa: E402
from transforms.recipes.j_piqa.stages import JapaneseConstraintFilter  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[3] / "lake" / "samples"
HEADER = "id,category,question,option1,option2,correct,reasoning"
REPLY_A = "\n".join([
    "以下の通りです。", "```csv", HEADER,
    "1,台所,ご飯を早く冷ましたい。,ご飯をうちわであおぐ。,ご飯を布団であおぐ。,1,うちわは軽い。",
    "2,掃除,窓の汚れを落としたい。,新聞紙で窓を拭く。,新聞紙で窓を拭く。,1,同じ文。",
    "3,季節,冬に手を温めたい。,カイロを手に持つ。,保冷剤を手に持つ。,３,番号が全角の3。",
    "4,道具,包丁を研ぎたい。,砥石を水で濡らす。,砥石を油で濡らす。,1,水で使う砥石。",
    "5,台所,味噌汁を温めたい。,鍋を弱火にかける。", "```",
])
REPLY_B = "\n".join([
    HEADER,
    "1,道具,包丁を研ぎたい。,砥石を油で濡らす。,砥石を水で濡らす。,2,同じ問題の入れ替え。",
    "2,住まい,畳の部屋を掃除したい。,畳の目に沿って掃除機をかける。,畳の目に逆らって掃除機をかける。,1,目に沿う。",
])


@pytest.mark.ray
def test_replies_to_checked_items_on_the_runner(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake")
    source = RowsSource(records=[{"id": "req-a", "llm_text": REPLY_A}, {"id": "req-b", "llm_text": REPLY_B},
                                 {"id": "req-c", "llm_text": "申し訳ありません。"}])
    chain = [ParseTableReply(), JapaneseConstraintFilter(), DuplicateTripletFilter()]
    manifest = run_pipeline(job="j-piqa-test", dataset="j-piqa-test", source=source, stages=chain, lake=lake,
                            config={}, run_id="jp-1")
    assert manifest.status == "succeeded" and conservation_errors(manifest) == []
    parse, constraints, triplets = manifest.stages[1:]
    assert (parse.rows_in, parse.rows_created, parse.rows_consumed) == (3, 7, 2)
    assert parse.rows_dropped == {"no_table": 1, "partial_row": 1}
    assert constraints.rows_dropped == {"options_identical": 1, "invalid_correct": 1}
    assert triplets.rows_dropped == {"duplicate_triplet": 1} and triplets.rows_kept == 3
    kept = read_table(lake.root / triplets.outputs["kept"])
    assert sorted(kept.column("goal").to_pylist()) == sorted(["ご飯を早く冷ましたい。", "包丁を研ぎたい。", "畳の部屋を掃除したい。"])
    assert set(kept.column(C.PARENT_ID).to_pylist()) == {"req-a", "req-b"}
    assert set(kept.column("label").to_pylist()) == {0}


@pytest.mark.ray
def test_bundled_documents_as_a_source_on_the_runner(ray_local, tmp_path):
    lake = Lake(tmp_path / "lake")
    source = DocumentSource(paths=[str(SAMPLES / "ru_documents.jsonl")], kinds=["document"])
    manifest = run_pipeline(job="ru-docs-test", dataset="ru-docs-test", source=source, stages=[], lake=lake,
                            config={}, run_id="ru-1")
    assert manifest.status == "succeeded" and conservation_errors(manifest) == []
    rec = manifest.stages[0]
    assert rec.rows_in == 0 and rec.rows_created == rec.rows_kept == 194
    chunks = read_table(lake.root / rec.outputs["kept"])
    assert Counter(chunks.column("licence").to_pylist()) == {"CC BY-SA 4.0": 194}
    assert len(set(chunks.column(C.ID).to_pylist())) == 194
