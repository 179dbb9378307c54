"""Quota rounds: generate until each group has N accepted items, at most R rounds.

Each round is an ordinary resumable run `<run>-r<k>` whose source holds the requests for the
remaining deficits; the chain ends with `QuotaCap`, which keeps at most the deficit per group
(the surplus is dropped as `quota_full`, so nothing vanishes). The rounds stop when every quota
is met (`quotas_met`), `patience` rounds in a row accept nothing (`no_progress`; patience 1 stops at
the first such round, a higher one gives a sampling generator more draws before giving up) or R
rounds ran (`max_rounds`); the umbrella run `<run>` then unions the rounds' outputs (its parents are
the rounds) and its manifest says why it stopped (`stop_reason`, `stop_detail`), with requested and
accepted counts per group and round.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.core.drop_reasons import DropReason
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.manifest import RunManifest, fingerprint_file
from transforms.core.stage import GlobalStage, Stage

log = logging.getLogger("piqaforge")


class QuotaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_column: str = Field("locale", description="Column whose values have quotas.")
    quotas: dict[str, int] = Field(..., description="Group → accepted items wanted.")
    max_rounds: int = Field(4, ge=1, description="Give up after this many rounds.")
    patience: int = Field(1, ge=1, description="Stop (`no_progress`) after this many consecutive rounds that "
                          "accept no new row; 1 stops at the first empty round.")


class QuotaDrops(DropReason):
    NO_QUOTA_FOR_GROUP = "no_quota_for_group", "its group has no quota"
    QUOTA_FULL = "quota_full", "its group's quota is already full"


class QuotaCap(GlobalStage[QuotaDrops]):
    """Keep at most `caps[group]` rows per group, in id order; the rest are dropped as `quota_full`."""

    name: ClassVar[str] = "quota_cap"
    group_column: str = "locale"
    caps: dict[str, int] = Field(default_factory=dict)

    def process_table(self, table: pa.Table) -> pa.Table:
        groups = table.column(self.group_column).cast(pa.string()).to_pylist()
        ids = table.column(C.ID).cast(pa.string()).to_pylist()
        taken: Counter[str] = Counter()
        reasons: list[QuotaDrops | None] = [None] * table.num_rows
        for i in sorted(range(table.num_rows), key=lambda i: ids[i]):
            g = groups[i]
            if g is None or g not in self.caps:
                reasons[i] = QuotaDrops.NO_QUOTA_FOR_GROUP
            elif taken[g] >= self.caps[g]:
                reasons[i] = QuotaDrops.QUOTA_FULL
            else:
                taken[g] += 1
        return self.drop(table, reasons)


class UnionSource(SourceStage):
    """The curated rows of several runs, one table (the umbrella run of quota rounds)."""

    name: ClassVar[str] = "union"
    paths: list[str] = Field(..., description="Folders of Parquet files to union.")

    def rows(self) -> pa.Table:
        tables = [read_table(Path(p)) for p in self.paths if parquet_files(Path(p))]
        tables = [t.drop_columns([c for c in (C.STATUS,) if c in t.schema.names]) for t in tables if t.num_rows]
        if not tables:
            return pa.table({C.ID: pa.array([], pa.string())})
        return pa.concat_tables(tables, promote_options="permissive")

    def fingerprints(self) -> list[dict[str, Any]]:
        return [fingerprint_file(f) for p in self.paths for f in parquet_files(Path(p))]


RoundMaker = Callable[[int, dict[str, int], list[str]], tuple[SourceStage[Any], Sequence[Stage[Any]]]]


def accepted_counts(path: Path, group_column: str) -> Counter[str]:
    if not parquet_files(path):
        return Counter()
    table = read_table(path, columns=[group_column])
    return Counter(str(g) for g in table.column(0).to_pylist() if g is not None)


def run_quota_rounds(*, job: str, dataset: str, lake: Lake, run_id: str, quota: QuotaConfig,
                     make_round: RoundMaker, config: dict[str, Any], resume: bool = False,
                     parents: Sequence[str] = (), run: Callable[..., RunManifest] | None = None) -> RunManifest:
    """Run rounds until the quotas are met; returns the umbrella run's manifest.

    `make_round(k, deficits, accepted_paths)` returns the round's source (requests for the deficits)
    and stages (e.g. generate → validate → novelty against `accepted_paths`); QuotaCap is appended.
    """
    from transforms.core.runner import run_pipeline

    run = run or run_pipeline
    accepted: Counter[str] = Counter()
    outputs: list[str] = []
    rounds: list[dict[str, Any]] = []
    stop, detail, empty_streak = "max_rounds", f"{quota.max_rounds} round(s) ran", 0
    for k in range(1, quota.max_rounds + 1):
        deficits = {g: n - accepted[g] for g, n in quota.quotas.items() if n - accepted[g] > 0}
        if not deficits:
            stop, detail = "quotas_met", f"every quota met after {k - 1} round(s)"
            break
        source, stages = make_round(k, deficits, list(outputs))
        round_id = f"{run_id}-r{k}"
        cap = QuotaCap(group_column=quota.group_column, caps=deficits)
        manifest = run(job=f"{job}-round", dataset=dataset, source=source, stages=[*stages, cap], lake=lake,
                       config={**config, "round": k, "deficits": deficits}, run_id=round_id, resume=resume,
                       parents=[*([rounds[-1]["run_id"]] if rounds else parents)])
        curated = Path(manifest.outputs["curated"])
        got = accepted_counts(curated, quota.group_column)
        accepted.update(got)
        outputs.append(str(curated))
        rounds.append({"round": k, "run_id": round_id, "requested": deficits, "accepted": dict(got),
                       "accepted_total": dict(accepted)})
        log.info("%s round %d: asked for %s, accepted %s", job, k, deficits, dict(got))
        empty_streak = 0 if got else empty_streak + 1
        if empty_streak >= quota.patience:
            stop = "no_progress"
            which = f"rounds {k - empty_streak + 1}-{k}" if empty_streak > 1 else f"round {k}"
            detail = f"{which} accepted no new row (patience {quota.patience})"
            break
    else:
        if all(accepted[g] >= n for g, n in quota.quotas.items()):
            stop, detail = "quotas_met", f"every quota met after {quota.max_rounds} round(s)"
    umbrella = run(job=job, dataset=dataset, source=UnionSource(paths=outputs), stages=[], lake=lake,
                   config={**config, "quota": quota.model_dump()}, run_id=run_id, resume=resume,
                   parents=[r["run_id"] for r in rounds])
    umbrella.extras["rounds"] = rounds
    umbrella.extras["stop_reason"] = stop
    umbrella.extras["stop_detail"] = detail
    umbrella.extras["patience"] = quota.patience
    umbrella.extras["quota_met"] = {g: accepted[g] >= n for g, n in quota.quotas.items()}
    umbrella.write(lake.manifest_path(run_id))
    return umbrella
