"""A release folder that is a Hugging Face Hub dataset repository as it stands.

    README.md                           YAML metadata (licence, languages, configs, features ...) + the card
    data/<config>/test-00000-of-00001.parquet   one config per language, split `test`
    lm_eval/                            lm-evaluation-harness tasks over those configs
    extras/                             the gate's side files (never data: only `configs` name data files)

Only benchmark data is published: `data_table` keeps the item columns and the provenance columns the
card declares (`DEFAULT_PROVENANCE`, or the recipe's `release.columns`), drops those with no value,
and replaces annotator names (Label Studio: e-mail addresses) with pseudonymous ids. `undeclared_columns`
is the gate's check on what was written. `card_metadata` builds the front matter; `check_card` parses a
README with huggingface_hub's DatasetCard and checks every field against the values the Hub documents,
offline (the Hub's own `validate()` posts the card to the Hub).
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from transforms.piqa.schema import ITEM_COLUMNS, REVIEW_COLUMNS

BENCHMARK_COLUMNS = ("id", "lang", "goal", "sol1", "sol2", "label")
ANNOTATOR_COLUMNS = ("review_annotators",)
# What each publishable column means (the card's column table): the benchmark's, then the optional item columns
# and the review columns from transforms/piqa/schema.py; a column not here is not publishable by default.
COLUMN_DOCS: dict[str, str] = {
    "id": "item id, stable across releases",
    "lang": "ISO 639 code of the item's language",
    "goal": "the goal or situation",
    "sol1": "the first candidate solution",
    "sol2": "the second candidate solution",
    "label": "the correct solution: 0 (sol1) or 1 (sol2)",
    "source": "where the item came from (source set or part of the recipe)",
    "is_cultural": "culturally specific to the language community (true), universal (false), unknown (null)",
    **{name: column.meaning for name, column in {**ITEM_COLUMNS, **REVIEW_COLUMNS}.items()},
}
DEFAULT_PROVENANCE = tuple(c for c in COLUMN_DOCS if c not in BENCHMARK_COLUMNS)
SPLIT = "test"  # an evaluation benchmark: everything is the test split
LABEL_NAMES = ("sol1", "sol2")
CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
TASK_CATEGORIES = ("multiple-choice",)
TASK_IDS = ("multiple-choice-qa",)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


class HubMetadataError(ValueError):
    """A value the Hub would not accept, named with its key."""


def _datasets_resource(name: str) -> Any:
    spec = importlib.util.find_spec("datasets")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("checking Hub metadata needs the `datasets` package: pip install -e '.[hub]'")
    path = Path(list(spec.submodule_search_locations)[0]) / "utils" / "resources" / name
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def hub_vocabulary() -> dict[str, frozenset[str]]:
    """The values the Hub documents for card metadata, from the lists `datasets` ships (read, not imported)."""
    creators = _datasets_resource("creators.json")
    return {"language": frozenset(_datasets_resource("languages.json")),
            "annotations_creators": frozenset(creators["annotations"]),
            "language_creators": frozenset(creators["language"]),
            "multilinguality": frozenset(_datasets_resource("multilingualities.json")),
            "size_categories": frozenset(_datasets_resource("size_categories.json"))}


def check_language(code: str, key: str = "lang") -> str:
    if code not in hub_vocabulary()["language"]:
        raise HubMetadataError(f"{key}: {code!r} is not an ISO 639-1/3 language code the Hub knows")
    return code


def check_config_name(name: str, key: str = "config") -> str:
    if not CONFIG_NAME.match(name) or name.startswith("."):
        raise HubMetadataError(f"{key}: {name!r} is not a valid Hub config name (letters, digits, '_', '-', '.', "
                               "at most 64, starting with a letter or digit)")
    return name


def size_category(n: int) -> str:
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return name
    return "1M<n<10M" if n < 10_000_000 else "10M<n<100M"


# -- the data ------------------------------------------------------------------------------------------------
def _has_values(table: pa.Table, column: str) -> bool:
    return column in table.column_names and table.column(column).null_count < table.num_rows


def declared_columns(table: pa.Table, provenance: list[str] | None) -> list[str]:
    """The release's data columns: the benchmark's, then the declared provenance columns that hold values.
    An explicitly declared column the table lacks is an error (raised before anything is written)."""
    if provenance is not None:
        missing = [c for c in provenance if c not in table.column_names]
        if missing:
            raise HubMetadataError(f"release.columns: {missing} declared but not columns of the items "
                                   f"(they have {sorted(table.column_names)})")
    wanted = DEFAULT_PROVENANCE if provenance is None else tuple(provenance)
    return [*[c for c in BENCHMARK_COLUMNS if c in table.column_names],
            *[c for c in wanted if c not in BENCHMARK_COLUMNS and _has_values(table, c)]]


def pseudonymise(table: pa.Table) -> pa.Table:
    """Annotator names → `annotator-<n>`, numbered by first appearance in the table (pseudonymous, stable)."""
    for name in ANNOTATOR_COLUMNS:
        if name not in table.column_names:
            continue
        ids: dict[str, str] = {}
        values: list[Any] = []
        for cell in table.column(name).to_pylist():
            if cell is None:
                values.append(None)
                continue
            cells = cell if isinstance(cell, list) else [cell]
            mapped = [None if a is None else ids.setdefault(str(a), f"annotator-{len(ids) + 1}") for a in cells]
            values.append(mapped if isinstance(cell, list) else mapped[0])
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pa.array(values, table.schema.field(name).type))
    return table


def data_table(table: pa.Table, provenance: list[str] | None = None) -> pa.Table:
    """What the release publishes: the declared columns, label as int64, annotators pseudonymised."""
    out = pseudonymise(table.select(declared_columns(table, provenance)))
    if "label" in out.column_names and out.schema.field("label").type != pa.int64():
        out = out.set_column(out.schema.get_field_index("label"), "label", pc.cast(out.column("label"), pa.int64()))
    return out


def undeclared_columns(table: pa.Table, provenance: list[str] | None) -> list[str]:
    """The gate's check on the written data: one line per column the card does not declare, and per
    annotator column that still holds an e-mail address."""
    allowed = set(BENCHMARK_COLUMNS) | set(DEFAULT_PROVENANCE if provenance is None else provenance)
    out = [f"data column {c!r} is not declared by the card (release.columns); it belongs in the lake"
           for c in table.column_names if c not in allowed]
    for name in ANNOTATOR_COLUMNS:
        if name in table.column_names:
            flat = pc.list_flatten(table.column(name)) if pa.types.is_list(table.schema.field(name).type) \
                else table.column(name)
            if any(EMAIL.search(str(v)) for v in flat.to_pylist() if v is not None):
                out.append(f"data column {name!r} holds e-mail addresses; only pseudonymous ids may be published")
    return out


def split_configs(table: pa.Table) -> dict[str, pa.Table]:
    """One table per language (the config), rows in the order of `table`."""
    langs = table.column("lang").to_pylist()
    out = {}
    for lang in dict.fromkeys(str(x) for x in langs):
        out[check_config_name(lang, f"config (lang {lang!r})")] = table.filter(pc.equal(table.column("lang"), lang))
    return dict(sorted(out.items()))


def data_path(config: str) -> str:
    return f"data/{config}/{SPLIT}-00000-of-00001.parquet"


def _dtype(t: pa.DataType) -> Any:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"list": _dtype(t.value_type)}
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        return "string"
    return {"bool": "bool"}.get(str(t), str(t))


def features_yaml(schema: pa.Schema) -> list[dict[str, Any]]:
    """`dataset_info.features` as the Hub writes it: `label` a ClassLabel (0 sol1, 1 sol2)."""
    out: list[dict[str, Any]] = []
    for field in schema:
        if field.name == "label":
            out.append({"name": "label", "dtype": {"class_label": {"names": {str(i): n for i, n in
                                                                           enumerate(LABEL_NAMES)}}}})
            continue
        dtype = _dtype(field.type)
        out.append({"name": field.name, **({"list": dtype["list"]} if isinstance(dtype, dict) else {"dtype": dtype})})
    return out


# -- the card's metadata -------------------------------------------------------------------------------------
def annotations_creators(review: dict[str, Any] | None, people: str = "expert-generated") -> str:
    """From how the review was done: people → `people` (expert-generated or crowdsourced), LLM annotators →
    machine-generated, no review → found (the labels came with the source)."""
    if not review:
        return "found"
    return people if review.get("people") else "machine-generated"


def card_metadata(configs: dict[str, pa.Table], *, licence: str, pretty_name: str, review: dict[str, Any] | None,
                  source_ids: list[str], people: str = "expert-generated") -> dict[str, Any]:
    """The README's YAML front matter (a dict in the order the Hub's own cards use)."""
    langs = sorted({str(x) for t in configs.values() for x in t.column("lang").to_pylist()})
    for lang in langs:
        check_language(lang)
    n = sum(t.num_rows for t in configs.values())
    return {
        "license": licence,
        "language": langs,
        "multilinguality": "multilingual" if len(langs) > 1 else "monolingual",
        "task_categories": list(TASK_CATEGORIES),
        "task_ids": list(TASK_IDS),
        "size_categories": [size_category(n)],
        "pretty_name": pretty_name,
        "source_datasets": [f"extended|{s}" for s in source_ids] or ["original"],
        "annotations_creators": [annotations_creators(review, people)],
        "language_creators": ["found" if source_ids else "expert-generated"],
        "configs": [{"config_name": c, "data_files": [{"split": SPLIT, "path": data_path(c)}]} for c in configs],
        "dataset_info": [{"config_name": c, "features": features_yaml(t.schema),
                          "splits": [{"name": SPLIT, "num_bytes": t.nbytes, "num_examples": t.num_rows}]} for c, t in configs.items()],
    }


def front_matter(metadata: dict[str, Any]) -> str:
    from huggingface_hub import DatasetCardData

    return "---\n" + DatasetCardData(**metadata).to_yaml() + "\n---\n"


def check_card(folder: str | Path) -> list[str]:
    """The offline card check: parse README.md with huggingface_hub, check each field against the Hub's
    documented values and every config's data files against the folder. Returns problems ([] = fine)."""
    from huggingface_hub import DatasetCard

    folder = Path(folder)
    problems: list[str] = []
    card = DatasetCard.load(folder / "README.md")
    data = card.data.to_dict()
    vocab = hub_vocabulary()
    from transforms.release.licences import HUB_LICENCES

    def as_list(key: str) -> list[Any]:
        value = data.get(key)
        return value if isinstance(value, list) else ([] if value is None else [value])

    if data.get("license") not in HUB_LICENCES:
        problems.append(f"license: {data.get('license')!r} is not a licence id the Hub knows")
    for key in ("language", "annotations_creators", "language_creators", "multilinguality", "size_categories"):
        values = as_list(key)
        if not values:
            problems.append(f"{key}: missing")
        problems += [f"{key}: {v!r} is not one of the Hub's values" for v in values if v not in vocab[key]]
    for key, allowed in (("task_categories", TASK_CATEGORIES), ("task_ids", TASK_IDS)):
        values = as_list(key)
        if not values or any(v not in allowed for v in values):
            problems.append(f"{key}: {values} (a PIQA-style benchmark is {list(allowed)})")
    if not data.get("pretty_name"):
        problems.append("pretty_name: missing")
    sources = as_list("source_datasets")
    if not sources or any(not (s == "original" or str(s).startswith("extended|")) for s in sources):
        problems.append(f"source_datasets: {sources} (each 'original' or 'extended|<dataset id>')")
    configs = as_list("configs")
    if not configs:
        problems.append("configs: missing")
    infos = {i.get("config_name"): i for i in as_list("dataset_info")}
    for cfg in configs:
        name = str(cfg.get("config_name"))
        try:
            check_config_name(name, "configs.config_name")
        except HubMetadataError as err:
            problems.append(str(err))
        for entry in cfg.get("data_files") or []:
            if not list(folder.glob(str(entry.get("path")))):
                problems.append(f"configs.{name}.data_files: {entry.get('path')} matches no file")
        features = (infos.get(name) or {}).get("features") or []
        label = next((f for f in features if f.get("name") == "label"), None)
        if not label or "class_label" not in (label.get("dtype") or {}):
            problems.append(f"dataset_info.{name}.features: label is not a ClassLabel")
    return problems
