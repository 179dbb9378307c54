"""What every release made in the test suite must be: loadable by `datasets`, config by config, with the
declared features, row for row equal to what the gate validated, and with a card that passes the offline check."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from transforms.core.lake import read_table
from transforms.core.manifest import RunManifest


def gated_table(lake: Path, release_run_id: str) -> pa.Table:
    """The table the release run's gate validated (its curated output: the stage keeps every row)."""
    manifest = RunManifest.load(Path(lake) / "runs" / release_run_id / "manifest.json")
    return read_table(Path(manifest.outputs["curated"]))


def assert_hub_ready(release: Path, gated: pa.Table, cache_dir: Path) -> dict[str, object]:
    """Load every config of the card with `datasets`; returns {config: Dataset}."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets
    from huggingface_hub import DatasetCard

    from transforms.release.hub import check_card

    assert check_card(release) == []
    meta = DatasetCard.load(release / "README.md").data.to_dict()
    configs = [c["config_name"] for c in meta["configs"]]
    assert sorted(configs) == sorted({str(x) for x in gated.column("lang").to_pylist()})
    assert meta["license"] and meta["language"] == sorted(configs)
    loaded = {}
    for config in configs:
        ds = datasets.load_dataset(str(release), config, cache_dir=str(cache_dir))
        assert list(ds) == ["test"], f"{config}: splits {list(ds)}"
        test = ds["test"]
        assert isinstance(test.features["label"], datasets.ClassLabel)
        assert test.features["label"].names == ["sol1", "sol2"]
        info = next(i for i in meta["dataset_info"] if i["config_name"] == config)
        assert [f["name"] for f in info["features"]] == list(test.features), config
        part = gated.filter(pc.equal(gated.column("lang"), config))
        assert test["id"] == part.column("id").to_pylist(), f"{config}: ids or their order differ"
        assert test["label"] == [int(x) for x in part.column("label").to_pylist()], config
        for col in ("goal", "sol1", "sol2"):
            assert test[col] == part.column(col).to_pylist(), (config, col)
        loaded[config] = test
    return loaded
