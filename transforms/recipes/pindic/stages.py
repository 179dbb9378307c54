"""PIndicQA stages: the English pool, its open and closed labels, generation checks.

* `PiqaSliceSource`: PIQA items from a JSONL file (the bundled slice), fingerprinted.
* `OpenMetaLabels` (LLMTransform, json): Domain / Core_Principle / Key_Properties_Materials /
  Action_Type, each 1-3 free strings; invalid or extra keys → retried once, then `invalid_output`
  with the raw reply kept (transforms/llm/stage.py).
* `LabelRowsSource`: the distinct open labels of a labelling run, one row per (category, label).
* `NameClusters` (LLMTransform, json): candidate names for one cluster of labels.
* `ClassifyItems` (LLMTransform, json whose fields are enums of the taxonomy's classes): exactly one
  class per category; the reply is validated against the lists whatever the engine did.
* `GenerateItems` (LLMGenerate, a JSON list of {goal, answer, word, wrong_word} per request; the pair is
  built by `transforms/piqa/edit_pairs.py:MinimalPairFromEdit`) and `ValidateGenerated`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, model_validator

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.core.drop_reasons import DropReason
from transforms.core.lake import parquet_files, read_table
from transforms.core.manifest import fingerprint_file
from transforms.core.stage import FilterStage
from transforms.llm.base import GenerationParams
from transforms.llm.call import PromptRef
from transforms.llm.generate import LLMGenerate
from transforms.llm.output import FieldSpec, JsonOutput, OutputSpec
from transforms.llm.transform import LLMTransform
from transforms.recipes.pindic.taxonomy import CATEGORIES, COLUMN, Taxonomy

OPEN_PREFIX = "open_"


class PiqaSliceSource(SourceStage):
    """The English PIQA pool PIndicQA starts from: one row per item of a JSONL file."""

    name: ClassVar[str] = "piqa_slice"
    path: str = Field(..., description="JSONL of PIQA items: id, goal, sol1, sol2, label (source optional).")
    limit: int | None = Field(None, ge=1, description="Read only the first N items.")

    def rows(self) -> pa.Table:
        p = Path(self.path)
        if not p.exists():
            raise FileNotFoundError(f"PIQA slice {p} does not exist")
        rows = []
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            r = json.loads(line)
            missing = [k for k in ("goal", "sol1", "sol2", "label") if k not in r]
            if missing:
                raise ValueError(f"{p}:{n + 1}: a PIQA item needs {missing}")
            rows.append({C.ID: str(r.get("id") or f"{p.stem}-{n}"), "goal": str(r["goal"]), "sol1": str(r["sol1"]),
                         "sol2": str(r["sol2"]), "label": int(r["label"]), "source": str(r.get("source") or p.stem)})
            if self.limit and len(rows) >= self.limit:
                break
        return pa.Table.from_pylist(rows)

    def fingerprints(self) -> list[dict[str, Any]]:
        return [fingerprint_file(Path(self.path))]


def _open_output() -> OutputSpec:
    return JsonOutput(model="transforms.recipes.pindic.schemas:OpenLabels", prefix=OPEN_PREFIX)


class OpenMetaLabels(LLMTransform):
    """Asks an LLM for open meta-labels of each English item (domain, principle, materials, action)."""

    name: ClassVar[str] = "open_labels"

    prompt: PromptRef = Field(default_factory=lambda: PromptRef(id="pindic/open_labels"))
    variables: dict[str, str] = Field(default_factory=lambda: {"goal": "goal", "sol1": "sol1", "sol2": "sol2"})
    output: OutputSpec = Field(default_factory=_open_output)
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=160, temperature=0.0))
    on_invalid: Literal["drop", "retry"] = Field("retry", description="Invalid JSON or extra keys: retried once, "
                                                 "then dropped as invalid_output with the raw reply kept.")


class LabelRowsSource(SourceStage):
    """Distinct open labels (lower-cased, spaces squeezed) per category, with how many items used each."""

    name: ClassVar[str] = "label_rows"
    path: str = Field(..., description="Curated folder of the open-labelling run.")

    def rows(self) -> pa.Table:
        table = read_table(Path(self.path))
        counts: Counter[tuple[str, str]] = Counter()
        for cat in CATEGORIES:
            col = OPEN_PREFIX + COLUMN[cat]
            for labels in table.column(col).to_pylist():
                for label in {normalise_label(x) for x in labels or [] if normalise_label(x)}:
                    counts[(cat, label)] += 1
        keys = sorted(counts)
        return pa.table({C.ID: pa.array([f"{c}:{t}" for c, t in keys], pa.string()),
                         "category": pa.array([c for c, _ in keys], pa.string()),
                         "label_text": pa.array([t for _, t in keys], pa.string()),
                         "n_items": pa.array([counts[k] for k in keys], pa.int64())})

    def fingerprints(self) -> list[dict[str, Any]]:
        return [fingerprint_file(f) for f in parquet_files(Path(self.path))]


def normalise_label(text: Any) -> str:
    return re.sub(r"\s+", " ", str(text or "")).strip().strip(".").lower()


class NameClusters(LLMTransform):
    """Asks an LLM to name each cluster of open labels: the names become the open taxonomy's classes."""

    name: ClassVar[str] = "name_clusters"

    prompt: PromptRef = Field(default_factory=lambda: PromptRef(id="pindic/name_cluster"))
    variables: dict[str, str] = Field(default_factory=lambda: {"category": "category", "members": "members_text"})
    output: OutputSpec = Field(default_factory=lambda: JsonOutput(model="transforms.recipes.pindic.schemas:ClusterNames",
                                                                  prefix="candidate_"))
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=60, temperature=0.0))
    on_invalid: Literal["drop", "retry"] = "retry"


def classify_output(taxonomy: Taxonomy) -> JsonOutput:
    """One enum field per category: the reply must name one class of each list."""
    return JsonOutput(fields={COLUMN[c]: FieldSpec(type="str", choices=taxonomy.names(c)) for c in CATEGORIES})


class ClassifyItems(LLMTransform):
    """Classifies each English item into the taxonomy's closed classes (one label per category)."""

    name: ClassVar[str] = "classify_items"
    release_columns: ClassVar[tuple[str, ...]] = ("domain", "core_principle", "key_properties_materials", "action_type")

    prompt: PromptRef = Field(default_factory=lambda: PromptRef(id="pindic/classify"))
    variables: dict[str, str] = Field(default_factory=lambda: {"goal": "goal", "sol1": "sol1", "sol2": "sol2"})
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=120, temperature=0.0))
    on_invalid: Literal["drop", "retry"] = "retry"
    taxonomy_sha256: str = Field("", description="Fingerprint of the taxonomy file the classes come from.")
    taxonomy_path: str | None = Field(None, description="Taxonomy file whose classes the reply must name (a "
                                      "recipe sets it; `output` and `taxonomy_sha256` follow from the file).")

    @model_validator(mode="before")
    @classmethod
    def _classes_from_file(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("taxonomy_path"):
            from transforms.recipes.pindic.taxonomy import fingerprint, load_taxonomy

            path = data["taxonomy_path"]
            data = {**data, "output": classify_output(load_taxonomy(path)),
                    "taxonomy_sha256": fingerprint(path)["sha256"]}
        return data

    @classmethod
    def for_taxonomy(cls, taxonomy: Taxonomy, sha256: str, **kwargs: Any) -> ClassifyItems:
        return cls(output=classify_output(taxonomy), taxonomy_sha256=sha256, **kwargs)

    def row_variables(self, call: Any, batch: pa.Table) -> list[dict[str, Any]]:  # type: ignore[override]
        rows = super().row_variables(call, batch)
        out = self.output
        assert isinstance(out, JsonOutput) and out.fields
        classes = {c: out.fields[COLUMN[c]].choices for c in CATEGORIES}  # type: ignore[union-attr]
        return [{**r, "classes": classes} for r in rows]


class GenerateItems(LLMGenerate):
    """Writes localised items for a state from the exemplars of one label combination (an expand stage)."""

    name: ClassVar[str] = "generate_items"
    release_columns: ClassVar[tuple[str, ...]] = ("locale",)

    prompt: PromptRef = Field(default_factory=lambda: PromptRef(id="pindic/generate"))
    variables: dict[str, str] = Field(default_factory=lambda: {
        "locale": "locale_name", "domain": "domain", "core_principle": "core_principle",
        "key_properties_materials": "key_properties_materials", "action_type": "action_type",
        "n_items": "n_items", "exemplars": "exemplars_json"})
    output: OutputSpec = Field(default_factory=lambda: JsonOutput(
        model="transforms.recipes.pindic.schemas:GeneratedEdit", items=True))
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=700, temperature=0.8, seed=0))
    on_invalid: Literal["drop", "retry"] = "retry"


def _norm(text: Any) -> str:
    return re.sub(r"[\W_]+", " ", str(text or "").lower()).strip()


class ValidateDrops(DropReason):
    COPIES_EXEMPLAR = "copies_exemplar", "the item copies one of its exemplars"
    LABEL_NOT_BINARY = "label_not_binary", "the label is not 0 or 1"
    SAME_SOLUTIONS = "same_solutions", "the solutions are the same"
    GOAL_TOO_SHORT = "goal_too_short", "the goal is too short"
    SOLUTION_TOO_SHORT = "solution_too_short", "a solution is too short"


class ValidateGenerated(FilterStage[ValidateDrops]):
    """Two different solutions, label 0/1, enough words, and not a copy of an exemplar goal."""

    name: ClassVar[str] = "validate_items"
    reads: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "label", "exemplar_goals")

    min_goal_words: int = Field(4, ge=1, description="Shorter goals are `goal_too_short`.")
    min_solution_words: int = Field(3, ge=1, description="Shorter solutions are `solution_too_short`.")

    def reasons(self, batch: pa.Table) -> list[ValidateDrops | None]:
        cols = {c: batch.column(c).to_pylist() for c in self.reads}
        out: list[ValidateDrops | None] = []
        for goal, s1, s2, label, ex in zip(*(cols[c] for c in self.reads), strict=True):
            if label not in (0, 1):
                out.append(ValidateDrops.LABEL_NOT_BINARY)
            elif _norm(s1) == _norm(s2):
                out.append(ValidateDrops.SAME_SOLUTIONS)
            elif _norm(goal) in {_norm(g) for g in ex or []}:
                out.append(ValidateDrops.COPIES_EXEMPLAR)
            elif len(_norm(goal).split()) < self.min_goal_words:
                out.append(ValidateDrops.GOAL_TOO_SHORT)
            elif min(len(_norm(s1).split()), len(_norm(s2).split())) < self.min_solution_words:
                out.append(ValidateDrops.SOLUTION_TOO_SHORT)
            else:
                out.append(None)
        return out
