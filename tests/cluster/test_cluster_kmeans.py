"""k-means sweeps with an elbow choice (transforms/cluster/): the elbow rule, real scikit-learn fits on
points whose cluster count is known, the k range, the cuML backend's error without cuML, the SVG."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from transforms.cluster.kmeans import KMeansConfig, elbow_k, elbow_svg, k_range, sweep
from transforms.core.deps import MissingDependencyError, is_available


def test_elbow_is_where_the_curve_bends():
    ks = list(range(1, 9))
    # steep drop until k = 3, then almost flat
    inertia = [100.0, 55.0, 12.0, 10.0, 9.0, 8.2, 7.6, 7.1]
    assert elbow_k(ks, inertia) == 3
    # moving the bend moves the choice
    assert elbow_k(ks, [100.0, 90.0, 80.0, 70.0, 60.0, 12.0, 11.0, 10.5]) == 6


def test_elbow_edge_cases():
    assert elbow_k([4], [3.0]) == 4
    assert elbow_k([2, 3], [5.0, 5.0]) == 2          # flat: more clusters buy nothing
    assert elbow_k([2, 3], [5.0, 1.0]) == 3
    assert elbow_k([2, 3, 4, 5], [1.0, 1.0, 1.0, 1.0]) == 2
    with pytest.raises(ValueError):
        elbow_k([], [])


def test_k_range_never_exceeds_the_points():
    cfg = KMeansConfig(k_min=2, k_max=30)
    assert k_range(100, cfg) == list(range(2, 31))
    assert k_range(8, cfg) == list(range(2, 8))      # at most n - 1 clusters
    assert k_range(2, cfg) == [2]
    assert k_range(1, cfg) == [1]
    assert k_range(0, cfg) == []


def test_sweep_finds_the_true_number_of_blobs():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 16)) * 10
    x = np.concatenate([c + rng.normal(scale=0.3, size=(25, 16)) for c in centres]).astype(np.float32)
    result = sweep(x, KMeansConfig(k_min=2, k_max=10, seed=0, n_init=2))
    assert result["k"] == 4
    assert result["ks"] == list(range(2, 11)) and len(result["inertia"]) == 9
    assert all(a >= b - 1e-6 for a, b in zip(result["inertia"], result["inertia"][1:], strict=False))
    labels = result["labels"]
    for b in range(4):  # each blob is one cluster
        assert len(set(labels[b * 25:(b + 1) * 25].tolist())) == 1
    assert len(set(labels.tolist())) == 4


def test_sweep_is_seeded():
    x = np.random.default_rng(1).normal(size=(40, 8)).astype(np.float32)
    a, b = sweep(x, KMeansConfig(k_max=6, seed=3)), sweep(x, KMeansConfig(k_max=6, seed=3))
    assert a["inertia"] == b["inertia"] and a["k"] == b["k"]


@pytest.mark.skipif(is_available("cuml"), reason="cuML is installed: the GPU tier runs it for real")
def test_cuml_backend_without_cuml_names_the_extra():
    x = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    with pytest.raises(MissingDependencyError, match=r"\.\[cuml\]"):
        sweep(x, KMeansConfig(backend="cuml", k_max=3))


def test_elbow_svg_marks_the_chosen_k():
    svg = elbow_svg([2, 3, 4], [9.0, 3.0, 2.5], 3, "Domain")
    assert svg.startswith("<svg") and "chosen k=3" in svg and "<circle" in svg
    assert "no labels" in elbow_svg([], [], 0, "Domain")


def test_cluster_labels_stage_on_real_embeddings(tmp_path):
    """Label strings of two clear topics cluster apart with multilingual-e5-small embeddings."""
    import json

    from transforms.cluster.labels import ClusterLabels, GroupClusters

    kitchen = ["frying", "boiling water", "baking bread", "cooking rice", "roasting"]
    garden = ["watering plants", "planting seeds", "pruning shrubs", "mowing the lawn", "weeding"]
    labels = kitchen + garden
    table = pa.table({"id": [f"Action_Type:{t}" for t in labels], "category": ["Action_Type"] * 10,
                      "label_text": labels, "n_items": [1] * 10})
    out = ClusterLabels(output_dir=str(tmp_path), kmeans=KMeansConfig(k_min=2, k_max=2))(table)
    cl = out.column("cluster").to_pylist()
    assert len(set(cl[:5])) == 1 and len(set(cl[5:])) == 1 and cl[0] != cl[5]
    report = json.loads((tmp_path / "clustering.json").read_text())["Action_Type"]
    assert report["labels_before"] == 10 and report["clusters_after"] == 2
    grouped = GroupClusters()(out)
    groups = grouped.filter(pa.array([r == "child" for r in grouped.column("_role").to_pylist()]))
    assert sorted(groups.column("n_members").to_pylist()) == [5, 5]
    assert grouped.column("_role").to_pylist().count("consumed") == 10  # every label lives on in a cluster
