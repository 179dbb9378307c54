"""Crawl readers on real files: the bundled JSONL sample, the Naver KiN Parquet and the songys
chatbot CSV from ../shared/data. Every oracle is computed independently (json, csv, pyarrow)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from transforms.io.common import CRAWL_WITH_REASON
from transforms.io.crawl import ColumnMappingError, CrawlInput, CrawlSource, detect_format, read_local

SAMPLE = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"
SAMPLE_COLUMNS = {"id": "id", "text": "text", "source": "source", "url": "url"}


def _by_id(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def test_jsonl_sample_reads_every_line_with_mapped_columns():
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    table = read_local(CrawlInput(paths=[str(SAMPLE)], columns=SAMPLE_COLUMNS))
    assert table.schema == CRAWL_WITH_REASON
    assert table.num_rows == len(lines) == 4600
    assert table.column("drop_reason").null_count == 4600
    assert pc.count_distinct(table.column("id")).as_py() == 4600
    got = {r["id"]: r for r in table.select(["id", "text", "source", "url"]).to_pylist()}
    for record in records[:: 97]:
        assert got[record["id"]] == {k: record[k] for k in ("id", "text", "source", "url")}


def test_jsonl_byte_ranges_give_the_same_rows_as_one_range():
    whole = read_local(CrawlInput(paths=[str(SAMPLE)], columns=SAMPLE_COLUMNS))
    spec = CrawlInput(paths=[str(SAMPLE)], columns=SAMPLE_COLUMNS, block_bytes=5000)
    source = CrawlSource(spec)
    assert len(source.tasks) > 100  # many ranges, most of them cutting a line in two
    split = read_local(spec)
    assert _by_id(split).equals(_by_id(whole))


def test_jsonl_without_id_mapping_uses_byte_offsets(tmp_path):
    lines = SAMPLE.read_bytes().splitlines(keepends=True)[:50]
    path = tmp_path / "part.jsonl"
    path.write_bytes(b"".join(lines))
    table = read_local(CrawlInput(paths=[str(path)]))
    offsets = [0]
    for line in lines[:-1]:
        offsets.append(offsets[-1] + len(line))
    assert table.column("id").to_pylist() == [f"part.jsonl@{o}" for o in offsets]
    assert table.column("source").to_pylist() == ["part.jsonl"] * 50


def test_parquet_kin_with_mapping(shared_data):
    path = shared_data / "ko_naverkin_certifiedjoon" / "dataset.parquet"
    expected = pq.read_table(path)
    spec = CrawlInput(paths=[str(path)], columns={"text": "Instruction", "source": "Source", "url": "MetaData",
                                                  "body": "Response"})
    table = read_local(spec)
    assert table.num_rows == expected.num_rows == 1720
    assert table.column("text").to_pylist() == expected.column("Instruction").to_pylist()
    assert table.column("url").to_pylist() == expected.column("MetaData").to_pylist()
    assert table.column("id").to_pylist() == [f"dataset.parquet#{i}" for i in range(1720)]
    # one task per row group when the block is small: same rows, same ids
    small = spec.model_copy(update={"block_bytes": 1})
    assert len(CrawlSource(small).tasks) == pq.ParquetFile(path).metadata.num_row_groups == 18
    assert read_local(small).equals(table)


def test_parquet_wrong_mapping_names_the_available_columns(shared_data):
    path = shared_data / "ko_naverkin_certifiedjoon" / "dataset.parquet"
    with pytest.raises(ColumnMappingError) as err:
        CrawlSource(CrawlInput(paths=[str(path)], columns={"text": "question"}))
    message = str(err.value)
    assert "'question'" in message and "text='question'" in message
    for column in ("Instruction", "Response", "Source", "MetaData"):
        assert column in message


def test_parquet_non_string_columns_become_strings(tmp_path):
    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"qid": pa.array([7, 8, 9], pa.int64()), "q": ["냉장고 온도는 몇 도가 좋나요?", None, "x"]}),
                   path)
    table = read_local(CrawlInput(paths=[str(path)], columns={"id": "qid", "text": "q"}))
    assert table.column("id").to_pylist() == ["7", "8", "9"]
    assert table.column("drop_reason").to_pylist() == [None, "null_text", None]


def test_csv_chatbot_matches_the_csv_module(shared_data):
    path = shared_data / "ko_chatbot_songys" / "ChatbotData.csv"
    with open(path, encoding="utf-8", newline="") as f:
        records = list(csv.DictReader(f))
    table = read_local(CrawlInput(paths=[str(path)], columns={"text": "Q", "body": "A"}))
    assert table.num_rows == len(records) == 11823
    assert table.column("text").to_pylist() == [r["Q"] for r in records]
    assert table.column("body").to_pylist() == [r["A"] for r in records]
    assert table.column("drop_reason").null_count == table.num_rows
    assert pc.count_distinct(table.column("id")).as_py() == table.num_rows


def test_csv_wrong_mapping_names_the_header(shared_data):
    path = shared_data / "ko_chatbot_songys" / "ChatbotData.csv"
    with pytest.raises(ColumnMappingError, match=r"columns available: \['Q', 'A', 'label'\]"):
        CrawlSource(CrawlInput(paths=[str(path)], columns={"text": "question"}))


def test_tsv_and_quoted_newlines(tmp_path):
    path = tmp_path / "crawl.tsv"
    path.write_text('id\ttext\n1\t김치는 어디에 보관하나요?\n2\t"여러 줄\n질문"\n', encoding="utf-8")
    table = read_local(CrawlInput(paths=[str(path)], columns={"id": "id", "text": "text"}))
    assert table.column("text").to_pylist() == ["김치는 어디에 보관하나요?", "여러 줄\n질문"]


def test_format_is_chosen_by_extension_and_validated(tmp_path):
    assert detect_format(Path("a/b.JSONL"), "auto") == "jsonl"
    assert detect_format(Path("x.parquet"), "auto") == "parquet"
    assert detect_format(Path("x.tsv"), "auto") == "csv"
    assert detect_format(Path("x.txt"), "csv") == "csv"
    with pytest.raises(ValueError, match="set input.format"):
        detect_format(Path("notes.txt"), "auto")
    with pytest.raises(ValidationError, match="format"):
        CrawlInput(paths=["x"], format="xml")


def test_a_directory_of_mixed_formats(tmp_path, shared_data):
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:30]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = [json.loads(line) for line in lines[:20]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    with open(tmp_path / "c.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "text", "source", "url"])
        writer.writeheader()
        writer.writerows(rows[:10])
    table = read_local(CrawlInput(paths=[str(tmp_path)], columns={"text": "text", "source": "source"}))
    assert table.num_rows == 30 + 20 + 10
    assert table.column("drop_reason").null_count == 60
    assert pc.count_distinct(table.column("id")).as_py() == 60


@pytest.mark.ray
def test_ray_read_equals_the_local_read(ray_local, tmp_path, shared_data):
    """The Ray source (one task per range/row group/file, mixed formats) gives the same rows."""
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines[:300]) + b"{broken\n")
    kin = pq.read_table(shared_data / "ko_naverkin_certifiedjoon" / "dataset.parquet")
    pq.write_table(kin.rename_columns(["text", "body", "source", "url"]), tmp_path / "b.parquet", row_group_size=100)
    chat = shared_data / "ko_chatbot_songys" / "ChatbotData.csv"
    (tmp_path / "c.csv").write_text(chat.read_text(encoding="utf-8").replace("Q,A,label", "text,body,label", 1)[:20000],
                                    encoding="utf-8")
    spec = CrawlInput(paths=[str(tmp_path)], columns={"text": "text", "body": "body"}, block_bytes=20000)
    source = CrawlSource(spec)
    assert {t["format"] for t in source.tasks} == {"jsonl", "parquet", "csv"}
    local = read_local(spec)
    remote = pa.concat_tables(ray_local.get(source.read().to_arrow_refs())).cast(CRAWL_WITH_REASON)
    assert remote.num_rows == local.num_rows > 2000
    assert _by_id(remote).equals(_by_id(local))
