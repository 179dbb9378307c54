"""COPA-style two-choice sets → PIQA items: XCOPA-ta (cambridgeltl/xcopa) and PARus (RussianSuperGLUE).

A COPA item is a premise, a question (cause or effect) and two alternatives. The goal becomes the
premise followed by the question asked in the item's own language ("What was the cause of this?"),
choice1/choice2 become sol1/sol2, and the label keeps its meaning (0 → the first alternative).
Both sets are translations of English COPA, so `is_translation` is true and `is_cultural` false.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from transforms.piqa.schema import GOAL, ID, IS_CULTURAL, LABEL, LANG, SOL1, SOL2, SOURCE, conform_items

# The question each COPA item asks, written in the item's language. PARus ships its own Russian
# wording; XCOPA has only "cause"/"effect", so the Tamil and English wording is ours.
COPA_QUESTIONS: dict[str, dict[str, str]] = {
    "ta": {"cause": "இதற்கான காரணம் என்ன?", "effect": "இதன் விளைவாக என்ன நடந்தது?"},
    "en": {"cause": "What was the cause of this?", "effect": "What happened as a result?"},
    "ru": {"cause": "Что стало причиной этого?", "effect": "Что случилось в результате?"},
}
_END = re.compile(r"[.!?。।]$")


def copa_goal(premise: str, question: str) -> str:
    premise = premise.strip()
    return f"{premise if _END.search(premise) else premise + '.'} {question}"


def read_xcopa(path: str | Path, split: str = "val", *, variant: str = "data", lang: str | None = None,
               questions: dict[str, str] | None = None) -> pa.Table:
    """An XCOPA split: `path` is the folder (e.g. ../shared/data/xcopa_ta) or one `*.jsonl` file.

    `variant="data-gmt"` reads the Google-MT English version of the same items.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob(f"{variant}_*_{split}.*.jsonl"))
        if not files:
            raise FileNotFoundError(f"{path}: no {variant}_<lang>_{split}.*.jsonl file")
        path = files[0]
    stem = path.name.split(".")[0]  # data_ta_val / data-gmt_ta_val
    variant, src_lang, split = stem.rsplit("_", 2)
    lang = lang or ("en" if variant == "data-gmt" else src_lang)
    questions = questions or COPA_QUESTIONS.get(lang)
    if questions is None:
        raise ValueError(f"no COPA question wording for language {lang!r}: pass questions={{'cause': ..., "
                         f"'effect': ...}} in that language")
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            rows.append({ID: f"xcopa-{src_lang}{'-gmt' if variant == 'data-gmt' else ''}-{split}-{r['idx']:04d}",
                         LANG: lang, GOAL: copa_goal(r["premise"], questions[r["question"]]),
                         SOL1: r["choice1"], SOL2: r["choice2"], LABEL: int(r["label"]),
                         SOURCE: f"xcopa-{src_lang}", IS_CULTURAL: False, "is_translation": True,
                         "copa_question": r["question"], "copa_premise": r["premise"]})
    return conform_items(pa.Table.from_pylist(rows))


def read_parus(path: str | Path) -> pa.Table:
    """PARus from the RussianSuperGLUE human benchmark (`assign_PARus.tsv`, or its folder).

    That file holds three annotators' answers per item, not a gold column; the label is their
    majority (2 of 3 at least) and `label_votes` records the agreement ("3/3" or "2/3"). Item order
    and ids follow the first appearance in the file.
    """
    path = Path(path)
    if path.is_dir() or path.suffix == ".jsonl":
        path = (path if path.is_dir() else path.parent) / "assign_PARus.tsv"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: PARus labels come from the human-benchmark answers")
    votes: dict[tuple[str, str, str, str], list[int]] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter=";"):
            key = (row["INPUT:premise"], row["INPUT:question"], row["INPUT:sent1"], row["INPUT:sent2"])
            votes.setdefault(key, []).append(int(row["OUTPUT:variant"]))
    rows: list[dict[str, Any]] = []
    for n, ((premise, question, sent1, sent2), answers) in enumerate(votes.items()):
        label, count = Counter(answers).most_common(1)[0]
        rows.append({ID: f"parus-{n:04d}", LANG: "ru", GOAL: copa_goal(premise, question), SOL1: sent1,
                     SOL2: sent2, LABEL: label, SOURCE: "parus", IS_CULTURAL: False, "is_translation": True,
                     "copa_question": "cause" if "причин" in question else "effect", "copa_premise": premise,
                     "label_votes": f"{count}/{len(answers)}"})
    return conform_items(pa.Table.from_pylist(rows))
