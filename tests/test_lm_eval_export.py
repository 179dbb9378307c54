"""The lm-evaluation-harness export: the YAML parses, points at existing data and renders every row."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jinja2
import yaml

from transforms.eval.lm_eval_export import export_lm_eval_task
from transforms.piqa.formats import read_items

# The keys of lm-eval's own piqa.yaml (lm_eval/tasks/piqa/piqa.yaml) a multiple-choice task needs.
LM_EVAL_KEYS = {"task", "dataset_path", "output_type", "doc_to_text", "doc_to_target", "doc_to_choice",
                "metric_list"}


def _export(tmp_path, shared_data, folder, name):
    table = read_items(shared_data / folder)
    return table, export_lm_eval_task(table, tmp_path / "tasks", name)


def test_exported_yaml_parses_and_points_to_existing_files(tmp_path, shared_data):
    table, out = _export(tmp_path, shared_data, "xcopa_ta", "xcopa-ta val")
    spec = yaml.safe_load(Path(out["yaml"]).read_text(encoding="utf-8"))
    assert set(spec) >= LM_EVAL_KEYS
    assert spec["task"] == out["task"] == "piqaforge_xcopa_ta_val"
    assert spec["dataset_path"] == "json" and spec["output_type"] == "multiple_choice"
    data = Path(spec["dataset_kwargs"]["data_files"][spec["test_split"]])
    assert data.is_absolute() and data.exists()
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == table.num_rows == spec["metadata"]["n_items"] == 100
    assert {m["metric"] for m in spec["metric_list"]} == {"acc", "acc_norm"}


def test_every_row_renders_like_lm_eval_would(tmp_path, shared_data):
    table, out = _export(tmp_path, shared_data, "ru_russiansuperglue_humanbench", "parus")
    spec = yaml.safe_load(Path(out["yaml"]).read_text(encoding="utf-8"))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    data = Path(spec["dataset_kwargs"]["data_files"]["test"])
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 500
    assert spec["doc_to_text"].startswith("Вопрос:")  # the Russian context for a Russian release
    for row in rows:
        text = env.from_string(spec["doc_to_text"]).render(**row)
        assert row["goal"] in text
        # lm-eval renders doc_to_choice and reads the result as a Python literal list.
        choices = ast.literal_eval(env.from_string(spec["doc_to_choice"]).render(**row))
        assert choices == [row["sol1"], row["sol2"]]
        assert row[spec["doc_to_target"]] in (0, 1)
