"""The JSONL reader's Arrow path gives exactly the rows of the line-by-line path, bad lines included.

`read_jsonl_range` parses a chunk of lines with Arrow's JSON reader only when every line in it is plainly
clean; otherwise the lines go through `_parse_line` one by one. These tests mix real crawl lines with every
kind of bad or odd line the reader knows, at random places, and compare both paths row for row.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from transforms.io import jsonl
from transforms.io.common import ColumnMapping
from transforms.io.jsonl import _fast_table, read_jsonl_range

SAMPLE = Path(__file__).resolve().parents[2] / "lake" / "samples" / "ko_crawl_sample.jsonl"
MAX_BYTES = 2_000

# each needs the line-by-line path, and each must come out as the line-by-line path says
ODD_LINES = {
    "blank": b"\n",
    "spaces": b"   \n",
    "bom": b'\xef\xbb\xbf{"id": "bom", "text": "BOM \xec\x95\x9e"}\n',
    "array": b"[1, 2]\n",
    "number_text": b'{"id": "n", "text": 42}\n',
    "bool_text": b'{"id": "b", "text": true}\n',
    "object_text": b'{"id": "o", "text": {"a": 1}}\n',
    "list_text": b'{"id": "l", "text": ["a"]}\n',
    "missing_text": b'{"id": "m", "title": "no text"}\n',
    "null_text": b'{"id": "z", "text": null}\n',
    "bad_utf8_text": b'{"id": "u", "text": "\xff\xfe"}\n',
    "bad_utf8_unmapped": b'{"id": "v", "text": "fine", "extra": "\xc3\x28"}\n',
    "two_objects": b'{"id": "t1", "text": "one"} {"id": "t2", "text": "two"}\n',
    "trailing_comma": b'{"id": "c", "text": "a",}\n',
    "cr_separated": b'{"id": "r1", "text": "a"}\r{"id": "r2", "text": "b"}\n',
    "repeated_key": b'{"id": "k", "text": "first", "text": "second"}\n',
    "number_id": b'{"id": 7, "text": "numeric id"}\n',
    "deep": b'{"id": "d", "text": "deep", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n",
    "oversized": b'{"id": "big", "text": "' + "가".encode() * 1000 + b'"}\n',
    "leading_space": b' {"id": "s", "text": "indented"}\n',
}
# clean lines the Arrow path must take as they are
CLEAN_EXTRA = [
    b'{"id": "crlf", "text": "windows line"}\r\n',
    b'{"id": "esc", "text": "tab\\there \\u00e9 \\ud83d\\ude00 \\"quoted\\""}\n',
    b'{"id": "nan", "text": "unmapped NaN", "score": NaN, "nested": {"a": [1, {"b": null}]}}\n',
]


def _sample_lines() -> list[bytes]:
    return SAMPLE.read_bytes().splitlines(keepends=True)


def _read(path: Path, fast: bool, mapping: ColumnMapping, block: int | None = None) -> pa.Table:
    size = path.stat().st_size
    block = block or size
    tables = [t for s in range(0, size, block)
              for t in read_jsonl_range({"path": str(path), "start": s, "end": min(s + block, size)}, mapping,
                                        MAX_BYTES, fast=fast)]
    table = pa.concat_tables(tables)
    return table.sort_by("id")


def _mixed_file(tmp_path: Path, seed: int, odd: list[bytes]) -> Path:
    rng = random.Random(seed)
    lines = _sample_lines()[:1500] + CLEAN_EXTRA
    for line in odd:
        lines.insert(rng.randrange(len(lines) + 1), line)
    path = tmp_path / f"mixed-{seed}.jsonl"
    path.write_bytes(b"".join(lines).rstrip(b"\n") if seed % 2 else b"".join(lines))  # with and without a last newline
    return path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_both_paths_give_the_same_rows_on_a_crawl_with_every_odd_line(tmp_path, monkeypatch, seed):
    monkeypatch.setattr(jsonl, "ROWS_PER_TABLE", 97)  # many chunks: most clean, some with an odd line
    path = _mixed_file(tmp_path, seed, list(ODD_LINES.values()))
    for mapping in (ColumnMapping(text="text"), ColumnMapping(id="id", text="text", title="title")):
        fast, slow = _read(path, True, mapping), _read(path, False, mapping)
        assert fast.schema == slow.schema
        assert fast.to_pylist() == slow.to_pylist()
        data = path.read_bytes()
        assert fast.num_rows == data.count(b"\n") + (not data.endswith(b"\n"))  # every line is a row
        # and ranges that cut through lines give the same rows again
        assert _read(path, True, mapping, block=4096).to_pylist() == slow.to_pylist()
    reasons = {r for r in slow.column("drop_reason").to_pylist() if r}
    assert {"blank_line", "malformed_json", "invalid_utf8", "missing_text", "null_text", "invalid_text_type",
            "oversized_record"} <= reasons


def _chunk(lines: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    buf = b"".join(lines)
    ends = np.cumsum([len(x) for x in lines])
    return buf, np.concatenate([[0], ends[:-1]]), ends


def test_the_arrow_path_takes_clean_chunks_and_refuses_every_odd_line():
    mapping = ColumnMapping(id="id", text="text")
    clean = _sample_lines()[:200] + CLEAN_EXTRA
    table = _fast_table(*_chunk(clean), 1000, "f.jsonl", mapping, MAX_BYTES)
    assert table is not None and table.num_rows == len(clean)
    assert table.column("id").to_pylist()[0] == json.loads(clean[0])["id"]
    unmapped_ids = _fast_table(*_chunk(clean), 1000, "f.jsonl", ColumnMapping(text="text"), MAX_BYTES)
    assert unmapped_ids is not None
    assert unmapped_ids.column("id").to_pylist()[:2] == ["f.jsonl@1000", f"f.jsonl@{1000 + len(clean[0])}"]
    for kind, line in ODD_LINES.items():
        assert _fast_table(*_chunk([*clean[:50], line, *clean[50:]]), 0, "f.jsonl", mapping, MAX_BYTES) is None, kind
