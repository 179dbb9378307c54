"""Russian PIQA prompts: they load, render a bundled document chunk, and the evaluation prompt's
parser takes 0/1 and nothing else (refusals are counted, not guessed)."""

from __future__ import annotations

from pathlib import Path

from transforms.io.documents import DocumentSource
from transforms.llm.prompts import load_prompt

SAMPLES = Path(__file__).resolve().parents[3] / "lake" / "samples"


def test_grounded_prompt_renders_a_bundled_chunk():
    table = DocumentSource(paths=[str(SAMPLES / "ru_documents.jsonl")], kinds=["document"]).rows()
    row = next(r for r in table.to_pylist() if r["title"] == "Паровая машина")
    rendered = load_prompt("ru_piqa/grounded_generation").render(
        n_items=5, title=row["title"], subject=row["subject"], grade=row["grade"], chunk=row["text"])
    assert rendered.ref == "ru_piqa/grounded_generation@1"
    system, user = rendered.messages[0]["content"], rendered.messages[1]["content"]
    assert "JSON" in system and "25 слов" in system
    assert "Составь 5 заданий" in user and "«Паровая машина»" in user and user.endswith("</document>")
    assert row["text"][:50] in user


def test_no_source_prompt_renders_a_topic_seed():
    table = DocumentSource(paths=[str(SAMPLES / "ru_documents.jsonl")], kinds=["topic_seeds"]).rows()
    seed = table.column("text")[0].as_py()
    rendered = load_prompt("ru_piqa/no_source").render(n_items=3, topic=seed)
    assert "<topic>" in rendered.messages[1]["content"] and "document" not in rendered.messages[1]["content"]


def test_eval_prompt_answers_strictly_zero_or_one():
    prompt = load_prompt("ru_piqa/eval")
    rendered = prompt.render(goal="Остудить чай.", sol1="Поставить кружку в холодную воду.",
                             sol2="Поставить кружку в горячую воду.")
    assert rendered.messages[0]["content"].rstrip().endswith("Не пиши ничего, кроме этой цифры.")
    assert "0) Поставить кружку в холодную воду." in rendered.messages[1]["content"]
    assert [prompt.parse(r) for r in ("0", "1", "Ответ: 1", " 0.", "Не могу ответить.", "", "2")] == \
        ["0", "1", "1", "0", None, None, None]
