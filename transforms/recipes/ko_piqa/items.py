"""From refined questions to PIQA items: build the pair, check the structure.

* `RefinedItem`: the refinement's reply (prompts/ko_piqa/refine.yaml v2): goal, the correct solution
  (`answer`), one `word` of it and its `wrong_word`. Lengths are bounded in its JSON schema (llama.cpp
  decodes under it, so a looping model is cut off), and a reply that cannot make an item (the word not
  in the answer, the answer a copy of the goal, a repeated phrase, a prompt example copied) fails
  validation with the reason, which the LLM stage's retry shows to the model once.
* `KoreanPairFromEdit`: the distractor is the answer with the word replaced (edit_pairs.py), and the
  particle after it made to agree with the new word's last syllable (설탕을 → 식초를).
* `StructuralChecks`: both solutions present, not identical, the goal not empty; records the
  minimal-pair distance in words and characters and the lengths the card reports.

Label balance is transforms/piqa/balance.py's `BalanceLabels`, shared with the other recipes.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage, put_column
from transforms.piqa.edit_pairs import EditDrops, MinimalPairFromEdit, _key, prompt_examples, substitute
from transforms.text.textcheck import levenshtein

REFINE_PROMPT = "ko_piqa/refine"
_EDIT_PROBLEMS = {EditDrops.EDIT_EMPTY: "word나 wrong_word가 비어 있습니다",
                  EditDrops.EDIT_NO_CHANGE: "wrong_word가 word와 같습니다: 다른 낱말을 쓰세요",
                  EditDrops.EDIT_WORD_MISSING: "word가 answer 안에 글자 그대로 없습니다: answer에 있는 낱말을 고르세요"}


@lru_cache(maxsize=4)
def _examples(prompt_id: str) -> frozenset[str]:
    return frozenset(_key(e.get("answer")) for e in prompt_examples(prompt_id))


class RefinedItem(BaseModel):
    """One refined question: the reply schema of ko_piqa/refine v2 and the checks a retry can fix."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    goal: str = Field(..., min_length=2, max_length=60, description="What the person wants to do (~하려면).")
    answer: str = Field(..., min_length=4, max_length=90, description="The correct solution, one sentence.")
    word: str = Field(..., min_length=1, max_length=15, description="A word of the answer, written as in it.")
    wrong_word: str = Field(..., min_length=1, max_length=15, description="Its replacement that makes it fail.")

    @model_validator(mode="after")
    def _makes_an_item(self) -> RefinedItem:
        problem = refine_problem(self.goal, self.answer, self.word, self.wrong_word)
        if problem:
            raise ValueError(problem)
        return self


def refine_problem(goal: str, answer: str, word: str, wrong_word: str, lang: str = "ko") -> str | None:
    """Why a refinement cannot become an item (in the prompt's language, for the retry turn), or None."""
    from transforms.piqa.degenerate import degenerate_reason

    _, reason = substitute(answer, word, wrong_word)
    if reason is not None:
        return _EDIT_PROBLEMS[reason]
    if _plain(answer) == _plain(goal):
        return "answer가 goal을 그대로 옮겼습니다: goal을 이루는 방법을 쓰세요"
    if _key(answer) in _examples(REFINE_PROMPT):
        return "answer가 예시를 베꼈습니다: 질문에 맞는 새 문항을 쓰세요"
    for name, text in (("goal", goal), ("answer", answer)):
        if why := degenerate_reason(text, lang):
            return f"{name}에 같은 말이 되풀이됩니다 ({why}): 짧고 자연스럽게 쓰세요"
    return None


def _plain(text: str) -> str:
    """Letters and digits only (a copy of the goal with a full stop added is still a copy)."""
    return "".join(ch for ch in _key(text) if ch.isalnum())


# Particle pairs (after a final consonant, after a vowel); 으로/로 is decided separately (ㄹ takes 로).
_PARTICLES = (("을", "를"), ("이", "가"), ("은", "는"), ("과", "와"))


def _final_consonant(syllable: str) -> int | None:
    """The final-consonant index (0 = none, 8 = ㄹ) of a Hangul syllable, None for anything else."""
    code = ord(syllable) - 0xAC00
    return code % 28 if 0 <= code < 11172 else None


def fix_particle(text: str, pos: int) -> str:
    """`text` with the particle starting at `pos` made to agree with the syllable before it.

    Only a particle that ends its word (space, punctuation or the end follows) is touched, so a
    word that merely starts with 이 or 가 is left alone."""
    if pos <= 0 or pos >= len(text):
        return text
    jong = _final_consonant(text[pos - 1])
    if jong is None:
        return text
    for size, forms in ((2, ("으로",)), (1, ("로",)), (1, tuple(p for pair in _PARTICLES for p in pair))):
        particle = text[pos:pos + size]
        after = text[pos + size:pos + size + 1]
        if particle not in forms or (after and not (after.isspace() or unicodedata.category(after)[0] == "P")):
            continue
        if particle in ("으로", "로"):
            new = "로" if jong in (0, 8) else "으로"
        else:
            pair = next(p for p in _PARTICLES if particle in p)
            new = pair[1] if jong == 0 else pair[0]
        return text[:pos] + new + text[pos + size:]
    return text


class KoreanPairFromEdit(MinimalPairFromEdit):
    """MinimalPairFromEdit for Korean: the particle after the replaced word agrees with it."""

    name: ClassVar[str] = "ko_pair_from_edit"

    examples_from: str | None = Field(REFINE_PROMPT, description="Prompt whose worked examples a reply must "
                                      "not copy (`copies_prompt_example`).")

    def process(self, batch: pa.Table) -> pa.Table:
        out = super().process(batch)
        answers, words, wrongs = (batch.column(c).to_pylist() for c in ("answer", "word", "wrong_word"))
        s1, s2 = out.column("sol1").to_pylist(), out.column("sol2").to_pylist()
        for i, (lab, a, w, x) in enumerate(zip(out.column("label").to_pylist(), answers, words, wrongs,
                                               strict=True)):
            if lab is None:
                continue
            a, w, x = (unicodedata.normalize("NFKC", v or "").strip() for v in (a, w, x))
            at = a.find(w)
            if at < 0:  # matched another inflection (edit_pairs._inflected): leave it as substituted
                continue
            sols = s1 if lab == 1 else s2  # the wrong solution: sol1 when the correct one is sol2
            sols[i] = fix_particle(sols[i], at + len(x))
        out = put_column(out, "sol1", pa.array(s1, pa.string()))
        return put_column(out, "sol2", pa.array(s2, pa.string()))


def word_edit_distance(a: str, b: str) -> int:
    """Levenshtein distance over whitespace words (Korean eojeol)."""
    return levenshtein(a.split(), b.split())


class StructuralDrops(DropReason):
    EMPTY_GOAL = "empty_goal", "the goal is empty"
    IDENTICAL_SOLUTIONS = "identical_solutions", "the solutions are the same"
    INVALID_LABEL = "invalid_label", "the label is not 0 or 1"
    MISSING_SOLUTION = "missing_solution", "a solution is empty"
    NOT_MINIMAL_PAIR = "not_minimal_pair", "the solutions differ in more words than a minimal pair"


class StructuralChecks(Stage[StructuralDrops]):
    """Drop items that are not PIQA items; record the pair's distance and the lengths."""

    name: ClassVar[str] = "ko_structural_checks"
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "label")
    writes: ClassVar[tuple[str, ...]] = ("pair_word_distance", "pair_char_distance", "goal_chars", "solution_chars")
    max_word_distance: int | None = Field(None, ge=1, description="Drop pairs further apart than this "
                                          "many words (`not_minimal_pair`); None only records the distance.")

    def process(self, batch: pa.Table) -> pa.Table:
        goals, s1, s2 = (batch.column(c).to_pylist() for c in ("goal", "sol1", "sol2"))
        labels = batch.column("label").to_pylist()
        reasons: list[StructuralDrops | None] = []
        words, chars, goal_len, sol_len = [], [], [], []
        for g, a, b, lab in zip(goals, s1, s2, labels, strict=True):
            g, a, b = (str(x or "").strip() for x in (g, a, b))
            wd, cd = word_edit_distance(a, b), levenshtein(a, b)
            words.append(wd)
            chars.append(cd)
            goal_len.append(len(g))
            sol_len.append((len(a) + len(b)) / 2)
            if not g:
                reasons.append(StructuralDrops.EMPTY_GOAL)
            elif not a or not b:
                reasons.append(StructuralDrops.MISSING_SOLUTION)
            elif a == b:
                reasons.append(StructuralDrops.IDENTICAL_SOLUTIONS)
            elif lab not in (0, 1):
                reasons.append(StructuralDrops.INVALID_LABEL)
            elif self.max_word_distance is not None and wd > self.max_word_distance:
                reasons.append(StructuralDrops.NOT_MINIMAL_PAIR)
            else:
                reasons.append(None)
        out = put_column(batch, "pair_word_distance", pa.array(words, pa.int32()))
        out = put_column(out, "pair_char_distance", pa.array(chars, pa.int32()))
        out = put_column(out, "goal_chars", pa.array(goal_len, pa.int32()))
        out = put_column(out, "solution_chars", pa.array(sol_len, pa.float64()))
        return self.drop(out, reasons)
