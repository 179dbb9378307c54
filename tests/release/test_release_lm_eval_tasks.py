"""Issue 32 §4: a release's lm-eval tasks run from the folder before publishing and from the Hub after it.

Every task YAML under `<release>/lm_eval/` is read the way lm-eval reads it (`include: _template` merged under
the task's own keys) and its data opened the way lm-eval opens it (`datasets.load_dataset(dataset_path,
dataset_name, **dataset_kwargs)`): the local tasks from inside the release folder by their relative paths, the
Hub tasks (`repo_id` set) by the id and config, the id standing for the folder that `piqaforge publish` pushes.
Both must give the release's rows. The real lm_eval runs the local tasks in tests/eval/test_lm_eval_run.py (slow).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from transforms.piqa.formats import read_items, read_xcopa
from transforms.release.writer import HubSettings, build_release

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "xcopa_ta_val.jsonl"
GATE = {"success": True, "suite": "test", "checks": [], "reasons": []}
REPO = "piqaforge/lmeval-paths"


def task_config(path: Path) -> dict:
    """A task file as lm-eval sees it: its `include` (relative to the file) first, its own keys over it."""
    own = yaml.safe_load(path.read_text(encoding="utf-8"))
    include = own.pop("include", None)
    return {**(task_config(path.parent / include) if include else {}), **own}


def open_task_data(config: dict, release: Path, cache: Path) -> list[dict]:
    """lm-eval's ConfigurableTask.download, run from inside the release folder; the Hub id is the folder."""
    import datasets

    path = config["dataset_path"]
    if path == REPO:
        path = str(release)  # what `piqaforge publish --repo REPO` uploads is this folder, as it is
    cwd = os.getcwd()
    os.chdir(release)
    try:
        ds = datasets.load_dataset(path, config.get("dataset_name"), cache_dir=str(cache),
                                   **config.get("dataset_kwargs", {}))
    finally:
        os.chdir(cwd)
    return ds[config["test_split"]].to_list()


@pytest.fixture(scope="module")
def release(shared_data, tmp_path_factory):
    tamil = read_xcopa(SAMPLE).slice(0, 12)
    russian = read_items(shared_data / "ru_russiansuperglue_humanbench").slice(0, 8)
    cols = ["id", "lang", "goal", "sol1", "sol2", "label", "source"]
    items = pa.concat_tables([tamil.select(cols), russian.select(cols)])
    out = tmp_path_factory.mktemp("rel") / "release"
    result = build_release(items, GATE, out_dir=out, dataset="lmeval paths", recipe="generic", version="1",
                           audit=False, hub=HubSettings(licence="cc-by-4.0", repo_id=REPO))
    assert result.released
    return out, items


def _tasks(folder: Path) -> dict[str, Path]:
    """task name → its file, for every per-language task file under `folder`."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if "group" not in data:
            assert data["task"] not in found, f"{data['task']} in both {found.get(data['task'])} and {path}"
            found[data["task"]] = path
    return found


def test_both_families_ship_and_every_group_names_tasks_that_exist(release):
    out, _ = release
    tasks = _tasks(out / "lm_eval")
    local = {t for t, p in tasks.items() if "hub" not in p.relative_to(out / "lm_eval").parts}
    hub = set(tasks) - local
    assert local == {f"piqaforge_lmeval_paths_{k}_{lang}" for k in ("cloze", "generation")
                     for lang in ("rus_cyrl", "tam_taml")}
    assert hub == {t.replace("piqaforge_lmeval_paths_", "piqaforge_lmeval_paths_hub_") for t in local}
    for path in (out / "lm_eval").rglob("_piqaforge_*.yaml"):
        group = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert {t["task"] for t in group["task"]} <= set(tasks), path
        assert ("_hub_" in group["group"]) == ("hub" in path.parts), path
    for path in (out / "lm_eval").rglob("*"):
        if path.is_file():
            assert str(out) not in path.read_text(encoding="utf-8"), path  # no absolute path
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "piqaforge_lmeval_paths_cloze,piqaforge_lmeval_paths_generation" in card
    assert "piqaforge_lmeval_paths_hub_cloze,piqaforge_lmeval_paths_hub_generation" in card


def test_local_and_hub_tasks_resolve_to_the_release_rows(release, tmp_path):
    out, items = release
    by_lang = {lang: [r for r in items.to_pylist() if r["lang"] == lang] for lang in ("ta", "ru")}
    for task, path in _tasks(out / "lm_eval").items():
        config = task_config(path)
        if "hub" in path.relative_to(out / "lm_eval").parts:
            assert config["dataset_path"] == REPO and "dataset_kwargs" not in config, task
        else:
            assert config["dataset_path"] == "parquet" and "dataset_name" not in config, task
            (test_file,) = config["dataset_kwargs"]["data_files"].values()
            assert not Path(test_file).is_absolute() and (out / test_file).is_file(), task
        rows = open_task_data(config, out, tmp_path / "hf")
        expected = by_lang[config["task_alias"]]
        assert [r["id"] for r in rows] == [r["id"] for r in expected], task
        assert [r["label"] for r in rows] == [r["label"] for r in expected], task
        # the fields the templates read are columns of the data
        assert {"goal", "sol1", "sol2", "label"} <= set(rows[0]), task
        if "cloze" in task:
            assert config["doc_to_text"] == "goal" and config["doc_to_choice"] == "{{[sol1, sol2]}}", task
        else:
            assert "{{ goal }}" in config["doc_to_text"] and "{{ sol2 }}" in config["doc_to_text"], task


def test_without_a_repo_id_only_the_local_tasks_ship(tmp_path):
    items = read_xcopa(SAMPLE).slice(0, 6)
    result = build_release(items, GATE, out_dir=tmp_path / "rel", dataset="lmeval paths", recipe="generic",
                           version="1", audit=False, hub=HubSettings(licence="cc-by-4.0"))
    assert result.released
    assert not (tmp_path / "rel" / "lm_eval" / "hub").exists()
    assert set(_tasks(tmp_path / "rel" / "lm_eval")) == {"piqaforge_lmeval_paths_cloze_tam_taml",
                                                         "piqaforge_lmeval_paths_generation_tam_taml"}
    assert "_hub_" not in (tmp_path / "rel" / "README.md").read_text(encoding="utf-8")
