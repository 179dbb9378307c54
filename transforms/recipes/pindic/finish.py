"""PIndicQA after review: correction few-shots, the correction itself, release checks, label balance.

* `CopyColumns`: keep a stage's provenance before a later LLM stage overwrites `_model`/`_prompt`.
* `AttachFixes`: each row gets its language's few-shot human fixes and error types to avoid, read
  from `prompts/pindic/fixes/<lang>.yaml` (data that reviewers grow; `fixes_version` is recorded).
* `CorrectTranslation` (LLMTransform, json): English source + machine translation → corrected
  goal/sol1/sol2, rewritten only where needed.
* `ReleaseChecks`: the benchmark text (corrected) must be in its language's script, free of decoding
  loops (the gate's own rule, transforms/piqa/degenerate.py) and long enough for the suite's length rule;
  otherwise dropped with `wrong_script` / `degenerate_text` / `too_short`.
* `ReleaseColumns`: the columns of the paper's Table 1 (see docs/pindic.md for the mapping).

Label balance (every text version of a solution swapped with it) is transforms/piqa/balance.py's
`BalanceLabels`, shared with the other recipes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
import yaml
from pydantic import Field

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage, StageError, put_column
from transforms.llm.base import GenerationParams
from transforms.llm.call import PromptRef
from transforms.llm.output import JsonOutput, OutputSpec
from transforms.llm.transform import LLMTransform
from transforms.recipes.pindic.schemas import INDIC
from transforms.text.textcheck import script_share
from transforms.translate.languages import language_name

FIXES_DIR = Path(__file__).resolve().parents[3] / "prompts" / "pindic" / "fixes"


class CopyColumns(Stage):
    """Copies columns under new names (source column → new column), e.g. the English text before translation."""

    name: ClassVar[str] = "copy_columns"
    mapping: dict[str, str] = Field(..., description="Source column → new column.")

    def process(self, batch: pa.Table) -> pa.Table:
        missing = [c for c in self.mapping if c not in batch.schema.names]
        if missing:
            raise StageError(f"stage {self.name!r}: no column(s) {missing} to copy")
        for src, dst in self.mapping.items():
            batch = put_column(batch, dst, batch.column(src))
        return batch


def load_fixes(lang: str, folder: Path = FIXES_DIR) -> dict[str, Any]:
    path = folder / f"{lang}.yaml"
    if not path.exists():
        raise StageError(f"no correction few-shots for {lang!r}: write {path} (format: docs/pindic.md)")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for key in ("version", "fixes", "error_types"):
        if key not in data:
            raise StageError(f"{path} lacks `{key}`")
    return data


def render_fixes(data: dict[str, Any]) -> tuple[str, str]:
    shots = []
    for n, fx in enumerate(data["fixes"], 1):
        shots.append(f"Example {n}\nEnglish: {fx['source']}\nMachine translation: {fx['mt']}\n"
                     f"Corrected: {fx['fixed']}\nWhat was wrong: {fx.get('note', '')}")
    return "\n\n".join(shots), "\n".join(f"- {e}" for e in data["error_types"])


class AttachFixes(Stage):
    """Attaches the reviewers' human fixes of earlier items as few-shot examples for the correction prompt."""

    name: ClassVar[str] = "attach_fixes"
    reads: ClassVar[tuple[str, ...]] = ("lang",)
    writes: ClassVar[tuple[str, ...]] = ("fix_examples", "error_types", "fixes_version", "language_name")

    fixes_dir: str | None = Field(None, description="Folder of <lang>.yaml few-shot files (default prompts/pindic/fixes).")

    def process(self, batch: pa.Table) -> pa.Table:
        folder = Path(self.fixes_dir) if self.fixes_dir else FIXES_DIR
        langs = [str(x) for x in batch.column("lang").to_pylist()]
        cache = {lang: load_fixes(lang, folder) for lang in sorted(set(langs))}
        rendered = {lang: render_fixes(d) for lang, d in cache.items()}
        cols = {"fix_examples": [rendered[x][0] for x in langs], "error_types": [rendered[x][1] for x in langs],
                "fixes_version": [f"pindic/fixes/{x}@{cache[x]['version']}" for x in langs],
                "language_name": [language_name(x) for x in langs]}
        for name, values in cols.items():
            batch = put_column(batch, name, pa.array(values, pa.string()))
        return batch


class CorrectTranslation(LLMTransform):
    """Asks an LLM to correct each machine-translated item, with the reviewers' fixes as few-shots."""

    name: ClassVar[str] = "correct_translation"
    extras: ClassVar[tuple[str, ...]] = ("mt",)

    prompt: PromptRef = Field(default_factory=lambda: PromptRef(id="pindic/correct"))
    variables: dict[str, str] = Field(default_factory=lambda: {
        "language": "language_name", "fix_examples": "fix_examples", "error_types": "error_types",
        "en_goal": "goal", "en_sol1": "sol1", "en_sol2": "sol2",
        "mt_goal": "translated_goal", "mt_sol1": "translated_sol1", "mt_sol2": "translated_sol2"})
    output: OutputSpec = Field(default_factory=lambda: JsonOutput(model="transforms.recipes.pindic.schemas:CorrectedItem",
                                                                  prefix="corrected_"))
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=600, temperature=0.0))
    on_invalid: Literal["drop", "retry"] = "retry"


class ReleaseCheckDrops(DropReason):
    DEGENERATE_TEXT = "degenerate_text", "a text is degenerate (a repetition loop)"
    LANGUAGE_NOT_SUPPORTED = ("language_not_supported",
                               "the item's language is not one of the Indic languages this check reads")
    SAME_SOLUTIONS_AFTER_CORRECTION = ("same_solutions_after_correction",
                                        "the two solutions are the same after the LLM correction")
    TOO_SHORT = "too_short", "a text is too short"
    WRONG_SCRIPT = "wrong_script", "too few letters in the language's script"


class ReleaseChecks(Stage[ReleaseCheckDrops]):
    """The checks a corrected item must pass before release: two different solutions, the language, the label."""

    name: ClassVar[str] = "release_checks"
    extras: ClassVar[tuple[str, ...]] = ("mt",)
    reads: ClassVar[tuple[str, ...]] = ("lang", "corrected_goal", "corrected_sol1", "corrected_sol2")
    writes: ClassVar[tuple[str, ...]] = ("script_share",)

    min_script_share: float = Field(0.8, gt=0, le=1, description="Letters in the language's script (the suite's "
                                    "script check uses 0.8).")
    min_goal_plus_solution_words: int = Field(25, ge=0, description="The pindic suite's length rule, checked "
                                              "here so a short item is dropped with a reason, not failing the gate.")

    def process(self, batch: pa.Table) -> pa.Table:
        # the gate's own rule: an item dropped here would have failed the release
        from transforms.piqa.degenerate import degenerate_reason

        cols = {c: batch.column(c).to_pylist() for c in self.reads}
        shares: list[float] = []
        reasons: list[ReleaseCheckDrops | None] = []
        for lang, g, a, b in zip(*(cols[c] for c in self.reads), strict=True):
            texts = [str(t or "") for t in (g, a, b)]
            share = min(script_share(t, lang) for t in texts) if lang in INDIC else 0.0
            shares.append(round(share, 4))
            words = len(texts[0].split()) + min(len(texts[1].split()), len(texts[2].split()))
            if lang not in INDIC:
                reasons.append(ReleaseCheckDrops.LANGUAGE_NOT_SUPPORTED)
            elif share < self.min_script_share:
                reasons.append(ReleaseCheckDrops.WRONG_SCRIPT)
            elif any(degenerate_reason(t, lang) for t in texts):
                reasons.append(ReleaseCheckDrops.DEGENERATE_TEXT)
            elif texts[1].strip() == texts[2].strip():
                reasons.append(ReleaseCheckDrops.SAME_SOLUTIONS_AFTER_CORRECTION)
            elif words < self.min_goal_plus_solution_words:
                reasons.append(ReleaseCheckDrops.TOO_SHORT)
            else:
                reasons.append(None)
        out = put_column(batch, "script_share", pa.array(shares, pa.float64()))
        return self.drop(out, reasons)


class ReleaseColumns(Stage):
    """English source → en_*, the machine translation → translated_*, the corrected text → goal/sol1/sol2."""

    name: ClassVar[str] = "release_columns"
    release_columns: ClassVar[tuple[str, ...]] = ("prompt_id", "prompt_version", "model")
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "corrected_goal", "corrected_sol1", "corrected_sol2",
                                        "near_text", "gen_model", "gen_prompt")
    writes: ClassVar[tuple[str, ...]] = ("en_goal", "en_sol1", "en_sol2", "nearest_goal", "model", "prompt_id",
                                         "prompt_version", "is_cultural", "source")

    source: str = Field("pindic-generated", description="Value of the `source` column.")

    def process(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        out = batch
        for f in ("goal", "sol1", "sol2"):
            out = put_column(out, f"en_{f}", batch.column(f))
            out = put_column(out, f, batch.column(f"corrected_{f}"))
        out = put_column(out, "nearest_goal", batch.column("near_text"))
        prompts = [str(p or "") for p in batch.column("gen_prompt").to_pylist()]
        out = put_column(out, "model", batch.column("gen_model"))
        out = put_column(out, "prompt_id", pa.array([p.partition("@")[0] for p in prompts], pa.string()))
        out = put_column(out, "prompt_version", pa.array([p.partition("@")[2] for p in prompts], pa.string()))
        out = put_column(out, "is_cultural", pa.array([True] * n, pa.bool_()))
        return put_column(out, "source", pa.array([self.source] * n, pa.string()))
