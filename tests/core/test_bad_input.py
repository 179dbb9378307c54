"""Bad input: every bad record becomes a rejected row with a reason; what cannot be read at all
fails with one clear message. Checked at the reader and through `piqaforge run ko-piqa`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.core.lake import read_table
from transforms.io.crawl import (
    ColumnMappingError,
    CrawlInput,
    CrawlSource,
    EmptyInputError,
    InputFormatError,
    read_local,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
COLUMNS = {"id": "id", "text": "text", "source": "source", "url": "url"}


def write_bad_jsonl(path: Path, good: int = 40) -> dict[str, str | None]:
    """Real sample lines with one of each kind of bad line mixed in; returns id → expected reason."""
    lines = SAMPLE.read_bytes().splitlines(keepends=True)[:good]
    real = json.loads(lines[3])
    bad = [
        (b'{"id": "broken-1", "text": "\xeb\x83\x89\xec\x9e\xa5\xea\xb3\xa0 \n', "malformed_json"),  # cut short
        (b'{"id": "latin1", "text": "caf\xe9 \xbf\xbf"}\n', "invalid_utf8"),
        (json.dumps({"id": "no-text", "question": real["text"]}, ensure_ascii=False).encode() + b"\n", "missing_text"),
        (json.dumps({"id": "null-text", "text": None}).encode() + b"\n", "null_text"),
        (json.dumps({"id": "list-text", "text": ["a", "b"]}).encode() + b"\n", "invalid_text_type"),
        (json.dumps({"id": "huge", "text": real["text"] * (1_100_000 // len(real["text"].encode()) + 1)},
                    ensure_ascii=False).encode() + b"\n", "oversized_record"),
        (b"\n", "blank_line"),
        (b"[1, 2, 3]\n", "malformed_json"),
    ]
    out, expected, offset = [], {}, 0
    for i, line in enumerate(lines):
        out.append(line)
        expected[json.loads(line)["id"]] = None
        offset += len(line)
        if i % 5 == 2 and bad:
            raw, reason = bad.pop(0)
            out.append(raw)
            expected[_record_id(raw) or f"{path.name}@{offset}"] = reason
            offset += len(raw)
    assert not bad
    path.write_bytes(b"".join(out))
    return expected


def _record_id(raw: bytes) -> str | None:
    """The mapped id when the line is a JSON object with one (then it is not a parse failure)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record.get("id") if isinstance(record, dict) and len(raw) < 1 << 20 else None


# -- reader level ------------------------------------------------------------------------------
def test_each_bad_jsonl_line_is_a_rejected_row_with_its_reason(tmp_path):
    path = tmp_path / "crawl.jsonl"
    expected = write_bad_jsonl(path)
    for block in (1 << 20, 3000):  # also when ranges cut through the bad lines
        table = read_local(CrawlInput(paths=[str(path)], columns=COLUMNS, block_bytes=block))
        assert table.num_rows == len(path.read_bytes().splitlines()) == 48
        got = dict(zip(table.column("id").to_pylist(), table.column("drop_reason").to_pylist(), strict=True))
        assert got == expected
    details = dict(zip(table.column("drop_reason").to_pylist(), table.column("drop_detail").to_pylist(),
                       strict=True))
    assert "bytes > max_record_bytes=1048576" in details["oversized_record"]
    assert "utf-8" in details["invalid_utf8"]


def test_a_1mb_row_is_read_when_the_limit_allows_it(tmp_path):
    path = tmp_path / "crawl.jsonl"
    write_bad_jsonl(path)
    table = read_local(CrawlInput(paths=[str(path)], columns=COLUMNS, max_record_bytes=4 << 20))
    huge = table.filter(pa.compute.equal(table.column("id"), "huge"))
    assert huge.column("drop_reason").to_pylist() == [None]
    assert len(huge.column("text")[0].as_py().encode()) > 1_000_000


def test_bad_csv_rows_are_rejected_with_reasons(tmp_path):
    path = tmp_path / "crawl.csv"
    path.write_bytes(
        "id,text\n1,냉장고에 김치를 오래 두려면?\n".encode()
        + b"2,too,many,fields\n"
        + b"3,caf\xe9 latte\n"
        + "4,\"따옴표 안의, 쉼표\"\n5\n6,\n".encode())
    table = read_local(CrawlInput(paths=[str(path)], columns={"text": "text"}))
    reasons = dict(zip(table.column("id").to_pylist(), table.column("drop_reason").to_pylist(), strict=True))
    assert reasons == {"crawl.csv#0": None, "crawl.csv#1": "invalid_utf8", "crawl.csv#2": None,
                       "crawl.csv#3": None, "crawl.csv:line3": "malformed_csv_row",
                       "crawl.csv:line6": "malformed_csv_row"}
    assert table.filter(pa.compute.equal(table.column("id"), "crawl.csv#3")).column("text").to_pylist() == [""]


def test_parquet_null_text_is_rejected(tmp_path):
    path = tmp_path / "crawl.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["밥솥 청소는 어떻게 하나요?", None]}), path)
    table = read_local(CrawlInput(paths=[str(path)], columns={"id": "id", "text": "text"}))
    assert table.column("drop_reason").to_pylist() == [None, "null_text"]


def test_parquet_invalid_utf8_is_rejected_not_passed_on(tmp_path):
    # Arrow does not validate Parquet strings on read; an unchecked row would crash a later stage.
    path = tmp_path / "crawl.parquet"
    text = pa.array(["전자레인지에 달걀을 넣어도 되나요?".encode(), b"caf\xe9"]).view(pa.string())
    pq.write_table(pa.table({"id": ["a", "b"], "text": text}), path)
    table = read_local(CrawlInput(paths=[str(path)], columns={"id": "id", "text": "text"}))
    assert table.column("drop_reason").to_pylist() == [None, "invalid_utf8"]
    assert table.column("text").to_pylist() == ["전자레인지에 달걀을 넣어도 되나요?", None]
    table.validate(full=True)


def test_jsonl_wrong_mapping_names_the_fields_seen():
    with pytest.raises(ColumnMappingError) as err:
        CrawlSource(CrawlInput(paths=[str(SAMPLE)], columns={"text": "question"}))
    assert "fields seen: ['id', 'source', 'text', 'url']" in str(err.value)


def test_empty_file_alone_is_an_error_and_beside_others_is_skipped(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    with pytest.raises(EmptyInputError, match="every input file is empty"):
        CrawlSource(CrawlInput(paths=[str(empty)]))
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:7]))
    assert read_local(CrawlInput(paths=[str(empty), str(good)], columns=COLUMNS)).num_rows == 7


def test_a_header_only_csv_reads_no_rows_and_a_wrong_header_fails(tmp_path):
    path = tmp_path / "crawl.csv"
    path.write_text("id,text\n", encoding="utf-8")
    assert read_local(CrawlInput(paths=[str(path)], columns={"id": "id", "text": "text"})).num_rows == 0
    with pytest.raises(ColumnMappingError, match=r"columns available: \['id', 'text'\]"):
        CrawlSource(CrawlInput(paths=[str(path)], columns={"text": "question"}))


def test_a_file_of_garbage_gives_rejected_rows_not_a_mapping_error(tmp_path):
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(b"not json\n\xff\xfe\n{oops\n")
    table = read_local(CrawlInput(paths=[str(path)]))
    assert table.column("drop_reason").to_pylist() == ["malformed_json", "invalid_utf8", "malformed_json"]


def test_a_whole_json_document_is_named_as_such(tmp_path):
    path = tmp_path / "crawl.json"
    path.write_text('[\n  {"id": "1", "text": "냄비 바닥이 탔을 때 어떻게 닦나요?"},\n  {"id": "2", "text": "x"}\n]\n',
                    encoding="utf-8")
    with pytest.raises(InputFormatError, match="looks like one JSON array"):
        CrawlSource(CrawlInput(paths=[str(path)]))


def test_missing_input_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="input not found"):
        CrawlSource(CrawlInput(paths=[str(tmp_path / "nope.jsonl")]))


# -- through the command line ------------------------------------------------------------------
def piqaforge(tmp_path: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIQAFORGE_PROGRESS": "0", "PIQAFORGE_OBJECT_STORE_BYTES": str(2**30)}
    cmd = [sys.executable, "-m", "jobs.cli", "run", "ko-piqa", "--lake", str(tmp_path / "lake"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def assert_clear_failure(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("piqaforge: error:")]
    assert error, proc.stderr[-3000:]
    for needle in needles:
        assert needle in proc.stderr


def test_cli_wrong_mapping(tmp_path):
    proc = piqaforge(tmp_path, "--set", "input.columns.text=question")
    assert_clear_failure(proc, "'question'", "fields seen: ['id', 'source', 'text', 'url']")
    assert proc.returncode == 2  # refused while the recipe is checked, before anything runs


def test_cli_wrong_parquet_mapping(tmp_path, shared_data):
    proc = piqaforge(tmp_path, "--input", str(shared_data / "ko_naverkin_certifiedjoon" / "dataset.parquet"))
    assert_clear_failure(proc, "columns available: ['Instruction', 'Response', 'Source', 'MetaData']")


def test_cli_empty_file_and_missing_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert_clear_failure(piqaforge(tmp_path, "--input", str(empty)), "every input file is empty")
    assert_clear_failure(piqaforge(tmp_path, "--input", str(tmp_path / "nope.jsonl")), "input not found")


@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_cli_too_few_cpus_for_an_actor_stage_fails_instead_of_hanging(tmp_path):
    """With one CPU, langid's actor would hold it and the reads feeding the actor would wait forever."""
    proc = piqaforge(tmp_path, "--run-id", "one-cpu", "--set", "num_cpus=1", "--set", "ensemble=null", timeout=300)
    assert_clear_failure(proc, "stage 'langid'", "cannot run", "--set num_cpus=N")
    manifest = json.loads((tmp_path / "lake" / "runs" / "one-cpu-crawl" / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    # normalize and length_filter run in one pass with langid (transforms/core/fusion.py): none of them ran
    assert [s["name"] for s in manifest["stages"]] == ["read_crawl"]


def test_cli_invalid_format_is_a_config_error(tmp_path):
    proc = piqaforge(tmp_path, "--set", "input.format=xml")
    assert_clear_failure(proc, "runs.crawl.source.spec.format", "xml")
    assert proc.returncode == 2


@pytest.mark.slow
def test_cli_bad_rows_keep_the_job_going_and_land_in_rejected(tmp_path):
    """The whole job in a subprocess with its own Ray: 1-2.5 min here (`pytest -m slow tests/core/test_bad_input.py`)."""
    path = tmp_path / "crawl.jsonl"
    expected = write_bad_jsonl(path)
    # ensemble=null: the front half only, the LLM back half has its own tests
    proc = piqaforge(tmp_path, "--input", str(path), "--run-id", "bad", "--set", "num_cpus=2",
                     "--set", "ensemble=null")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lake = tmp_path / "lake"
    manifest = json.loads((lake / "runs" / "bad-crawl" / "manifest.json").read_text())
    read = manifest["stages"][0]
    bad_reasons = [r for r in expected.values() if r]
    assert read["rows_in"] == 0 and read["rows_created"] == len(expected) == 48
    assert read["rows_dropped"] == {r: bad_reasons.count(r) for r in set(bad_reasons)}
    rejected = read_table(lake / "rejected" / "ko-piqa" / "bad-crawl")
    curated = read_table(lake / "curated" / "ko-piqa" / "bad-crawl")
    assert rejected.num_rows + curated.num_rows == 48  # nothing silently lost
    by_id = dict(zip(rejected.column("id").to_pylist(), rejected.column("drop_reason").to_pylist(), strict=True))
    for rid, reason in expected.items():
        if reason:
            assert by_id[rid] == reason
    assert (lake / "runs" / "bad-crawl" / "report.html").exists()
    assert str(lake / "runs" / "bad-crawl" / "report.html") in proc.stdout


@pytest.mark.slow
def test_cli_input_with_no_usable_row_fails_clearly(tmp_path):
    """~60-90 s (starts Ray in a subprocess): `pytest -m slow tests/core/test_bad_input.py`."""
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(b"not json\n\xff\xfe\n{oops\n")
    proc = piqaforge(tmp_path, "--input", str(path), "--run-id", "garbage", "--set", "num_cpus=2",
                     "--set", "ensemble=null")
    assert_clear_failure(proc, "no usable rows in the input: all 3 records were rejected",
                         "invalid_utf8: 1, malformed_json: 2")
    assert (tmp_path / "lake" / "runs" / "garbage-crawl" / "report.html").exists()
