"""Source documents: txt/md with front matter, JSONL with metadata, chunking by headings and
paragraphs under a size bound, bad records as dropped rows, and the bundled Russian documents."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from transforms.io.documents import DocumentSource, chunk_text, front_matter, sections, split_long

SAMPLES = Path(__file__).resolve().parents[2] / "lake" / "samples"

LESSON = """---
title: Тепло вокруг нас
subject: окружающий мир
grade: 3
licence: CC BY 4.0
---
# Тепло
Тепло переходит от горячих тел к холодным. Поэтому чай в кружке остывает.

## Теплопроводность
Металлическая ложка в горячем чае быстро нагревается: металл хорошо проводит тепло.
Деревянная ложка нагревается медленно.

Шерстяные варежки плохо проводят тепло, поэтому в них рукам тепло.

## Испарение
Мокрое бельё сохнет быстрее на ветру.
"""


def test_sections_follow_the_heading_path():
    _, body = front_matter(LESSON)
    found = sections(body)
    assert [h for h, _ in found] == ["Тепло", "Тепло › Теплопроводность", "Тепло › Испарение"]
    assert len(found[1][1]) == 2  # two paragraphs; the lines of the first one are joined
    assert found[1][1][0].startswith("Металлическая ложка") and "Деревянная ложка" in found[1][1][0]


def test_chunks_never_cross_a_heading_and_respect_the_size_bound():
    _, body = front_matter(LESSON)
    chunks = chunk_text(body, max_chars=120, min_chars=10)
    assert all(len(c) <= 120 for _, c in chunks)
    assert [h for h, _ in chunks] == ["Тепло", "Тепло › Теплопроводность", "Тепло › Теплопроводность",
                                      "Тепло › Испарение"]
    big = chunk_text(body, max_chars=2000, min_chars=10)
    assert [h for h, _ in big] == ["Тепло", "Тепло › Теплопроводность", "Тепло › Испарение"]
    with pytest.raises(ValueError, match="min_chars"):
        chunk_text(body, max_chars=100, min_chars=200)


def test_long_paragraphs_are_cut_at_sentences_then_spaces():
    text = "Первое предложение довольно длинное. Второе тоже. " + "слово " * 60
    pieces = split_long(text.strip(), 80)
    assert pieces[0] == "Первое предложение довольно длинное."
    assert all(len(p) <= 80 for p in pieces) and " ".join(pieces).split() == text.split()


def test_small_chunks_merge_into_the_previous_one():
    text = "А" * 300 + "\n\n" + "Б" * 50
    assert len(chunk_text(text, max_chars=400, min_chars=100)) == 1
    assert len(chunk_text(text, max_chars=400, min_chars=10)) == 1  # packing already joins them
    assert len(chunk_text(text, max_chars=320, min_chars=100)) == 2  # they do not fit together


def test_folder_and_jsonl_sources_with_metadata_defaults_and_bad_records(tmp_path):
    (tmp_path / "lesson.md").write_text(LESSON, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("Лёд тает в тепле.\n\nВода замерзает на морозе.", encoding="utf-8")
    records = [
        {"id": "d1", "title": "Магниты", "subject": "физика", "level": "5", "license": "CC0", "text": "Магнит "
         "притягивает железо.\n\nМедь к магниту не притягивается."},
        {"id": "d2", "title": "Без лицензии", "text": "Текст без лицензии."},
        {"id": "d3", "title": "Пустой", "licence": "CC0", "text": "   "},
    ]
    lines = [json.dumps(r, ensure_ascii=False) for r in records] + ["{not json"]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = DocumentSource(paths=[str(tmp_path)], max_chars=500, min_chars=0, grade="не указан")
    table = source.rows()
    rows = table.to_pylist()
    reasons = Counter(r["drop_reason"] for r in rows)
    assert reasons == {None: 4, "no_licence": 2, "empty_document": 1, "bad_json": 1}  # notes.txt has no licence
    d1 = [r for r in rows if r["doc_id"] == "d1"]
    assert len(d1) == 1 and d1[0]["grade"] == "5" and d1[0]["licence"] == "CC0" and d1[0]["id"] == "d1#000"
    lesson = [r for r in rows if r["doc_id"] == "lesson"]
    assert [r["heading"] for r in lesson] == ["Тепло", "Тепло › Теплопроводность", "Тепло › Испарение"]
    assert {r["grade"] for r in lesson} == {"3"} and lesson[0]["title"] == "Тепло вокруг нас"
    assert all(r["n_chunks"] == 3 for r in lesson)
    licensed = DocumentSource(paths=[str(tmp_path / "notes.txt")], licence="CC0").rows().to_pylist()
    assert [r["drop_reason"] for r in licensed] == [None] and licensed[0]["title"] == "notes"
    assert len(source.fingerprints()) == 3
    with pytest.raises(FileNotFoundError):
        DocumentSource(paths=[str(tmp_path / "missing")]).rows()


def test_bundled_russian_documents():
    source = DocumentSource(paths=[str(SAMPLES / "ru_documents.jsonl")])
    table = source.rows()
    kinds = Counter(table.column("kind").to_pylist())
    assert table.column("drop_reason").null_count == table.num_rows  # every bundled document is usable
    assert kinds["document"] > 150 and kinds["topic_seeds"] > 20
    assert max(len(t) for t in table.column("text").to_pylist()) <= 1500
    docs = DocumentSource(paths=[str(SAMPLES / "ru_documents.jsonl")], kinds=["document"]).rows()
    assert set(docs.column("licence").to_pylist()) == {"CC BY-SA 4.0"}
    assert len(set(docs.column("doc_id").to_pylist())) == 48  # XQuAD's 48 articles
    assert "Паровая машина" in set(docs.column("title").to_pylist())
