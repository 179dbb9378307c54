"""Tag culturally specific questions: a per-language lexicon first, an optional LLM classifier after.

The lexicon (`prompts/classify_cultural/lexicon_<lang>.yaml`) lists items of daily life that belong
to one culture (김치냉장고, 온돌, 제사...). Terms match as substrings, because Korean glues particles
to nouns; each term may list longer strings that contain it without meaning it (어떡하죠 is not 떡).
Rows the lexicon misses can go to an LLM classifier (`llm`, prompt classify_cultural/<lang>). The
tagger is an `LLMStage` (transforms/llm/stage.py) and asks through the ensemble's `Classifier`, so
its answers go to the same answer cache (the job points both at one folder): a rerun asks nothing twice.

Columns: is_cultural, cultural_terms (matched terms), cultural_source (lexicon | llm | null),
cultural_llm_score (null when the LLM was not asked), cultural_tagger (lexicon and prompt versions),
and the LLM provenance `_prompt`, `_model`, `_gen_params` on the rows the LLM was asked about (null
on the others: the lexicon decided them).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import yaml
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.stage import put_column
from transforms.llm.base import LLMEngine
from transforms.llm.classifier import Classifier
from transforms.llm.prompts import PROMPTS_DIR
from transforms.llm.stage import LLMStage


class Lexicon(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: str
    language: str
    categories: dict[str, list[str]]
    exclude: dict[str, list[str]] = Field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        terms = sorted({t for ts in self.categories.values() for t in ts}, key=len, reverse=True)
        return re.compile("|".join(re.escape(t) for t in terms))

    def match(self, text: str | None) -> list[str]:
        """Matched terms in order of first appearance, without false friends listed in `exclude`."""
        if not text:
            return []
        found: list[str] = []
        for m in self._pattern.finditer(text):
            term = m.group(0)
            if term in found or self._excluded(text, m.start(), term):
                continue
            found.append(term)
        return found

    def _excluded(self, text: str, start: int, term: str) -> bool:
        for longer in self.exclude.get(term, []):
            offset = longer.find(term)
            while offset >= 0:
                if start - offset >= 0 and text.startswith(longer, start - offset):
                    return True
                offset = longer.find(term, offset + 1)
        return False


def guarded_terms(lexicon: Lexicon, text: str | None) -> list[str]:
    """Lexicon terms of a crawled row that text added to it cannot supply (issue 24): matched on the
    sanitized text, and kept only when every part of the row (transforms/text/views.py `whole_parts`:
    the text with a run cut out at a line break, markup or a parenthesised list) still holds them; a
    row whose text addresses its reader (transforms/text/guard.py) gets none."""
    from transforms.text.guard import injection_flags
    from transforms.text.views import whole_parts

    if not text or injection_flags(text):
        return []
    parts = whole_parts(text)
    found = lexicon.match(parts[-1])
    for part in parts[:-1]:
        if found:
            kept = set(lexicon.match(part))
            found = [t for t in found if t in kept]
    return found


@functools.cache
def load_lexicon(language: str, root: str | None = None) -> Lexicon:
    path = Path(root or PROMPTS_DIR) / "classify_cultural" / f"lexicon_{language}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no cultural lexicon for language {language!r} at {path}")
    from transforms.io.input_files import InputFileError, decode

    try:
        data = yaml.safe_load(decode(path))
        lexicon = Lexicon.model_validate(data)
    except (InputFileError, yaml.YAMLError, ValueError) as err:
        raise ValueError(f"{path}: not a cultural lexicon ({' '.join(str(err).split())[:200]})") from None
    empty = [c for c, terms in lexicon.categories.items() if not terms or any(not str(t).strip() for t in terms)]
    if empty:
        raise ValueError(f"{path}: category {empty[0]!r} has no terms or an empty term (an empty term matches every row)")
    return lexicon


class CulturalTagger(LLMStage):
    name: ClassVar[str] = "cultural_tag"
    reads: ClassVar[tuple[str, ...]] = (C.ID, C.TEXT)
    writes: ClassVar[tuple[str, ...]] = ("is_cultural", "cultural_terms", "cultural_source", "cultural_llm_score",
                                         "cultural_tagger")

    language: str = Field("ko", description="Selects lexicon_<language>.yaml.")
    llm: Classifier | None = Field(None, description="Ask this classifier about rows the lexicon misses "
                                   "(e.g. prompt classify_cultural/ko); unset: lexicon only.")

    def setup(self) -> None:
        load_lexicon(self.language)
        if self.llm is not None:
            self.engine_for(self.llm.short_name, self.llm.engine)  # an injected engine (use_engine) wins
            self.llm.load_prompt()

    def use_engine(self, engine: LLMEngine) -> CulturalTagger:
        if self.llm is None:
            raise ValueError("no llm classifier configured")
        self.attach_engine(self.llm.short_name, engine)
        return self

    def process_empty(self, batch: pa.Table) -> pa.Table:
        return self._write(batch, [], [], [], [], [])

    def process(self, batch: pa.Table) -> pa.Table:
        lexicon = load_lexicon(self.language)
        texts = batch.column(C.TEXT).to_pylist()
        terms = [guarded_terms(lexicon, t) for t in texts]
        source: list[str | None] = ["lexicon" if t else None for t in terms]
        scores: list[float | None] = [None] * len(texts)
        provenance: list[dict[str, str] | None] = [None] * len(texts)
        tagger = {"lexicon": lexicon.ref}
        if self.llm is not None:
            prompt = self.llm.load_prompt()
            tagger.update(model=self.llm.engine.model, prompt=prompt.ref)
            from transforms.text.guard import injection_flags

            # rows whose text addresses its reader are not asked: the LLM would read the instruction
            misses = [i for i, t in enumerate(terms) if not t and not (texts[i] and injection_flags(texts[i]))]
            ids = [str(x) for x in batch.column(C.ID).to_pylist()]
            answers = self.llm.ask(self, [ids[i] for i in misses], ["" if texts[i] is None else texts[i]
                                                                    for i in misses])
            asked = {C.PROMPT: prompt.ref, C.MODEL: self.llm.engine.model,
                     C.GEN_PARAMS: json.dumps([self.llm.gen_params(0.7)], sort_keys=True)}
            for i, ans in zip(misses, answers, strict=True):
                scores[i] = ans.score
                provenance[i] = asked
                if ans.score is not None and ans.score >= self.llm.threshold and ans.option is not None:
                    source[i] = "llm"
        return self._write(batch, terms, source, scores, [json.dumps(tagger, ensure_ascii=False)] * len(texts),
                           provenance)

    @staticmethod
    def _write(batch: pa.Table, terms: list[list[str]], source: list[str | None], scores: list[float | None],
               tagger: list[str], provenance: list[dict[str, str] | None]) -> pa.Table:
        cols = {"is_cultural": pa.array([s is not None for s in source], pa.bool_()),
                "cultural_terms": pa.array(terms, pa.list_(pa.string())),
                "cultural_source": pa.array(source, pa.string()),
                "cultural_llm_score": pa.array(scores, pa.float64()),
                "cultural_tagger": pa.array(tagger, pa.string())}
        for col in (C.PROMPT, C.MODEL, C.GEN_PARAMS):
            cols[col] = pa.array([None if p is None else p[col] for p in provenance], pa.string())
        for name, values in cols.items():
            batch = put_column(batch, name, values)
        return batch
