"""An engine double for whole recipes: translates English into made-up but well-formed Chinese
(each English word to one Han character, the same word to the same character, so a minimal pair stays
minimal) and reviews as an oracle annotator that knows which translated solutions are correct.

The content is the test's, not a model's: recipes are judged by their mechanics here (accounting,
resume, review, gates); the real engines' code is tested against their real APIs elsewhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import xxhash

from transforms.llm.base import ChatMessage, EngineConfig, GenerationParams, LLMEngine

_WORD = re.compile(r"[A-Za-z0-9']+")
# Russian items in the edit form (goal, correct answer, the word to change, its wrong replacement), written here
RU_EDITS = [
    ("Летом на даче нужно быстро охладить бутылку воды, а холодильника нет."
     " Рядом никого нет, магазины закрыты, а под рукой только то, что обычно лежит дома или в сарае.",
     "Опустите бутылку в ведро с холодной водой.", "холодной", "горячей"),
    ("Нужно открыть тугую металлическую крышку стеклянной банки."
     " Рядом никого нет, магазины закрыты, а под рукой только то, что обычно лежит дома или в сарае.",
     "Подержите крышку под горячей водой.", "горячей", "ледяной"),
    ("Зимой у ребёнка на прогулке замёрзли руки."
     " Рядом никого нет, магазины закрыты, а под рукой только то, что обычно лежит дома или в сарае.", "Наденьте ребёнку сухие варежки.", "сухие", "мокрые"),
    ("Нужно сохранить лёд в жаркий день подольше."
     " Рядом никого нет, магазины закрыты, а под рукой только то, что обычно лежит дома или в сарае.", "Заверните лёд в шерстяной плед.", "шерстяной", "мокрый"),
    ("Нужно забить гвоздь в деревянную доску."
     " Рядом никого нет, магазины закрыты, а под рукой только то, что обычно лежит дома или в сарае.", "Ударьте по шляпке гвоздя молотком.", "молотком", "губкой"),
    ("Нужно высушить мокрую обувь к утру."
     " Рядом никого нет, магазины закрыты, а под рукой только то, что обычно лежит дома или в сарае.", "Набейте обувь сухими газетами.", "сухими", "влажными"),
]
RU_WRONG = {e[3] for e in RU_EDITS}
# J-PIQA's direct items (question, answer, the word to change, its wrong replacement), written here
JA_EDITS = [
    ("麦茶を早く冷やしたい。", "やかんを氷水につける。", "氷水", "熱湯"),
    ("鍋の焦げを落としたい。", "重曹を入れて煮る。", "重曹", "砂糖"),
    ("床の油汚れを落としたい。", "洗剤を薄めて拭く。", "洗剤", "油"),
    ("まな板のにおいを消したい。", "酢を吹きかけて洗う。", "酢", "牛乳"),
    ("排水口のぬめりを取りたい。", "ブラシでこすって洗う。", "ブラシ", "綿あめ"),
    ("窓の結露を防ぎたい。", "部屋の換気をする。", "換気", "加湿"),
]
JA_WRONG = {e[3] for e in JA_EDITS}


def zh(text: str) -> str:
    """English → one Han character per word (from a hash of the word), with a full stop."""
    chars = [chr(0x4E00 + xxhash.xxh32_intdigest(w.lower().encode()) % 0x5000) for w in _WORD.findall(text or "")]
    return "".join(chars) + "。"


class RecipeDouble(LLMEngine):
    """`correct`: the solution texts (as the annotators see them) that achieve their goal."""

    def __init__(self, correct: set[str] | None = None):
        super().__init__(EngineConfig(backend="transformers", model="recipe-double", name="double"))
        self.correct = correct or set()
        self.calls: list[str] = []

    def chat(self, conversations: Sequence[list[ChatMessage]], params: GenerationParams) -> list[str]:
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            self.calls.append(user)
            text = re.search(r"<text>\s*(.*?)\s*</text>", user, re.S)
            if text:
                out.append(zh(text.group(1)))
            elif "before they are translated" in conv[0]["content"]:  # j-piqa's preference judge
                out.append(json.dumps({"verdict": "physical", "reason": "written by the double"}))
            elif "一問だけ" in conv[0]["content"]:  # j-piqa's direct item, by the request's number and round
                n = int(m.group(1)) if (m := re.search(r"(\d+) 問目", user)) else 0
                k = int(m.group(1)) if (m := re.search(r"ラウンド (\d+)", user)) else 1
                cat = 0 if "台所" in user else 3
                q, a, w, x = JA_EDITS[(cat + n - 1 + 2 * (k - 1)) % len(JA_EDITS)]
                out.append(json.dumps({"question": q, "answer": a, "word": w, "wrong_word": x}, ensure_ascii=False))
            elif "編集者" in conv[0]["content"]:  # j-piqa's lexical variant: the item unchanged
                goal = m.group(1) if (m := re.search(r"目的: (.*)", user)) else ""
                sols = re.findall(r"解答[12]: (.*)", user) + ["", ""]
                out.append(json.dumps({"goal": goal, "sol1": sols[0], "sol2": sols[1], "replacements": [],
                                       "changed": False}, ensure_ascii=False))
            elif "одно задание" in conv[0]["content"]:  # ru-piqa's edit form: one item, by request and sample
                goal, answer, word, wrong = RU_EDITS[(xxhash.xxh32_intdigest(user.encode()) + (params.seed or 0))
                                                     % len(RU_EDITS)]
                out.append(json.dumps({"goal": goal, "answer": answer, "word": word, "wrong_word": wrong},
                                      ensure_ascii=False))
            else:
                out.append("")
        return out

    def is_correct(self, solution: str) -> bool:
        """Known correct translations, or a Russian solution without one of the wrong words."""
        if solution in self.correct:
            return True
        if re.search("[а-яё]", solution):
            return not any(w in solution for w in RU_WRONG)
        return any(a == solution for _, a, _, _ in JA_EDITS)

    def render_chat(self, conversation: list[ChatMessage]) -> str:
        return "\n".join(m["content"] for m in conversation)

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[str]) -> list[list[float]]:
        out = []
        for prompt in prompts:
            self.calls.append(prompt)
            s1 = re.search(r"Solution 1: (.*)", prompt)
            s2 = re.search(r"Solution 2: (.*)", prompt)
            first = s1 is not None and self.is_correct(s1.group(1).strip())
            second = s2 is not None and self.is_correct(s2.group(1).strip())
            pick = 0 if first and not second else 1 if second and not first else 2
            out.append([0.0 if i == pick else -9.0 for i in range(len(options))])
        return out

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, int]]:
        return [(-float(len(c)), max(1, len(c))) for _, c in requests]
