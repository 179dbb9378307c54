"""Export a release as an lm-evaluation-harness task, so `lm_eval --include_path <dir>` runs it.

Layout written into `out_dir`:
    <task>.jsonl   one item per line: id, lang, goal, sol1, sol2, label (+ is_cultural, source)
    <task>.yaml    a multiple_choice task in the shape of lm-eval's own piqa.yaml, reading the
                   JSONL through the `json` dataset builder with an absolute `data_files` path
The context is our log-likelihood context for the release's language (prompts/eval_loglik), so
`acc`/`acc_norm` from lm-eval and from `piqaforge run evaluate` score the same strings.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from transforms.eval import items as I
from transforms.eval.templates import load_loglik_contexts

EXPORT_COLUMNS = (I.ID, I.LANG, I.GOAL, I.SOL1, I.SOL2, I.LABEL, I.SOURCE, I.IS_CULTURAL)


def task_name(name: str) -> str:
    """lm-eval task names: lowercase letters, digits and underscores."""
    return "piqaforge_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def export_lm_eval_task(table: pa.Table, out_dir: str | Path, name: str, *, lang: str | None = None,
                        version: str = "1.0", description: str = "") -> dict[str, Any]:
    """Write the task's data and YAML; returns {"task", "yaml", "data", "n"}."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    table = I.prepare_items(table)
    task = task_name(name)
    data_path = out / f"{task}.jsonl"
    cols = [c for c in EXPORT_COLUMNS if c in table.schema.names]
    with open(data_path, "w", encoding="utf-8") as f:
        for row in table.select(cols).to_pylist():
            row[I.LABEL] = int(row[I.LABEL])
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    if lang is None:
        langs = Counter(table.column(I.LANG).to_pylist())
        lang = langs.most_common(1)[0][0] if langs else "en"
    contexts = load_loglik_contexts()
    # lm-eval renders doc_to_text with Jinja2 over the row's fields, as our contexts are written.
    spec: dict[str, Any] = {
        "task": task,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {"test": str(data_path)}},
        "output_type": "multiple_choice",
        "test_split": "test",
        "doc_to_text": contexts.template_for(lang),
        "doc_to_target": "label",
        "doc_to_choice": "{{[sol1, sol2]}}",
        "should_decontaminate": True,
        "doc_to_decontamination_query": "goal",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": float(version) if version.replace(".", "", 1).isdigit() else version,
                     "piqaforge_context": contexts.ref, "n_items": table.num_rows,
                     **({"description": description} if description else {})},
    }
    yaml_path = out / f"{task}.yaml"
    yaml_path.write_text(f"# Written by piqaforge (transforms/eval/lm_eval_export.py); run with\n"
                         f"#   lm_eval --model hf --model_args pretrained=<model> --include_path {out} --tasks {task}\n"
                         + yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return {"task": task, "yaml": str(yaml_path), "data": str(data_path), "n": table.num_rows}
