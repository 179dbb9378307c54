"""The config base of the tools around recipes (`piqaforge run release|evaluate`): the fields every tool job has."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """A configuration problem, reported to the user as one readable message."""


class JobConfig(BaseModel):
    """Fields every job has."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(..., description="Dataset name: the folder under each lake zone.")
    lake: str = Field("lake", description="Root directory of the Parquet lake.")
    ray_address: str | None = Field(None, description="Ray address to join; unset starts Ray locally "
                                    "(or joins the cluster when run under `ray job submit`).")
    num_cpus: int | None = Field(None, description="CPUs for a local Ray instance (default: all).")
    secrets: list[str] = Field(default_factory=list, description="Environment variables (names, e.g. "
                               "OPENAI_API_KEY) forwarded to every stage's workers; values are never recorded "
                               "(docs/secrets.md). A stage can name its own in `resources.secrets`.")
