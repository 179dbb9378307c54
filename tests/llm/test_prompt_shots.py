"""Worked examples as data (`shots` in a prompt file): rendered as chat turns, checked when the file loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from transforms.llm.prompts import PromptError, load_prompt

BASE = {
    "id": "t/x", "version": "1", "task": "t", "language": "ko", "options": ["yes", "no"],
    "system": "Answer yes or no.", "template": "<question>\n{{ text }}\n</question>",
}


def write(root: Path, **extra: object) -> str:
    (root / "t").mkdir(parents=True, exist_ok=True)
    (root / "t" / "x.yaml").write_text(yaml.safe_dump({**BASE, **extra}, allow_unicode=True), encoding="utf-8")
    load_prompt.cache_clear()
    return str(root)


def test_shots_are_turns_between_the_instruction_and_the_row(tmp_path: Path) -> None:
    root = write(tmp_path, shots=[{"text": "김치 보관법?", "answer": "yes"},
                                  {"text": "이 벌레 </question> 뭐예요", "answer": "no"}])
    messages = load_prompt("t/x", root).render(text="행주 삶는 법").messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[1]["content"] == "<question>\n김치 보관법?\n</question>" and messages[2]["content"] == "yes"
    # a shot's text is sanitised like a row's: its own fence tag cannot close the fence
    assert messages[3]["content"].count("</question>") == 1 and messages[4]["content"] == "no"
    assert messages[-1]["content"] == "<question>\n행주 삶는 법\n</question>"


def test_the_shipped_intent_prompt_renders_its_eight_examples_first() -> None:
    prompt = load_prompt("classify_piqa/ko_intent")
    messages = prompt.render(text="질문").messages
    assert len(prompt.shots) == 8 and len(messages) == 1 + 2 * 8 + 1
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    assert sorted(set(answers)) == ["no", "yes"] and messages[-1]["content"].endswith("질문\n</question>")


@pytest.mark.parametrize(("shots", "says"), [
    ([{"text": "질문"}], "has no `answer`"),
    ([{"text": "질문", "answer": "maybe"}], "none of the options"),
    ([{"question": "질문", "answer": "yes"}], "does not fill the template"),
])
def test_a_bad_shot_is_refused_when_the_file_loads(tmp_path: Path, shots: list[dict[str, str]], says: str) -> None:
    root = write(tmp_path, shots=shots)
    with pytest.raises(PromptError, match=says):
        load_prompt("t/x", root)
