"""Issue 26: a release folder is a Hub dataset repository as it stands.

The README's release command on the bundled XCOPA-ta sample writes it; `datasets` loads every config, row for
row equal to what the gate validated; the card passes the offline check; only declared columns are published
(annotators pseudonymous); licences of the sources are checked; lm-eval tasks ship inside it; `publish` refuses
what the gate did not pass and pushes the rest through an injected client, with the token from the environment.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hubutil import assert_hub_ready, gated_table

from jobs.cli import _publish, main
from transforms.piqa.formats import read_items, read_xcopa
from transforms.release.hub import (
    BENCHMARK_COLUMNS,
    HubMetadataError,
    check_card,
    check_config_name,
    data_table,
    undeclared_columns,
)
from transforms.release.licences import SourceSpec, licence_conflicts
from transforms.release.publish import PublishError, publish
from transforms.release.writer import HubSettings, build_release

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "xcopa_ta_val.jsonl"
GATE = {"success": True, "suite": "test", "checks": [], "reasons": []}


def _release(lake: Path, *extra: str, version: str = "2026.11.27") -> int:
    return main(["run", "release", "--input", str(SAMPLE), "--recipe", "ta-piqa", "--lake", str(lake),
                 "--version", version, *extra])


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    lake = tmp_path_factory.mktemp("lake")
    assert _release(lake) == 0  # the README's command
    run_id = next(p.parent.name for p in (lake / "runs").glob("release-*/manifest.json"))
    return lake, lake / "release" / "ta-piqa" / "2026.11.27", run_id


def test_the_readme_release_loads_with_datasets_row_for_row(released, tmp_path):
    lake, out, run_id = released
    gated = gated_table(lake, run_id)
    loaded = assert_hub_ready(out, gated, tmp_path / "hf")
    raw = [json.loads(x) for x in SAMPLE.read_text(encoding="utf-8").splitlines()]
    assert list(loaded) == ["ta"] and loaded["ta"]["label"] == [r["label"] for r in raw]
    assert sum(loaded["ta"]["label"]) == sum(r["label"] for r in raw)  # the same label distribution


def test_the_card_declares_licence_sources_review_and_citation(released):
    from huggingface_hub import DatasetCard

    _, out, _ = released
    card = DatasetCard.load(out / "README.md")
    meta = card.data.to_dict()
    assert meta["license"] == "cc-by-4.0" and meta["language"] == ["ta"]
    assert meta["task_categories"] == ["multiple-choice"] and meta["size_categories"] == ["n<1K"]
    assert meta["source_datasets"] == ["extended|cambridgeltl/xcopa"]
    assert meta["annotations_creators"] == ["found"]  # not reviewed: the labels came with XCOPA
    assert meta["configs"] == [{"config_name": "ta", "data_files": [{"split": "test", "path":
                                                                      "data/ta/test-00000-of-00001.parquet"}]}]
    text = card.text
    assert "**Not reviewed by people**" in text
    assert "| [XCOPA (Tamil), a translation of COPA](https://github.com/cambridgeltl/xcopa) | CC-BY-4.0 | Ponti" in text
    assert "```bibtex" in text and "@inproceedings{ponti2020xcopa" in text


def test_only_benchmark_columns_and_side_files_outside_the_data(released):
    lake, out, run_id = released
    data = sorted(p.relative_to(out).as_posix() for p in (out / "data").rglob("*") if p.is_file())
    assert data == ["data/ta/test-00000-of-00001.parquet"]
    top = sorted(p.name for p in out.iterdir())
    assert top == ["README.md", "RELEASED", "data", "extras", "lm_eval"]
    published = pq.read_table(out / data[0])
    full = gated_table(lake, run_id)
    # the full table keeps every column the runs added (in the lake); the data only the declared, non-empty ones
    assert set(published.column_names) < set(full.column_names)
    assert published.column_names[:6] == list(BENCHMARK_COLUMNS)
    assert all(published.column(c).null_count < published.num_rows for c in published.column_names)
    assert undeclared_columns(published, None) == []


def test_undeclared_columns_stay_in_the_lake_and_annotators_are_pseudonymous(tmp_path):
    items = read_xcopa(SAMPLE).slice(0, 20)
    n = items.num_rows
    emails = [["kim@example.org", "lee@example.org"] if i % 2 else ["lee@example.org", "park@example.org"]
              for i in range(n)]
    ko_like = (items.append_column("text", pa.array(["forum post"] * n))
               .append_column("url", pa.array(["https://kin.naver.com/x"] * n))
               .append_column("llm_raw", pa.array(["{raw}"] * n))
               .append_column("review_annotators", pa.array(emails))
               .append_column("review_comments", pa.array([["looks fine", None]] * n))
               .append_column("writer_id", pa.array(["w1"] * n)))
    refusals = undeclared_columns(ko_like, None)
    assert {"text", "url", "llm_raw", "review_comments", "writer_id"} <= {r.split("'")[1] for r in refusals}
    assert "data column 'review_annotators' holds e-mail addresses" in refusals[-1]
    data = data_table(ko_like)
    assert {"text", "url", "llm_raw", "review_comments", "writer_id"}.isdisjoint(data.column_names)
    annotators = data.column("review_annotators").to_pylist()
    assert annotators[0] == ["annotator-1", "annotator-2"] and annotators[1] == ["annotator-3", "annotator-1"]
    assert undeclared_columns(data, None) == []
    result = build_release(ko_like, GATE, out_dir=tmp_path / "rel", dataset="ko-like", recipe="generic",
                           version="1", audit=False, hub=HubSettings(licence="cc-by-4.0"))
    assert result.released, result.reasons
    written = pq.read_table(tmp_path / "rel" / "data" / "ta" / "test-00000-of-00001.parquet")
    assert "@" not in json.dumps(written.column("review_annotators").to_pylist())
    # an explicitly declared column is published; a declared one the items lack stops the release
    assert "writer_id" in data_table(ko_like, ["writer_id"]).column_names
    with pytest.raises(HubMetadataError, match="release.columns"):
        data_table(ko_like, ["nope"])


def test_licence_conflicts_name_the_source():
    xcopa = SourceSpec(name="XCOPA", licence="CC-BY-4.0")
    xquad = SourceSpec(name="XQuAD", licence="CC-BY-SA-4.0")
    nc = SourceSpec(name="NC set", licence="CC-BY-NC-4.0")
    nd = SourceSpec(name="ND set", licence="CC-BY-ND-4.0")
    assert licence_conflicts("MIT", [xcopa]) == []
    assert licence_conflicts("CC-BY-SA-4.0", [xcopa, xquad]) == []
    [line] = licence_conflicts("CC-BY-4.0", [xcopa, xquad])
    assert "'XQuAD'" in line and "share-alike" in line
    assert "'NC set'" in licence_conflicts("CC-BY-SA-4.0", [nc])[0]
    assert licence_conflicts("CC-BY-NC-4.0", [nc]) == []
    assert "no derivatives" in licence_conflicts("CC-BY-NC-ND-4.0", [nd])[0]


def test_the_gate_refuses_a_licence_its_sources_do_not_allow(tmp_path, capsys):
    code = _release(tmp_path, "--set", "licence=CC-BY-4.0",
                    "--set", "sources=[{name: A share-alike corpus, licence: CC-BY-SA-4.0}]")
    assert code == 1
    err = capsys.readouterr().err
    assert "release gate failed: licence: source 'A share-alike corpus' is CC-BY-SA-4.0" in err
    assert not (tmp_path / "release" / "ta-piqa" / "2026.11.27" / "RELEASED").exists()
    card = (tmp_path / "release" / "ta-piqa" / "2026.11.27" / "README.md").read_text(encoding="utf-8")
    assert "**The gate refused this licence:**" in card and "Quality gate: **FAILED**" in card


@pytest.mark.parametrize(("args", "key"), [
    (["--recipe", "generic"], "licence"),
    (["--recipe", "ta-piqa", "--set", "licence=CC-BY-9.9"], "licence: 'CC-BY-9.9' is not a licence id"),
    (["--recipe", "ta-piqa", "--set", "columns=[writer_id]"], "release.columns: ['writer_id']"),
    (["--recipe", "ta-piqa", "--set", "repo_id=not a repo"], "repo_id"),
])
def test_bad_settings_fail_before_anything_is_written(tmp_path, capsys, args, key):
    code = main(["run", "release", "--input", str(SAMPLE), "--lake", str(tmp_path), "--version", "x", *args])
    assert code == 2
    assert key in capsys.readouterr().err
    assert not list((tmp_path / "release").rglob("*"))


def test_a_language_code_that_is_not_iso_639_fails_before_writing(tmp_path, capsys):
    items = read_xcopa(SAMPLE).slice(0, 10)
    items = items.set_column(items.schema.get_field_index("lang"), "lang", pa.array(["tamil"] * 10))
    pq.write_table(items, tmp_path / "bad.parquet")
    code = main(["run", "release", "--input", str(tmp_path / "bad.parquet"), "--recipe", "ta-piqa",
                 "--lake", str(tmp_path / "lake"), "--version", "x"])
    assert code == 2
    assert "lang (the items' language 'tamil'): 'tamil' is not an ISO 639" in capsys.readouterr().err
    assert not list((tmp_path / "lake" / "release").rglob("*"))
    for bad in ("has space", "a/b", ".hidden", "x" * 65):
        with pytest.raises(HubMetadataError, match="not a valid Hub config name"):
            check_config_name(bad)


def test_lm_eval_tasks_ship_inside_with_relative_paths_and_the_release_version(released, tmp_path):
    _, out, _ = released
    tasks = sorted(p.relative_to(out).as_posix() for p in (out / "lm_eval").rglob("*") if p.is_file())
    assert tasks == ["lm_eval/cloze/_piqaforge_ta_piqa_cloze.yaml", "lm_eval/cloze/_template", "lm_eval/cloze/ta.yaml",
                     "lm_eval/generation/_piqaforge_ta_piqa_generation.yaml", "lm_eval/generation/_template",
                     "lm_eval/generation/ta.yaml"]
    for name in tasks:
        text = (out / name).read_text(encoding="utf-8")
        assert "for ta-piqa 2026.11.27" in text.splitlines()[0]
        assert str(out) not in text and "/tmp" not in text
    template = yaml.safe_load((out / "lm_eval" / "cloze" / "_template").read_text(encoding="utf-8"))
    assert template["dataset_path"] == "parquet" and template["doc_to_choice"] == "{{[sol1, sol2]}}"
    task = yaml.safe_load((out / "lm_eval" / "cloze" / "ta.yaml").read_text(encoding="utf-8"))
    assert task["dataset_kwargs"] == {"data_files": {"test": "data/ta/test-00000-of-00001.parquet"}}
    # with a Hub id, the local tasks stay and lm_eval/hub/ holds the same tasks over the published dataset
    items = read_items(SAMPLE)
    build_release(items, GATE, out_dir=tmp_path / "rel", dataset="xcopa-ta", recipe="ta-piqa", version="3",
                  audit=False, hub=HubSettings(licence="cc-by-4.0", repo_id="piqaforge/xcopa-ta"))
    local = yaml.safe_load((tmp_path / "rel" / "lm_eval" / "generation" / "ta.yaml").read_text(encoding="utf-8"))
    assert local["dataset_kwargs"] == {"data_files": {"test": "data/ta/test-00000-of-00001.parquet"}}
    hub = tmp_path / "rel" / "lm_eval" / "hub" / "generation"
    template = yaml.safe_load((hub / "_template").read_text(encoding="utf-8"))
    assert template["dataset_path"] == "piqaforge/xcopa-ta" and "{{ goal }}" in template["doc_to_text"]
    task = yaml.safe_load((hub / "ta.yaml").read_text(encoding="utf-8"))
    assert task["dataset_name"] == "ta" and "dataset_kwargs" not in task
    assert task["task"] == "piqaforge_xcopa_ta_hub_generation_tam_taml"


def test_two_languages_are_two_configs(shared_data, tmp_path):
    tamil = read_xcopa(SAMPLE).slice(0, 12)
    russian = read_items(shared_data / "ru_russiansuperglue_humanbench").slice(0, 8)
    cols = ["id", "lang", "goal", "sol1", "sol2", "label", "source"]
    mixed = pa.concat_tables([russian.select(cols), tamil.select(cols), russian.slice(0, 0).select(cols)])
    result = build_release(mixed, GATE, out_dir=tmp_path / "rel", dataset="mixed", recipe="generic", version="1",
                           audit=False, hub=HubSettings(licence="cc-by-4.0"))
    assert result.released
    loaded = assert_hub_ready(tmp_path / "rel", mixed, tmp_path / "hf")
    assert {c: d.num_rows for c, d in loaded.items()} == {"ru": 8, "ta": 12}
    meta = yaml.safe_load((tmp_path / "rel" / "README.md").read_text(encoding="utf-8").split("---")[1])
    assert meta["multilinguality"] == "multilingual" and meta["language"] == ["ru", "ta"]


class RecordingClient:
    def __init__(self):
        self.calls: list[tuple[str, dict]] = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))
        return type("Commit", (), {"commit_url": "https://huggingface.co/datasets/org/x/commit/abc"})()


def _args(folder: Path, **kw):
    import argparse

    return argparse.Namespace(release_dir=str(folder), repo=kw.get("repo", "piqaforge/ta-piqa"),
                              private=kw.get("private", False), dry_run=kw.get("dry_run", False))


def test_publish_dry_run_then_upload_with_the_token_from_the_environment(released, tmp_path, monkeypatch, capsys):
    _, out, _ = released
    folder = tmp_path / "copy"
    shutil.copytree(out, folder)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["publish", str(folder), "--repo", "piqaforge/ta-piqa", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "would upload 21 files" in printed and "data/ta/test-00000-of-00001.parquet" in printed
    assert "needs the network" in printed
    # the upload itself: refused without a token, then made through the client with the token from $HF_TOKEN
    assert main(["publish", str(folder), "--repo", "piqaforge/ta-piqa"]) == 2
    assert "HF_TOKEN" in capsys.readouterr().err
    token = "hf_test_token_value_0123456789"
    monkeypatch.setenv("HF_TOKEN", token)
    client = RecordingClient()
    assert _publish(_args(folder, private=True), client=client) == 0
    (create, created), (upload, uploaded) = client.calls
    assert create == "create_repo" and created["private"] is True and created["repo_type"] == "dataset"
    assert created["token"] == token and uploaded["token"] == token
    assert upload == "upload_folder" and Path(uploaded["folder_path"]) == folder
    assert "RELEASED" in uploaded["allow_patterns"] and "README.md" in uploaded["allow_patterns"]
    assert token not in capsys.readouterr().out
    assert not any(token in p.read_text(errors="ignore") for p in folder.rglob("*") if p.is_file())


def test_publish_refuses_what_the_gate_did_not_pass(released, tmp_path, capsys):
    _, out, _ = released
    changed = tmp_path / "changed"
    shutil.copytree(out, changed)
    with open(changed / "data" / "ta" / "test-00000-of-00001.parquet", "ab") as f:
        f.write(b"\0")
    assert main(["publish", str(changed), "--repo", "piqaforge/ta-piqa", "--dry-run"]) == 2
    assert "changed: data/ta/test-00000-of-00001.parquet" in capsys.readouterr().err
    added = tmp_path / "added"
    shutil.copytree(out, added)
    (added / "notes.json").write_text("{}")
    assert main(["publish", str(added), "--repo", "piqaforge/ta-piqa", "--dry-run"]) == 2
    assert "added: notes.json" in capsys.readouterr().err
    unreleased = tmp_path / "unreleased"
    shutil.copytree(out, unreleased)
    (unreleased / "RELEASED").unlink()
    assert main(["publish", str(unreleased), "--repo", "piqaforge/ta-piqa", "--dry-run"]) == 2
    assert "no RELEASED marker" in capsys.readouterr().err


def test_the_offline_card_check_names_each_bad_field(released, tmp_path):
    _, out, _ = released
    folder = tmp_path / "bad"
    shutil.copytree(out, folder)
    text = (folder / "README.md").read_text(encoding="utf-8")
    bad = (text.replace("license: cc-by-4.0", "license: cc-by-9.9").replace("language:\n- ta", "language:\n- tamil")
           .replace("- multiple-choice-qa", "- open-domain-qa").replace("- n<1K", "- tiny")
           .replace("path: data/ta/test-00000-of-00001.parquet", "path: data/ta/train-*.parquet"))
    (folder / "README.md").write_text(bad, encoding="utf-8")
    problems = check_card(folder)
    for key in ("license: 'cc-by-9.9'", "language: 'tamil'", "task_ids:", "size_categories: 'tiny'",
                "configs.ta.data_files: data/ta/train-*.parquet matches no file"):
        assert any(p.startswith(key) for p in problems), (key, problems)
    assert len(problems) == 5
    # publish checks the folder's checksums first: the edited card is a changed file
    with pytest.raises(PublishError, match="changed: README.md"):
        publish(folder, "piqaforge/ta-piqa", dry_run=True)
