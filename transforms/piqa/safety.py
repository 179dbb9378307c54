"""Safety screening of written items: offensive content, unsafe instructions, harmful stereotypes.

Two screens, each flag carrying its category, where it came from and the evidence:

* a lexicon (`lake/samples/safety_lexicon.yaml`, Tamil + English): whole-word terms and stems,
  with word boundaries that understand Tamil (vowel signs and the virama belong to the word,
  which Python's `\\b` does not know), and `all_of` co-occurrence rules (bleach + ammonia);
* an LLM screen through any `LLMEngine` with its own versioned prompt (`prompts/ta_piqa/safety.yaml`)
  asking for JSON `{"flag", "category", "evidence"}`; it rides on `LLMStage` (answer cache,
  retries, provenance columns). A reply that is not valid JSON is recorded, not guessed at.

Flagged items are never dropped: they go to the review batch with `safety_flags`. Columns:
`safety_flags` (list of {category, source, evidence}), `safety_flagged`, `safety_llm_status`
(ok | invalid | not_asked), `safety_llm_raw` (the reply when invalid) and `safety_screen` (lexicon
and prompt versions).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
import yaml
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.stage import put_column
from transforms.llm.call import LLMCall, PromptRef, provenance_fields
from transforms.llm.output import JsonOutput
from transforms.llm.stage import LLMStage

CATEGORIES = ("offensive", "unsafe_instruction", "harmful_stereotype")
LEXICON_PATH = Path(__file__).resolve().parents[2] / "lake" / "samples" / "safety_lexicon.yaml"
FLAG_TYPE = pa.struct([("category", pa.string()), ("source", pa.string()), ("evidence", pa.string())])
# Letters, digits, and the combining marks of Indic scripts and Latin diacritics: all part of a word.
_WORD_CHAR = r"[\w\u0900-\u0DFF\u0300-\u036F\u200C\u200D]"
_VIRAMAS = frozenset("\u094d\u09cd\u0a4d\u0acd\u0b4d\u0bcd\u0c4d\u0ccd\u0d4d")  # Indic scripts' viramas


class SafetyVerdict(BaseModel):
    """What the LLM screen must answer (its JSON schema constrains engines that can)."""

    model_config = ConfigDict(extra="forbid")

    flag: bool
    category: Literal["offensive", "unsafe_instruction", "harmful_stereotype", "none"]
    evidence: str


def normalise(text: str | None) -> str:
    return unicodedata.normalize("NFC", text or "").lower()


def term_pattern(term: str) -> str:
    """Regex of one lexicon term: whole words, or a stem (`...*`) that the word may continue."""
    stem = term.endswith("*")
    words = normalise(term.rstrip("*")).split()
    if stem and words and words[-1][-1] in _VIRAMAS:
        # a Tamil stem written as a word (முட்டாள்) loses its final virama when a suffix starts with a
        # vowel (முட்டாளே, முட்டாளை): match the consonant, with or without the virama
        words[-1] = words[-1][:-1]
    body = r"\s+".join(re.escape(w) for w in words)
    return rf"(?<!{_WORD_CHAR}){body}" + ("" if stem else rf"(?!{_WORD_CHAR})")


class CategoryRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    terms: list[str] = Field(default_factory=list, description="Any one of these flags the item.")
    all_of: list[list[list[str]]] = Field(default_factory=list, description="Rules: every group of a rule "
                                          "must have a hit in the item.")


class SafetyLexicon(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: str
    languages: list[str]
    categories: dict[str, CategoryRules]

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    @functools.cached_property
    def _compiled(self) -> dict[str, tuple[re.Pattern[str] | None, list[list[re.Pattern[str]]]]]:
        def alternation(terms: list[str]) -> re.Pattern[str]:
            ordered = sorted(terms, key=len, reverse=True)
            return re.compile("|".join(term_pattern(t) for t in ordered))

        return {cat: (alternation(r.terms) if r.terms else None,
                      [[alternation(group) for group in rule] for rule in r.all_of])
                for cat, r in self.categories.items()}

    def screen(self, text: str | None) -> list[dict[str, str]]:
        """Flags of one text: one per category hit, evidence = the matched words (in text order)."""
        norm = normalise(text)
        flags = []
        for category, (any_of, rules) in self._compiled.items():
            found: list[str] = []
            if any_of is not None:
                found += [m.group(0) for m in any_of.finditer(norm)]
            for rule in rules:
                hits = [[m.group(0) for m in group.finditer(norm)] for group in rule]
                if all(hits):
                    found += [h[0] for h in hits]
            if found:
                words = [_whole_word(norm, w) for w in dict.fromkeys(found)]
                flags.append({"category": category, "source": "lexicon", "evidence": ", ".join(words)})
        return flags


def _whole_word(text: str, fragment: str) -> str:
    """The word(s) of `text` a stem matched in, so the evidence reads as written."""
    m = re.search(rf"{re.escape(fragment)}{_WORD_CHAR}*", text)
    return m.group(0) if m else fragment


@functools.cache
def load_lexicon(path: str | None = None) -> SafetyLexicon:
    p = Path(path) if path else LEXICON_PATH
    if not p.exists():
        raise FileNotFoundError(f"safety lexicon not found at {p}")
    lexicon = SafetyLexicon.model_validate(yaml.safe_load(p.read_text(encoding="utf-8")))
    unknown = set(lexicon.categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"{p}: unknown safety categories {sorted(unknown)}; known: {list(CATEGORIES)}")
    return lexicon


def item_text(goal: str | None, sol1: str | None, sol2: str | None) -> str:
    return "\n".join(t for t in (goal, sol1, sol2) if t)


def llm_flag(verdict: dict[str, Any]) -> dict[str, str] | None:
    """The flag of a validated LLM verdict, or None when it flags nothing."""
    if not verdict.get("flag") or verdict.get("category") not in CATEGORIES:
        return None
    return {"category": str(verdict["category"]), "source": "llm", "evidence": str(verdict.get("evidence", ""))}


def flag_counts(flags: Sequence[Sequence[dict[str, Any]] | None]) -> dict[str, Any]:
    """Items flagged per category and source (an item counts once per category)."""
    per_cat: Counter[str] = Counter()
    per_source: Counter[str] = Counter()
    flagged = 0
    for row in flags:
        row = row or []
        flagged += bool(row)
        for cat in {f["category"] for f in row}:
            per_cat[cat] += 1
        for src in {f["source"] for f in row}:
            per_source[src] += 1
    return {"items_flagged": flagged, "by_category": {c: per_cat.get(c, 0) for c in CATEGORIES},
            "by_source": dict(sorted(per_source.items()))}


def default_llm_call() -> LLMCall:
    return LLMCall(prompt=PromptRef(id="ta_piqa/safety"),
                   variables={"goal": "goal", "sol1": "sol1", "sol2": "sol2"},
                   output=JsonOutput(model="transforms.piqa.safety:SafetyVerdict"),
                   raw_column="safety_llm_raw")


class SafetyScreen(LLMStage):
    """Lexicon + optional LLM safety screen; writes flags, drops nothing (see the module docstring)."""

    name: ClassVar[str] = "safety_screen"
    reads: ClassVar[tuple[str, ...]] = (C.ID, "goal", "sol1", "sol2")
    writes: ClassVar[tuple[str, ...]] = ("safety_flags", "safety_flagged", "safety_llm_status", "safety_llm_raw",
                                         "safety_screen")

    lexicon_path: str | None = Field(None, description="Lexicon YAML; unset: lake/samples/safety_lexicon.yaml.")
    llm: LLMCall | None = Field(None, description="The LLM screen (engine, prompt ta_piqa/safety, JSON output); "
                                "unset: lexicon only. `default_llm_call()` gives the standard one.")

    def setup(self) -> None:
        load_lexicon(self.lexicon_path)
        if self.llm is not None:
            self.load_call_prompt(self.llm)

    def use_engine(self, engine: Any) -> SafetyScreen:
        self.attach_engine("safety", engine)
        return self

    def process_empty(self, batch: pa.Table) -> pa.Table:
        return self._write(batch, [], [], [], "")

    def process(self, batch: pa.Table) -> pa.Table:
        lexicon = load_lexicon(self.lexicon_path)
        goals, sol1, sol2 = (batch.column(c).to_pylist() for c in ("goal", "sol1", "sol2"))
        flags = [lexicon.screen(item_text(g, a, b)) for g, a, b in zip(goals, sol1, sol2, strict=True)]
        status = ["not_asked"] * batch.num_rows
        raw: list[str | None] = [None] * batch.num_rows
        screen = {"lexicon": lexicon.ref}
        out = batch
        if self.llm is not None:
            prompt = self.load_call_prompt(self.llm)
            screen.update(prompt=prompt.ref, model=self.llm.engine.model)
            ids = [str(x) for x in batch.column(C.ID).to_pylist()]
            replies = [r[0] for r in self.replies(self.llm, "safety", self.row_variables(self.llm, batch), ids)]
            for i, reply in enumerate(replies):
                if reply.ok:
                    status[i] = "ok"
                    flag = llm_flag(reply.value[0])
                    if flag is not None:
                        flags[i].append(flag)
                else:
                    status[i], raw[i] = "invalid", reply.text
            for name, value in self.llm.provenance(prompt).items():
                out = put_column(out, name, pa.array([value] * batch.num_rows, pa.string()))
        return self._write(out, flags, status, raw, json.dumps(screen, ensure_ascii=False))

    def _write(self, batch: pa.Table, flags: list[list[dict[str, str]]], status: list[str],
               raw: list[str | None], screen: str) -> pa.Table:
        n = batch.num_rows
        out = put_column(batch, "safety_flags", pa.array(flags, pa.list_(FLAG_TYPE)))
        out = put_column(out, "safety_flagged", pa.array([bool(f) for f in flags], pa.bool_()))
        out = put_column(out, "safety_llm_status", pa.array(status, pa.string()))
        out = put_column(out, "safety_llm_raw", pa.array(raw, pa.string()))
        if self.llm is not None and n == 0:
            for f in provenance_fields():
                out = put_column(out, f.name, pa.array([], f.type))
        return put_column(out, "safety_screen", pa.array([screen] * n, pa.string()))
