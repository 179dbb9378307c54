"""cluster.yaml is a valid Ray cluster-launcher config and agrees with the environment presets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from transforms.core.envs import PRESETS
from transforms.core.stage import Resources

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster.yaml"


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def test_cluster_yaml_matches_the_launchers_schema(config):
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)


def test_the_launcher_accepts_it_after_filling_in_its_defaults(config):
    # What `ray up` does before it talks to AWS: merge the provider defaults, then validate
    # (schema, head type, sum of min_workers <= max_workers).
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(config)
    validate_config(prepared)
    assert prepared["head_node_type"] == "head"


def test_a_broken_config_is_rejected(config):
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    broken = {**config, "available_node_types": {**config["available_node_types"]}}
    broken["available_node_types"]["cpu_worker"] = {**broken["available_node_types"]["cpu_worker"],
                                                    "gpus_please": 8}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_worker_types_and_autoscaling_bounds(config):
    types = config["available_node_types"]
    assert types["head"]["resources"] == {"CPU": 0}  # the head runs the driver only
    gpu = {name: t for name, t in types.items() if t["resources"].get("GPU")}
    assert {t["node_config"]["InstanceType"]: t["resources"]["GPU"] for t in gpu.values()} == \
        {"p5.48xlarge": 8, "p5.4xlarge": 1}
    for name, t in types.items():
        if name != config["head_node_type"]:
            assert 0 <= t["min_workers"] <= t["max_workers"] <= config["max_workers"], name
    assert sum(t.get("min_workers", 0) for t in types.values()) <= config["max_workers"]
    # GPU types scale from zero: nobody pays for an idle H100
    assert all(t["min_workers"] == 0 for t in gpu.values())


def test_vllm_and_cuml_live_in_different_images(config):
    types = config["available_node_types"]
    images = {name: t.get("docker", {}).get("worker_image", config["docker"]["image"]) for name, t in types.items()}
    vllm = {images[n] for n in PRESETS["vllm"].node_types}
    cuml = {images[n] for n in PRESETS["cuml"].node_types}
    assert vllm and cuml and not vllm & cuml
    for name, image in images.items():
        if "vllm" in name:
            assert "vllm" in image
        if "cuml" in name:
            assert "cuml" in image


def _placeable(args: dict, node: dict) -> bool:
    """Could one copy with these Ray arguments run on a node type with these resources?"""
    have = node["resources"]
    need = {"CPU": args.get("num_cpus", 1), "GPU": args.get("num_gpus", 0), **args.get("resources", {})}
    if args.get("accelerator_type"):
        need[f"accelerator_type:{args['accelerator_type']}"] = 0.001
    return all(have.get(key, 0) >= amount for key, amount in need.items() if amount)


def test_every_preset_has_a_worker_type_that_can_run_it(config):
    types = config["available_node_types"]
    for name, preset in PRESETS.items():
        assert preset.node_types, name
        gpus = 0 if name == "cpu" else 1
        args = Resources(env=name, gpus=gpus, cpus=4).ray_remote_args()
        able = {n for n, t in types.items() if _placeable(args, t)}
        assert set(preset.node_types) <= able, (name, able)
        if name != "cpu":  # and nothing else can: that is what keeps vLLM off the cuML nodes
            assert able == set(preset.node_types), (name, able)
            assert all(types[n]["labels"]["piqaforge-env"] == name for n in able)


def test_referenced_files_exist(config):
    base = CLUSTER.parent  # `ray up` runs from the repo root; file_mounts sources are relative to it
    for target, source in config["file_mounts"].items():
        assert (base / source).exists(), (target, source)
    # ~/piqaforge/<path> in any command is the synced repo: the path must exist here
    commands = [config.get(k, []) for k in ("initialization_commands", "setup_commands", "head_setup_commands",
                                             "worker_setup_commands", "head_start_ray_commands",
                                             "worker_start_ray_commands")]
    commands += [t.get("worker_setup_commands", []) for t in config["available_node_types"].values()]
    text = "\n".join(c for group in commands for c in group)
    scripts = set(re.findall(r"~/piqaforge/(\S+)", text))
    assert "cluster/setup_node.sh" in scripts
    for script in scripts:
        assert (ROOT / script).exists(), script
    # each custom image names the Dockerfile that builds it
    raw = CLUSTER.read_text()
    for image, dockerfile in re.findall(r"worker_image: (\S+)\s+# (docker/\S+)", raw):
        path = ROOT / dockerfile
        assert path.exists(), dockerfile
        assert f"-t {image}" in path.read_text(), (image, dockerfile)
    # every environment the node types ask setup_node.sh for is one it knows
    setup = (ROOT / "cluster" / "setup_node.sh").read_text()
    for env in set(re.findall(r"setup_node\.sh (\w+)", text)):
        assert re.search(rf"^\s*(\w+\|)?{env}(\|\w+)?\)", setup, re.M), env
