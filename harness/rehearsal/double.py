"""The CI tier's engine double: every model role of every recipe answered by fixed rules, well-formed, so each
recipe's back half gets rows and the rehearsal checks where every stage ran (placement, not content, is under
test; the full rehearsal runs vLLM). Selected by config, as any engine class outside the registry is:

    backend: "harness.rehearsal.double:RehearsalDouble"     # transforms/llm/base.py build_engine

imported on the worker that builds the engine (the job's working dir is the repo, so `harness` and `tests` import
there). The served roles get the same double behind an OpenAI-compatible server (harness/rehearsal/double_server.py).

The rules are the default tier's recipe doubles (tests/recipe_doubles.py for zh-, j- and ru-piqa,
tests/pindic_double.py for PIndicQA) plus Ko-PIQA's refinement and Tamil PIQA's safety screen; the annotators are
an oracle that knows which solution is correct (the known correct translations, or the solution without the
double's wrong word).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import xxhash

from tests.pindic_double import ScriptedEngine
from tests.recipe_doubles import JA_WRONG, RU_WRONG, RecipeDouble, zh
from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine

REPO = Path(__file__).resolve().parents[2]
# Ko-PIQA's refinement (prompt ko_piqa/refine v2): goal, correct answer, the word to change, its wrong replacement
KO_EDITS = [
    ("냄비에 눌어붙은 밥을 떼어 내려면", "냄비에 물을 붓고 잠시 불린 뒤 나무 주걱으로 긁는다.", "물을", "모래를"),
    ("겨울에 얼어붙은 자동차 유리를 녹이려면", "미지근한 물을 천천히 부어 녹인다.", "미지근한", "끓는"),
    ("새 운동화에서 나는 고무 냄새를 줄이려면", "운동화 안에 숯을 넣고 바람이 잘 통하는 곳에 둔다.", "숯을", "젖은 수건을"),
    ("흰 셔츠에 묻은 김치 국물을 지우려면", "얼룩에 주방 세제를 묻혀 찬물로 비벼 빤다.", "찬물로", "간장으로"),
    ("헐거워진 의자 다리를 고정하려면", "나사를 드라이버로 다시 단단히 조인다.", "드라이버로", "숟가락으로"),
    ("장마철에 옷장 속 습기를 없애려면", "옷장 구석에 제습제를 놓아 둔다.", "제습제를", "물그릇을"),
]
KO_WRONG = {e[3] for e in KO_EDITS}
# PIndicQA's generated items (tests/pindic_double.py): the wrong solution carries this phrase
PINDIC_WRONG = {"open paper bag near the stove"}
VERDICT_LETTERS = ["A", "B", "C", "D", "E", "F"]


@lru_cache(maxsize=1)
def correct_translations() -> frozenset[str]:
    """The double's translations of the correct solutions of the PIQA minimal pairs zh- and j-piqa draw."""
    rows = [json.loads(line) for line in (REPO / "lake" / "samples" / "piqa_valid_minimal_pairs.jsonl")
            .read_text(encoding="utf-8").splitlines() if line.strip()]
    return frozenset(zh(r["sol1"] if r["label"] == 0 else r["sol2"]) for r in rows)


def solution_ok(solution: str) -> bool | None:
    """True / False where the double knows (its own wrong words, its known translations), else None."""
    text = solution.strip()
    if any(w in text for w in RU_WRONG | JA_WRONG | KO_WRONG | PINDIC_WRONG):
        return False
    if text in correct_translations():
        return True
    return None


class RehearsalDouble(LLMEngine):
    """Built as `RehearsalDouble(config)` by build_engine, like every engine class."""

    def __init__(self, config: EngineConfig):
        super().__init__(config)
        self._recipes = RecipeDouble(set(correct_translations()))
        self._pindic = ScriptedEngine(config)

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        return [self._reply(conv, params) for conv in conversations]

    def _reply(self, conv: list[ChatMessage], params: GenerationParams) -> str:
        system = conv[0]["content"] if conv and conv[0].get("role") == "system" else ""
        user = conv[-1]["content"] if conv else ""
        if "careful translator" in system:
            target = m.group(1) if (m := re.search(r"into (\w+)\.", system)) else ""
            if target in ("Hindi", "Bangla", "Tamil", "Kannada", "Malayalam"):
                return self._pindic.chat([conv], params)[0]
            return self._recipes.chat([conv], params)[0]
        if any(cue in system for cue in ("four kinds of short labels", "candidate names", "You classify everyday",
                                         "You write items for a benchmark")) or re.search(r"careful \w+ editor", system):
            return self._pindic.chat([conv], params)[0]
        if "물리적 상식 문항을 만드는 편집자" in system:  # Ko-PIQA's refinement: one item per question
            goal, answer, word, wrong = KO_EDITS[xxhash.xxh32_intdigest(user.encode()) % len(KO_EDITS)]
            return json.dumps({"goal": goal, "answer": answer, "word": word, "wrong_word": wrong},
                              ensure_ascii=False)
        if "You screen items of a physical-commonsense benchmark" in system:  # Tamil PIQA's safety screen
            return json.dumps({"flag": False, "category": "none", "evidence": ""})
        reply = self._recipes.chat([conv], params)[0]
        if not reply and params.choices:
            return params.choices[0]
        return reply

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        """Review letters from the oracle (A: solution 1 is right, B: solution 2, C: neither known); any other
        question (a yes/no classifier) gets its first option."""
        out = []
        for prompt in prompts:
            s1 = re.search(r"Solution 1: (.*)", prompt)
            s2 = re.search(r"Solution 2: (.*)", prompt)
            if s1 and s2 and list(options[:3]) == VERDICT_LETTERS[:3]:
                first, second = solution_ok(s1.group(1)), solution_ok(s2.group(1))
                if (first is True and second is not True) or (first is None and second is False):
                    pick = 0
                elif (second is True and first is not True) or (second is None and first is False):
                    pick = 1
                else:
                    pick = 2
            else:
                pick = 0
            out.append([0.0 if i == pick else -9.0 for i in range(len(options))])
        return out

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        return self._recipes.loglikelihood(requests)

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        return "\n\n".join(m["content"] for m in conversation)
