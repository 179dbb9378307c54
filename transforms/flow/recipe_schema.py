"""The recipe's schema: the pydantic models a recipe file validates against (docs/recipes.md), the `when`
conditions of runs and stage entries, and the error every check of a recipe raises. Loading, overrides and
interpolation are transforms/flow/recipe.py; the graph checks transforms/flow/recipe_graph.py; the
whole-recipe checks recipe_check.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from transforms.release.licences import SourceSpec


class RecipeError(ValueError):
    """A recipe file that cannot run: naming the file, the key and what is wrong; with several problems,
    one line each (`problems`), the first also as `key` / `problem`."""

    def __init__(self, path: str | Path, key: str, problem: str,
                 more: list[tuple[str, str]] | None = None):
        self.path, self.key, self.problem = str(path), key, problem
        self.problems = [(key, problem), *(more or [])]
        if len(self.problems) == 1:
            super().__init__(f"{path}: {key}: {problem}")
        else:
            lines = "\n".join(f"  {k}: {p}" for k, p in self.problems)
            super().__init__(f"{path}: {len(self.problems)} problems (all of them; nothing has run):\n{lines}")

    @classmethod
    def many(cls, path: str | Path, problems: list[tuple[str, str]]) -> RecipeError:
        return cls(path, problems[0][0], problems[0][1], problems[1:])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


When = str | bool | list[str]


def conditions(when: When) -> list[str]:
    """`when` as a list of conditions (`name`, `!name`, `name=value`); true/false give none / one false."""
    if isinstance(when, bool):
        return [] if when else ["!__always__"]
    return [when] if isinstance(when, str) else list(when)


def cond_param(cond: str) -> str:
    return cond.lstrip("!").split("=", 1)[0].strip() if cond != "!__always__" else "__always__"


def holds(when: When, params: dict[str, Any]) -> bool:
    """Whether every condition of `when` holds for these params."""
    for cond in conditions(when):
        if cond == "!__always__":
            return False
        name = cond_param(cond)
        if "=" in cond:  # `name=value`, or `!name=value` (any other value)
            if (str(params.get(name)) == cond.split("=", 1)[1].strip()) == cond.startswith("!"):
                return False
        elif bool(params.get(name)) == cond.startswith("!"):
            return False
    return True


# keys of a stage entry the orchestrator reads itself (every other key is a field of the stage)
ENTRY_KEYS = ("stage", "when", "as")


class StageEntry(BaseModel):
    """One entry of a run's `source` or `stages`: which stage, when it runs, the name `--set` and error
    messages call it by, and the stage's fields (every other key, checked against the stage's class at load:
    `piqaforge stages NAME` lists them). It dumps back to the mapping it was read from."""

    model_config = ConfigDict(extra="allow")

    stage: str = Field(..., description="A registered stage name (`piqaforge stages`) or 'module:Class'.")
    when: When = Field(True, description="Build the stage only when this param holds (`name`, `!name`, "
                       "`name=value`; a list: all of them).")
    as_name: str | None = Field(None, alias="as", description="The entry's name in `--set runs.<run>.stages.<as>.` "
                              "and in messages (default: the stage's name, `#2` for its second use in a run).")

    @model_validator(mode="before")
    @classmethod
    def _a_mapping_with_a_stage(cls, data: Any) -> Any:
        if isinstance(data, StageEntry):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"a stage entry is a mapping with `stage: <registered name or module:Class>`; "
                             f"got {data!r}")
        if not isinstance(data.get("stage"), str):
            raise ValueError("needs `stage: <registered name or module:Class>` (`piqaforge stages` lists them)")
        return data

    @property
    def fields(self) -> dict[str, Any]:
        """The stage's fields as the recipe gives them (the entry's own keys left out)."""
        return dict(self.__pydantic_extra__ or {})

    @property
    def entry_name(self) -> str:
        """What the entry is called: its `as`, else its stage's name."""
        return self.as_name or self.stage

    def __getitem__(self, key: str) -> Any:
        """`entry["stage"]`, `entry["threshold"]`: the mapping view code written against the untyped entries
        used; kept one release (read `.stage`, `.when`, `.fields`)."""
        return self.model_dump()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The mapping view's `get` (one release; see `__getitem__`)."""
        return self.model_dump().get(key, default)

    def wanted(self, params: dict[str, Any]) -> bool:
        """Whether the stage is built for these params (its `when`): the one filter every reader uses."""
        return holds(self.when, params)

    @model_serializer
    def _as_read(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stage": self.stage}
        if "when" in self.model_fields_set:
            out["when"] = self.when
        if self.as_name is not None:
            out["as"] = self.as_name
        return {**out, **self.fields}


class Language(_Strict):
    code: str = Field(..., description="ISO 639-1 (or -3) code of the benchmark's language.")
    name: str | None = Field(None, description="Its English name, for cards and prompts.")
    script: str | None = Field(None, description="Language code whose script letters the items use (default: "
                               "`code`); transforms/text/textcheck.py lists the scripts it can check.")


class ReviewSpec(_Strict):
    of: str = Field(..., description="The run whose kept items are reviewed.")
    mode: Literal["export", "auto", "none"] = Field("export", description="export: write a batch for people "
                                                    "and stop (awaiting_review); auto: LLM annotators fill it; "
                                                    "none: pass the items through unreviewed.")
    to: Literal["csv", "labelstudio"] = Field("csv", description="Batch format for people.")
    annotators: int = Field(2, ge=1, description="Annotators per item.")
    consensus: dict[str, Any] = Field(default_factory=lambda: {"rule": "unanimous"},
                                      description="ConsensusRule (transforms/review/consensus.py).")
    limit: int | None = Field(None, ge=1, description="Export at most this many items.")
    auto: dict[str, Any] = Field(default_factory=dict, description="AutoReviewConfig for mode auto; its "
                                 "engines default to the profile's `annotators`.")
    guidelines: str | None = Field(None, description="A Markdown file copied into the batch for reviewers.")
    context: str | None = Field(None, description="'module:function(lake, batch)' writing side files "
                                "(context.csv ...) into the batch folder.")


class CardSection(_Strict):
    title: str
    make: str = Field(..., description="'module:function(table, runs, **args) -> markdown': the section's text "
                      "from the released table and the recipe's run manifests (by run name).")
    args: dict[str, Any] = Field(default_factory=dict)


class ReleaseFile(_Strict):
    name: str = Field(..., description="File name inside the release folder.")
    make: str = Field(..., description="'module:function(table) -> str': the file's text from the released table.")


class ReleaseSpec(_Strict):
    of: str = Field(..., description="The run whose kept items are released.")
    suite: str = Field("generic", description="Suite in expectations/suites/.")
    suite_overrides: dict[str, Any] = Field(default_factory=dict)
    version: str | None = Field(None, description="Release version (default: today's UTC date).")
    audit: bool = Field(True, description="Run the artifact audit; a flagged audit, or one that cannot run, "
                        "refuses the release. false publishes without it and the card says so.")

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return None if value is None else str(value)  # `--version 2` arrives as a YAML number
    audit_bound: float = Field(0.6, gt=0, lt=1, description="Solution-only / goal-only baseline accuracy "
                               "(lower confidence bound) above which the release is refused.")
    card: list[CardSection] = Field(default_factory=list, description="Recipe sections of the dataset card.")
    sources: list[str | SourceSpec] = Field(default_factory=list, description="What the items were made from: "
                                            "prose for the card, or {name, licence, url, hub_id, attribution, "
                                            "citation} checked against the release's licence. The sources of "
                                            "bundled files are found by themselves (lake/samples/licences.yaml).")
    licence: str | None = Field(None, description="The release's licence (SPDX or Hub id); default: the recipe's "
                                "`licence`. A release without one is refused before anything is written.")
    columns: list[str] | None = Field(None, description="Provenance columns published beside the benchmark's "
                                      "(default: transforms.release.hub.DEFAULT_PROVENANCE); nothing else is.")
    repo_id: str | None = Field(None, description="The Hub dataset id (ORG/NAME) the release will be published "
                                "as; its lm-eval tasks then read it from the Hub.")
    pretty_name: str | None = Field(None, description="The card's pretty_name (default: the dataset name).")
    annotators: Literal["expert-generated", "crowdsourced"] = Field(
        "expert-generated", description="annotations_creators when people reviewed the items.")
    files: list[ReleaseFile] = Field(default_factory=list, description="Recipe files written into the release "
                                     "with the rest, before RELEASED (e.g. the paper's appendix columns).")


class EvaluateSpec(_Strict):
    of: str = Field(..., description="The release run to evaluate.")
    models: str | list[str] | dict[str, Any] = Field("@evaluated", description="'@evaluated' (the profile's), "
                                                     "names of the profile's evaluated models, or name -> engine.")
    prompts: dict[str, str] = Field(default_factory=dict)
    limit: int | None = Field(None, ge=1, description="Fixed-seed subset of items (generation and log-lik).")
    options: dict[str, Any] = Field(default_factory=dict, description="Other fields of the evaluate job.")


class RoundsSpec(_Strict):
    requests: str = Field(..., description="'module:function(k, deficits, accepted, **args) -> rows': round "
                          "k's request rows.")
    args: dict[str, Any] = Field(default_factory=dict)
    group_column: str = "category"
    quotas: dict[str, int] = Field(..., description="Accepted items wanted per group.")
    max_rounds: int = Field(3, ge=1)
    patience: int = Field(1, ge=1, description="Stop after this many rounds in a row that accept nothing.")


class RunReport(_Strict):
    name: str = Field(..., description="File name (runs/<run id>/<name>.json).")
    make: str = Field(..., description="'module:function(manifest, lake, **args) -> dict' (a `runs` parameter gets "
                      "the runs so far, by name).")
    args: dict[str, Any] = Field(default_factory=dict)
    html: str | None = Field(None, description="'module:function(figures) -> html': the figures as a section of "
                             "the run's report (runs/<run id>/<name>.section.html).")


class RunSpec(_Strict):
    name: str = Field(..., description="Unique in the recipe; the run id is <recipe run id>-<name>.")
    parents: list[str] = Field(default_factory=list, description="Runs whose kept rows this run reads.")
    source: StageEntry | None = Field(None, description="The stage that reads the run's input.")
    stages: list[StageEntry] = Field(default_factory=list, description="The run's stages, in order.")
    rounds: RoundsSpec | None = None
    review: ReviewSpec | None = None
    release: ReleaseSpec | None = None
    evaluate: EvaluateSpec | None = None
    when: When = Field(True, description="Run only when this param is true (`name`, `!name`, "
                                         "`name=value`; a list: all of them); a run switched off switches off "
                                         "every run that reads it.")
    reports: list[RunReport] = Field(default_factory=list, description="Figures measured on the finished run, "
                                     "each written to runs/<run id>/<name>.json (the report shows them).")

    @model_validator(mode="after")
    def _one_kind(self) -> RunSpec:
        kinds = [k for k in ("source", "rounds", "review", "release", "evaluate") if getattr(self, k) is not None]
        if len(kinds) > 1:
            raise ValueError(f"a run is one of source, rounds, review, release, evaluate; this one has {kinds}")
        if not kinds and not self.parents:
            raise ValueError("a run needs a source, parents, rounds, review, release or evaluate")
        if kinds and kinds[0] in ("review", "release", "evaluate") and self.stages:
            raise ValueError(f"a {kinds[0]} run has no stages of its own")
        return self

    @property
    def kind(self) -> str:
        for k in ("source", "rounds", "review", "release", "evaluate"):
            if getattr(self, k) is not None:
                return k
        return "stages"

    def upstream(self) -> list[str]:
        """The runs this one reads."""
        spec = self.review or self.release or self.evaluate
        return [spec.of] if spec is not None else list(self.parents)


class Recipe(_Strict):
    recipe: str = Field(..., description="The recipe's name.")
    description: str = Field(..., description="One line for `piqaforge recipes`.")
    dataset: str = Field(..., description="Lake folder of every run.")
    language: Language
    licence: str | None = Field(None, description="SPDX id of the release's licence.")
    engines: str = Field("local", description="Engine profile (jobs/engines.yaml or engine_profiles).")
    engine_profiles: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Profiles of this "
                                                       "recipe, merged over jobs/engines.yaml's.")
    data: dict[str, str] = Field(default_factory=dict, description="Named data files (relative: to the working "
                                 "directory, else the recipe file, else the repository).")
    params: dict[str, Any] = Field(default_factory=dict, description="Values `--set NAME=VALUE` changes.")
    runs: list[RunSpec] = Field(..., min_length=1)
    num_cpus: int | None = Field(None, description="CPUs of a local Ray instance (default: all).")
    fuse: bool = Field(True, description="Run neighbouring cheap row-wise stages (normalize, length_filter, langid) "
                       "as one pass over their input; false runs every stage alone (docs/stages.md, Fused stages).")
    ray_address: str | None = None
    secrets: list[str] = Field(default_factory=list, description="Environment variables forwarded to workers.")
    path: str = Field("", description="Where the recipe was read from (set by the loader).")

    def run(self, name: str) -> RunSpec:
        for spec in self.runs:
            if spec.name == name:
                return spec
        raise KeyError(name)
