"""Ko-PIQA refinement v2: the reply's checks (which the retry turn shows the model), the distractor built by
substitution with the particle after the new word made to agree, on real Korean sentences (KoCommonGEN v2's
correct sentences), and the one retry with the reason inside the refinement stage (row counts unchanged)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine
from transforms.llm.output import JsonOutput
from transforms.llm.transform import LLMTransform
from transforms.recipes.ko_piqa.items import (
    REFINE_PROMPT,
    KoreanPairFromEdit,
    fix_particle,
    refine_problem,
)

COMMONGEN = Path(__file__).parents[4] / "shared" / "data" / "ko_commongen_v2" / "korean_commongen_v2_847_shuffled.jsonl"


def _has_final_consonant(syllable: str) -> bool:
    """Independent of the code under test: NFD splits a Hangul syllable into jamo; a third jamo is the final."""
    return len(unicodedata.normalize("NFD", syllable)) == 3


def _gold_sentences() -> list[str]:
    rows = [json.loads(line) for line in COMMONGEN.read_text(encoding="utf-8").splitlines()]
    return [unicodedata.normalize("NFKC", r[str(r["gold"])]).strip() for r in rows]  # as the stage reads them


def test_substituted_nouns_take_the_particle_of_their_last_syllable_in_real_sentences():
    # a noun of 2+ Hangul syllables followed by 을/를/이/가/은/는 and a space, in KoCommonGEN's correct sentences
    pattern = re.compile(r"(?:^|\s)([가-힣]{2,})(을|를|이|가|은|는) ")
    cases = []
    for sentence in _gold_sentences():
        m = pattern.search(sentence)
        if m:
            cases.append((sentence, m.group(1), m.start(1)))
    assert len(cases) > 200
    checked = 0
    for sentence, noun, at in cases[:300]:
        # a replacement of the other kind: with a final consonant when the noun has none, and the reverse
        wrong = "식초" if _has_final_consonant(noun[-1]) else "소금"
        table = pa.table({C.ID: [f"s{checked}"], "goal": ["x"], "answer": [sentence], "word": [noun],
                          "wrong_word": [wrong]})
        out = KoreanPairFromEdit(examples_from=None)(table).to_pylist()[0]
        assert out[C.DROP_REASON] is None
        distractor = (out["sol1"], out["sol2"])[1 - out["label"]]
        assert (out["sol1"], out["sol2"])[out["label"]] == sentence
        particle = distractor[at + len(wrong)]
        expected = {"을": "을를", "를": "을를", "이": "이가", "가": "이가", "은": "은는", "는": "은는"}[
            sentence[at + len(noun)]][0 if _has_final_consonant(wrong[-1]) else 1]
        assert particle == expected, (sentence, distractor)
        assert distractor[:at] == sentence[:at] and distractor[at + len(wrong) + 1:] == sentence[at + len(noun) + 1:]
        checked += 1
    assert checked == 300


@pytest.mark.parametrize(("text", "pos", "expected"), [
    ("식초로 닦는다.", 2, "식초로 닦는다."),        # vowel: 로
    ("소금로 닦는다.", 2, "소금으로 닦는다."),       # final consonant: 으로
    ("물으로 닦는다.", 1, "물로 닦는다."),           # ㄹ takes 로
    ("식초이다.", 2, "식초이다."),                   # 이다 is not a particle ending its word: untouched
    ("잠가 둔다.", 2, "잠가 둔다."),                 # a verb: nothing to fix
])
def test_particle_agreement_cases(text, pos, expected):
    assert fix_particle(text, pos) == expected


def test_reply_checks_name_what_to_fix():
    goal = "운동화 속의 냄새를 없애려면"
    assert refine_problem(goal, "신발 안에 숯을 넣어 둔다.", "숯", "얼음") is None
    assert "answer 안에" in (refine_problem(goal, "신발 안에 숯을 넣어 둔다.", "녹차", "얼음") or "")
    assert "같습니다" in (refine_problem(goal, "신발 안에 숯을 넣어 둔다.", "숯", "숯") or "")
    assert "goal을 그대로" in (refine_problem(goal, goal + ".", "냄새", "향기") or "")
    # Qwen 1.5B's reply on KiN question kin-00265 (demo12a), which looped until the length bound
    looped = "아기새를 솜털로 " + "빠르게 " * 12
    assert "되풀이" in (refine_problem("아기새의 솜털을 말리려면", looped, "솜털", "깃털") or "")
    # a copy of the prompt's own example is refused
    example = json.loads(next(line.strip() for line in _prompt_lines() if line.strip().startswith("{")))
    assert "예시" in (refine_problem(example["goal"], example["answer"], example["word"], example["wrong_word"]) or "")
    # the same checks run when the reply is parsed, so an invalid reply is an AnswerError the stage retries
    with pytest.raises(Exception, match="answer 안에"):
        JsonOutput(model="transforms.recipes.ko_piqa.items:RefinedItem").parse(json.dumps(
            {"goal": goal, "answer": "신발 안에 숯을 넣어 둔다.", "word": "녹차", "wrong_word": "얼음"}, ensure_ascii=False))


def _prompt_lines() -> list[str]:
    from transforms.llm.prompts import load_prompt

    return load_prompt(REFINE_PROMPT).system.splitlines()


class FirstWrongThenFixed(LLMEngine):
    """An engine-interface double: a reply whose word is not in its answer, then a fixed one once the
    retry turn (the recipe's retry_message, with the reason) is in the conversation. Records what it was asked."""

    asked: list[list[ChatMessage]] = []

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        out = []
        for conv in conversations:
            FirstWrongThenFixed.asked.append(conv)
            word = "숯" if len(conv) > 2 else "녹차"
            out.append(json.dumps({"goal": "운동화 속의 냄새를 없애려면", "answer": "신발 안에 숯을 넣어 둔다.",
                                   "word": word, "wrong_word": "얼음"}, ensure_ascii=False))
        return out

    def option_logprobs(self, prompts, options):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def loglikelihood(self, requests):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def test_the_refinement_retries_once_with_the_reason_and_keeps_the_row():
    from transforms.flow.recipe import load_recipe
    from transforms.flow.runs.common import run_stages

    FirstWrongThenFixed.asked = []
    recipe = load_recipe("ko-piqa")  # the recipe's items run, as the orchestrator builds it
    _, (_, _guard, refine, pair, checks, degenerate) = run_stages(recipe, "items", lake="/nonexistent-lake", doubles={
        "llm_transform": FirstWrongThenFixed(EngineConfig(backend="transformers", model="double"))})
    retry_message = next(s for s in recipe.run("items").stages if s.stage == "llm_transform").fields["retry_message"]
    assert isinstance(refine, LLMTransform) and refine.retry_message == retry_message
    refine.cache_dir = None
    table = pa.table({C.ID: ["kin-1"], "text": ["운동화에서 냄새가 너무 나요 어떻게 없애나요?"]})
    out = degenerate(checks(pair(refine(table))))
    assert out.num_rows == 1 and out.column(C.DROP_REASON).to_pylist() == [None]
    assert len(FirstWrongThenFixed.asked) == 2
    retry_turn = FirstWrongThenFixed.asked[1][-1]["content"]
    assert retry_turn.startswith(retry_message.split("{")[0]) and "answer 안에" in retry_turn
    row = out.to_pylist()[0]
    assert (row["sol1"], row["sol2"])[1 - row["label"]] == "신발 안에 얼음을 넣어 둔다."
    assert row["_prompt"] == f"{REFINE_PROMPT}@2" and row["pair_word_distance"] == 1


def test_the_card_says_plainly_when_the_review_was_automatic():
    from transforms.release.card import card_markdown, item_stats

    base = {C.ID: ["a", "b"], "lang": ["ko", "ko"], "goal": ["운동화 냄새를 없애려면", "국물이 짤 때"],
            "sol1": ["숯을 넣어 둔다.", "물을 붓는다."], "sol2": ["얼음을 넣어 둔다.", "소금을 붓는다."],
            "label": [0, 1], "is_cultural": [False, True]}
    gate = {"success": True, "suite": "ko-piqa"}
    auto = item_stats(pa.table({**base, "review_automatic": [True, True], "review_batch": ["b1", "b1"]}))
    assert auto["review"] == {"automatic": 2, "people": 0, "batches": ["b1"]}
    assert "| review | **automatic**: LLM annotators, not people" in card_markdown(
        auto, title="t", recipe="ko-piqa", version="v", gate=gate)
    people = item_stats(pa.table({**base, "review_automatic": [False, False], "review_batch": ["b2", "b2"]}))
    assert "| review | by people (batch b2) |" in card_markdown(people, title="t", recipe="ko-piqa", version="v",
                                                             gate=gate)
    assert item_stats(pa.table(base))["review"] is None
