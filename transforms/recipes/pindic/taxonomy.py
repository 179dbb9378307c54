"""The closed PIndicQA taxonomy as data: category → classes, each with its member labels and candidates.

The default is `prompts/pindic/taxonomy.yaml`: the paper's closed taxonomy, class names exactly as
published (19/32/39/32). A run also writes a *draft* in the same format from its clusters and their LLM-proposed
names (`draft_from_clusters`); a person edits it and hands it back with `taxonomy_path`, and the
job reads it as a fingerprinted input (`fingerprint`): the classification stage's config carries the
class lists, so an edited taxonomy re-classifies and a resumed run with the same file does not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

CATEGORIES = ("Domain", "Core_Principle", "Key_Properties_Materials", "Action_Type")
# paper key → snake_case column of the item schema (transforms/piqa/schema.py)
COLUMN = {"Domain": "domain", "Core_Principle": "core_principle",
          "Key_Properties_Materials": "key_properties_materials", "Action_Type": "action_type"}
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "prompts" / "pindic" / "taxonomy.yaml"


class TaxonomyError(ValueError):
    """A taxonomy file that cannot be used (missing category, duplicate class, empty list)."""


class TaxonomyClass(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, description="The class name items are labelled with.")
    members: list[str] = Field(default_factory=list, description="Open labels this class gathers (draft).")
    candidates: list[str] = Field(default_factory=list, description="Names an LLM proposed (draft).")


class Taxonomy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = "pindic/taxonomy"
    version: str = "1"
    status: str = Field("edited", description="reconstructed | draft | edited | published.")
    citation: str = ""
    expected_counts: dict[str, int] = Field(default_factory=dict, description="Classes per category a "
                                            "published list has (checked when given).")
    categories: dict[str, list[TaxonomyClass]]

    @model_validator(mode="after")
    def _check(self) -> Taxonomy:
        missing = [c for c in CATEGORIES if c not in self.categories]
        if missing:
            raise TaxonomyError(f"taxonomy lacks categories {missing}; it needs {list(CATEGORIES)}")
        for cat, classes in self.categories.items():
            names = [c.name.strip() for c in classes]
            if not names:
                raise TaxonomyError(f"taxonomy category {cat!r} has no classes")
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise TaxonomyError(f"taxonomy category {cat!r} repeats class names {dup}")
            want = self.expected_counts.get(cat)
            if want is not None and want != len(names):
                raise TaxonomyError(f"taxonomy category {cat!r} has {len(names)} classes, expected {want}")
        return self

    def names(self, category: str) -> list[str]:
        return [c.name.strip() for c in self.categories[category]]

    def counts(self) -> dict[str, int]:
        return {c: len(self.categories[c]) for c in CATEGORIES}


def load_taxonomy(path: str | Path | None = None) -> Taxonomy:
    p = Path(path) if path else DEFAULT_PATH
    if not p.exists():
        raise TaxonomyError(f"taxonomy file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise TaxonomyError(f"taxonomy file {p} is not valid YAML: {err}") from err
    try:
        return Taxonomy.model_validate(data)
    except TaxonomyError:
        raise
    except ValueError as err:
        raise TaxonomyError(f"taxonomy file {p}: {err}") from err


def fingerprint(path: str | Path | None = None) -> dict[str, Any]:
    p = Path(path) if path else DEFAULT_PATH
    return {"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size}


def draft_from_clusters(clusters: list[dict[str, Any]], version: str) -> Taxonomy:
    """A draft taxonomy from named clusters: rows with category, members and candidate names.

    The first candidate not already used in the category becomes the class name (a person is meant
    to edit these); a cluster without a usable candidate is named after its most used member."""
    cats: dict[str, list[TaxonomyClass]] = {c: [] for c in CATEGORIES}
    for row in sorted(clusters, key=lambda r: (r["category"], r.get("cluster", 0))):
        cat = row["category"]
        if cat not in cats:
            continue
        used = {c.name.lower() for c in cats[cat]}
        cands = [str(c).strip() for c in (row.get("candidates") or []) if str(c).strip()]
        members = [str(m) for m in row.get("members") or []]
        pool = [*cands, *members, f"{cat} cluster {row.get('cluster', len(cats[cat]))}"]
        name = next((n for n in pool if n.lower() not in used), pool[-1])
        cats[cat].append(TaxonomyClass(name=name, members=members, candidates=cands))
    for cat in CATEGORIES:
        if not cats[cat]:
            cats[cat].append(TaxonomyClass(name=f"Other {cat.replace('_', ' ')}"))
    return Taxonomy(version=version, status="draft", categories=cats,
                    citation="draft made by piqaforge from this run's clustered open labels; edit it and "
                    "pass it back with --set taxonomy_path=FILE")


def write_taxonomy(taxonomy: Taxonomy, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ("# PIndicQA taxonomy draft written by `piqaforge run pindic` from its clustered open labels.\n"
              "# Edit the class names (keep members/candidates as notes or delete them), then run again with\n"
              "# --set taxonomy_path=<this file>. The run fingerprints the file you pass.\n")
    body = yaml.safe_dump(taxonomy.model_dump(), allow_unicode=True, sort_keys=False, width=110)
    path.write_text(header + body, encoding="utf-8")
    return path
