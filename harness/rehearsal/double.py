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
# PIndicQA's generated items, each about another thing (tests/pindic_double.py's items differ only in a number,
# and novelty rightly drops all but one of them): goal, answer, the word to change, its wrong replacement
PINDIC_ITEMS = [
    ("To keep freshly made chapatis soft and warm until the family sits down for dinner in winter,",
     "wrap the stack in a clean cotton cloth and keep it inside a closed steel box.", "cotton cloth", "wet newspaper"),
    ("To dry a heavy woollen blanket quickly after washing it at home during a cloudy week,",
     "hang it folded over two parallel ropes on the terrace where the wind blows through it.", "parallel ropes",
     "plastic sheets"),
    ("To keep ants away from a jar of jaggery on the kitchen shelf in the hot summer months,",
     "stand the jar in a shallow plate of water so the ants cannot climb across to it.", "plate of water",
     "heap of sugar"),
    ("To light a clay lamp for the evening prayer when the wick keeps going out in the breeze,",
     "place the lamp inside a glass chimney that shelters the flame from the wind.", "glass chimney",
     "paper cone"),
    ("To stop a freshly cut brinjal from turning brown before it goes into the curry at lunchtime,",
     "drop the cut pieces into a bowl of cold salted water until the oil is hot.", "salted water",
     "hot oil"),
    ("To carry a large pot of hot tea safely across a crowded courtyard during a family wedding,",
     "hold the pot by its handles with two folded thick cotton towels around them.", "thick cotton", "thin nylon"),
    ("To keep a bunch of coriander fresh for several days without a refrigerator in a warm flat,",
     "stand the stems in a glass of clean water like flowers in a shaded corner.", "glass of clean water",
     "dry sunny windowsill"),
    ("To loosen a rusted iron bolt on an old bicycle before a long ride to the weekly market,",
     "soak the bolt with a few drops of oil and wait before turning it with a spanner.", "drops of oil",
     "drops of water"),
]
PINDIC_WRONG = {"open paper bag near the stove", *(e[3] for e in PINDIC_ITEMS)}
VERDICT_LETTERS = ["A", "B", "C", "D", "E", "F"]
# J-PIQA's translations: each English word one everyday Japanese noun (the same word, the same noun), joined by と,
# ending in a predicate, so a minimal pair stays one (same particles, the changed words only) and every solution is
# the full sentence ja_constraints asks for (tests/recipe_doubles.py's Han characters end in no predicate)
_JA_NOUN_TEXT = ("水 鍋 塩 紙 布 箱 油 砂 石 木 火 氷 酢 糸 針 皿 瓶 缶 袋 棒 板 釘 鉛筆 鋏 包丁 洗剤 石鹸 手袋 靴 帽子 傘 鏡 "
                 "窓 扉 机 椅子 電池 電球 磁石 輪ゴム テープ ひも タオル スプーン フォーク コップ ボウル バケツ ほうき 新聞 雑誌 "
                 "封筒 切手 鍵 時計 財布 枕 毛布 布団 卵 牛乳 砂糖 小麦粉 米 茶 麺 豆 肉 魚 野菜 果物 熱湯 蝋燭 マッチ 炭 灰 泥 "
                 "粘土 筆 墨 糊 針金 金槌 ねじ 歯ブラシ 櫛 鋸 斧 縄 網 籠 樽 壺 桶 綿 絹 革 鉄 銅 ガラス ゴム 竹 藁 蜂蜜 醤油 味噌 "
                 "酒 豆腐 海苔 胡椒 生姜 大根 人参 玉ねぎ じゃがいも キャベツ 胡瓜 茄子 南瓜 林檎 蜜柑 葡萄 苺 桃 梨 柿 栗 胡桃 "
                 "レモン バナナ")
JA_NOUNS = _JA_NOUN_TEXT.split()
JA_END = "を使う。"
_WORD = re.compile(r"[A-Za-z0-9']+")


def ja(text: str) -> str:
    """English → Japanese nouns joined by と, ending in を使う。 (see JA_NOUNS)."""
    nouns = [JA_NOUNS[xxhash.xxh32_intdigest(w.lower().encode()) % len(JA_NOUNS)] for w in _WORD.findall(text or "")]
    return "と".join(nouns or ["水"]) + JA_END


def ja_variant(user: str) -> dict[str, object]:
    """J-PIQA's lexical variant: the first noun both solutions share replaced, in the goal too, by the first
    candidate's Japanese word (else 箸)."""
    goal = m.group(1).strip() if (m := re.search(r"目的: (.*)", user)) else ""
    sols = [x.strip() for x in re.findall(r"解答[12]: (.*)", user)] + ["", ""]
    new = m.group(1) if (m := re.search(r"→ (\S+)", user)) else "箸"
    words = [s.removesuffix(JA_END).split("と") for s in sols[:2]]
    shared = next((a for a, b in zip(*words, strict=False) if a == b and a != new), None)
    if shared is None:
        return {"goal": goal, "sol1": sols[0], "sol2": sols[1], "replacements": [], "changed": False}
    swap = [[new if w == shared else w for w in ws] for ws in words]
    return {"goal": "と".join(new if w == shared else w for w in goal.removesuffix(JA_END).split("と")) + JA_END
            if goal.endswith(JA_END) else goal.replace(shared, new),
            "sol1": "と".join(swap[0]) + JA_END, "sol2": "と".join(swap[1]) + JA_END,
            "replacements": [f"{shared}→{new}"], "changed": True}


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
            if target == "Japanese":
                return ja(m.group(1) if (m := re.search(r"<text>\s*(.*?)\s*</text>", user, re.S)) else user)
            return self._recipes.chat([conv], params)[0]
        if "編集者" in system and "候補" in user:  # J-PIQA's lexical variant
            return json.dumps(ja_variant(user), ensure_ascii=False)
        if "You write items for a benchmark" in system:  # PIndicQA's generation: distinct items, by request
            n = int(m.group(1)) if (m := re.search(r"Write (\d+) new items", user)) else 1
            start = xxhash.xxh32_intdigest(f"{user}|{params.seed}".encode())
            items = [dict(zip(("goal", "answer", "word", "wrong_word"), PINDIC_ITEMS[(start + k) % len(PINDIC_ITEMS)],
                              strict=True)) for k in range(min(n, len(PINDIC_ITEMS)))]
            return json.dumps({"items": items})
        pindic_cues = ("four kinds of short labels", "candidate names", "You classify everyday")
        if any(cue in system for cue in pindic_cues) or re.search(r"careful \w+ editor", system):
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
