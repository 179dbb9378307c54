"""A recipe's quality suite as configuration: `expectations/suites/<recipe>.yaml` → `SuiteConfig`.

A new language or recipe is a new YAML file (usually `extends: generic` plus a few lines), not code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from transforms.embed.base import EmbedderConfig
from transforms.piqa.degenerate import DegenerateText

SUITES_DIR = Path(__file__).resolve().parent / "suites"


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabelBalance(_Rule):
    min: float = Field(0.45, ge=0, le=1, description="Lowest share of label 1 allowed.")
    max: float = Field(0.55, ge=0, le=1, description="Highest share of label 1 allowed.")


class MinimalPair(_Rule):
    max_word_edits: int = Field(2, ge=0, description="Word-level edit distance sol1↔sol2 allowed.")
    max_char_edits: int = Field(6, ge=0, description="Character-level distance for languages without "
                                "spaces (ja, zh, th): a proxy for ~2 words.")
    unit: Literal["auto", "word", "char"] = Field("auto", description="auto: words, chars for no-space text.")
    segmenters: dict[str, Literal["fugashi"]] = Field(
        default_factory=dict, description="Languages whose words come from a morphological analyser instead "
        "of spaces or characters: {ja: fugashi} counts Japanese words as the j-piqa job does "
        "(transforms/piqa/japanese_words.py); max_word_edits then applies to them.")
    mostly: float = Field(1.0, gt=0, le=1, description="Share of rows that must pass.")


class NearDuplicates(_Rule):
    column: str = Field("goal", description="Text column compared.")
    threshold: float = Field(0.85, gt=0, le=1, description="Cosine at or above which goals are duplicates.")
    representation: Literal["embedder", "char-ngrams"] = Field(
        "embedder", description="Sentence embeddings, or model-free character n-gram TF-IDF (any script).")
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)


class LanguagePurity(_Rule):
    min_share: float = Field(0.9, gt=0, le=1, description="Share of rows whose texts are all in the language.")
    columns: list[str] = Field(default_factory=lambda: ["goal", "sol1", "sol2"])
    method: Literal["auto", "fasttext", "script"] = Field(
        "auto", description="auto: a Unicode script check for `script_languages`, fastText lid.176 otherwise.")
    script_languages: list[str] = Field(default_factory=lambda: ["kn", "ml"])
    min_script_share: float = Field(0.8, gt=0, le=1, description="Letters in the script, for the script check.")


class LengthBounds(_Rule):
    min_goal_words: int | None = Field(None, ge=0)
    max_goal_words: int | None = Field(None, ge=0)
    min_solution_words: int | None = Field(None, ge=0)
    max_solution_words: int | None = Field(None, ge=0)
    min_goal_plus_solution_words: int | None = Field(
        None, ge=0, description="Goal + the shorter solution, in words (characters for ja/zh/th).")
    mostly: float = Field(1.0, gt=0, le=1)


class SuiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    extends: str | None = Field(None, description="Another suite this one overrides (merged key by key).")
    languages: list[str] | None = Field(None, description="Allowed values of `lang`; null: any.")
    required_columns: list[str] = Field(
        default_factory=lambda: ["id", "lang", "goal", "sol1", "sol2", "label"])
    label_balance: LabelBalance | None = Field(default_factory=LabelBalance)
    minimal_pair: MinimalPair | None = None
    exact_duplicates: bool = Field(True, description="No two rows with the same goal and solution pair.")
    near_duplicates: NearDuplicates | None = Field(default_factory=NearDuplicates)
    language_purity: LanguagePurity | None = Field(default_factory=LanguagePurity)
    length: LengthBounds | None = Field(default_factory=LengthBounds)
    degenerate: DegenerateText | None = Field(
        default_factory=DegenerateText, description="Goals and solutions that are one word repeated or mostly "
        "one repeated n-gram fail (transforms/piqa/degenerate.py).")
    solution_pattern: str | None = Field(None, description="Regex every solution must match (J-PIQA: '。$').")
    require_provenance: bool = Field(
        False, description="Generated rows (non-null `model`) must carry prompt_id and prompt_version.")


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def suite_data(name: str, suites_dir: Path = SUITES_DIR) -> dict[str, Any]:
    path = suites_dir / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in suites_dir.glob("*.yaml"))
        raise ValueError(f"no expectation suite {name!r} (looked for {path}); suites: {known}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    parent = data.get("extends")
    if parent:
        data = _merge(suite_data(parent, suites_dir), data)
    return data


def load_suite(name: str, overrides: dict[str, Any] | None = None, suites_dir: Path = SUITES_DIR) -> SuiteConfig:
    """The suite `<name>.yaml`, its `extends` chain merged underneath, `overrides` on top."""
    data = suite_data(name, suites_dir)
    data["name"] = name
    return SuiteConfig.model_validate(_merge(data, overrides or {}))
