"""Minimal pairs built by substitution: a small model writes the correct solution, one word of it and a
wrong replacement; the wrong solution is the correct one with that word replaced.

A 1.5B model asked for two options "that differ in one or two words" writes two unrelated sentences
or two copies of one (docs/j_piqa.md, docs/ru_piqa.md); asked for one sentence and one word, it
mostly does what it is told, and the substitution guarantees the pair differs where the model said.
The recipe's constraint checks still run on the result (a substitution can break a particle or a
case ending). Which solution comes first is drawn by a seeded hash of the row id, so the model's
habit of writing the correct one first does not become the label.
"""

from __future__ import annotations

import re
import unicodedata
from typing import ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage, put_column


class EditDrops(DropReason):
    """Why an (answer, word, wrong word) edit makes no minimal pair (`substitute` returns the first three)."""

    EDIT_EMPTY = "edit_empty", "the answer has no edit"
    EDIT_NO_CHANGE = "edit_no_change", "the edit changes nothing"
    EDIT_WORD_MISSING = "edit_word_missing", "the edited word is not in the solution"
    COPIES_PROMPT_EXAMPLE = "copies_prompt_example", "the answer copies the prompt's example"


def prompt_examples(prompt_id: str) -> list[dict[str, str]]:
    """The worked examples of a prompt: the lines of its system text that are JSON objects."""
    import json

    from transforms.llm.prompts import load_prompt

    out = []
    for line in load_prompt(prompt_id).system.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            out.append(json.loads(line))
    return out


def substitute(answer: str | None, word: str | None, wrong: str | None) -> tuple[str | None, EditDrops | None]:
    """(the wrong solution, None) or (None, drop reason): `word`'s first occurrence in `answer` replaced
    by `wrong`. Matched as written, else ignoring case (Russian sentence-initial capitals), else another
    inflected form of a single word (the model named the lemma: интеграция for интеграции)."""
    a, w, x = ((unicodedata.normalize("NFKC", s or "")).strip() for s in (answer, word, wrong))
    if not a or not w or not x:
        return None, EditDrops.EDIT_EMPTY
    if w == x:
        return None, EditDrops.EDIT_NO_CHANGE
    if w in a:
        return a.replace(w, x, 1), None
    m = re.search(re.escape(w), a, flags=re.IGNORECASE) or _inflected(a, w)
    if m is None:
        return None, EditDrops.EDIT_WORD_MISSING
    repl = x[:1].upper() + x[1:] if m.group(0)[:1].isupper() else x
    return a[:m.start()] + repl + a[m.end():], None


def _key(text: str | None) -> str:
    return "".join(unicodedata.normalize("NFKC", text or "").split()).lower()


def _inflected(answer: str, word: str) -> re.Match[str] | None:
    """Another form of a one-word `word` in `answer` (Russian inflects: интеграция → интеграции): the
    word of the answer sharing the longest prefix with it, at least max(4, len − 3) letters."""
    if " " in word or len(word) < 5:
        return None
    best, best_len = None, max(4, len(word) - 3)
    for m in re.finditer(r"\w+", answer):
        n = len(_common_prefix(m.group(0).lower(), word.lower()))
        if n >= best_len:
            best, best_len = m, n + 1  # a later word must share more to win
    return best


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


class MinimalPairFromEdit(Stage[EditDrops]):
    """(`answer`, `word`, `wrong_word`) → `sol1`, `sol2`, `label` (0/1) and `correct` (1/2).

    Drop reasons: `edit_empty` (a field is empty), `edit_no_change` (the replacement is the word),
    `edit_word_missing` (the word is not in the answer), `copies_prompt_example` (with `examples_from`). The goal column is copied from `goal_column`
    when it is not `goal` (the Japanese prompt calls it `question`)."""

    name: ClassVar[str] = "pair_from_edit"
    extras: ClassVar[tuple[str, ...]] = ("lang",)
    reads: ClassVar[tuple[str, ...]] = (C.ID, "answer", "word", "wrong_word")
    writes: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "label", "correct")

    goal_column: str = Field("goal", description="Column holding the goal (`question` for j_piqa/direct_item).")
    seed: int = Field(0, description="Seed of the draw of which solution comes first.")
    examples_from: str | None = Field(None, description="Prompt id whose worked examples (JSON lines of its "
                                      "system text) a reply must not copy: the same answer, or the same word and "
                                      "replacement, is `copies_prompt_example` (a 1.5B model often does).")

    def process(self, batch: pa.Table) -> pa.Table:
        import xxhash

        ids = [str(v) for v in batch.column(C.ID).to_pylist()]
        examples = prompt_examples(self.examples_from) if self.examples_from else []
        seen = {_key(e.get("answer")) for e in examples} | {(_key(e.get("word")), _key(e.get("wrong_word")))
                                                            for e in examples}
        sol1, sol2, label = [], [], []
        reasons: list[EditDrops | None] = []
        for rid, a, w, x in zip(ids, *(batch.column(c).to_pylist() for c in ("answer", "word", "wrong_word")),
                                strict=True):
            wrong, reason = substitute(a, w, x)
            if reason is None and (_key(a) in seen or (_key(w), _key(x)) in seen):
                wrong, reason = None, EditDrops.COPIES_PROMPT_EXAMPLE
            right = unicodedata.normalize("NFKC", a or "").strip()
            second = xxhash.xxh3_64_intdigest(f"{self.seed}\x1f{rid}".encode()) % 2 == 1
            if reason is not None:
                first_text, second_text, lab = right or None, None, None
            elif second:
                first_text, second_text, lab = wrong, right, 1
            else:
                first_text, second_text, lab = right, wrong, 0
            sol1.append(first_text)
            sol2.append(second_text)
            label.append(lab)
            reasons.append(reason)
        out = batch
        if self.goal_column != "goal":
            out = put_column(out, "goal", batch.column(self.goal_column).cast(pa.string()))
        out = put_column(out, "sol1", pa.array(sol1, pa.string()))
        out = put_column(out, "sol2", pa.array(sol2, pa.string()))
        out = put_column(out, "label", pa.array(label, pa.int64()))
        out = put_column(out, "correct", pa.array([None if v is None else str(v + 1) for v in label], pa.string()))
        return self.drop(out, reasons)
