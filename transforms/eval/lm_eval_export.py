"""Export a release as lm-evaluation-harness tasks in the shape of lm-eval's `global_piqa` tasks.

Layout written into `out_dir`, for a release named N with languages L (lm-eval codes: kor_hang ...):
    data/<L>.jsonl              the items in the Global PIQA shape (prompt, solution0, solution1, label,
                                id, lang + the recipe's columns), one item per line
    cloze/_template             multiple_choice: `doc_to_text: prompt`, `doc_to_choice:
                                "{{[solution0, solution1]}}"`, metrics acc, acc_norm, acc_bytes
    cloze/<L>.yaml              `include: _template`, task piqaforge_N_cloze_<L>, its data file
    cloze/_piqaforge_N_cloze.yaml        group piqaforge_N_cloze over the languages
    generation/_template        generate_until with the A/B prompt (prompts/eval_global/en.yaml), the
                                letter taken by lm-eval's global_piqa regex filter, metric exact_match
    generation/<L>.yaml, generation/_piqaforge_N_generation.yaml   the same per language and grouped
Run both with `lm_eval --include_path <out_dir> --tasks piqaforge_N_cloze,piqaforge_N_generation`
(add `--apply_chat_template` for the generation task on an instruction model). Our evaluator scores
the same strings: the cloze task with `load_global_cloze_contexts()` (the bare prompt), the
generation task with `prompts_for_style("global_piqa")` and no answer cue.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from transforms.eval import items as I
from transforms.eval.templates import GLOBAL_PIQA_PROMPT, single_turn_template
from transforms.llm.prompts import load_prompt
from transforms.piqa.global_piqa import write_global_piqa

# ISO 639-1 → the language_script codes lm-eval's global_piqa task names use.
LM_EVAL_LANG = {"en": "eng_latn", "ko": "kor_hang", "ja": "jpn_jpan", "ru": "rus_cyrl", "ta": "tam_taml",
                "hi": "hin_deva", "bn": "ben_beng", "kn": "kan_knda", "te": "tel_telu", "ml": "mal_mlym",
                "mr": "mar_deva", "gu": "guj_gujr", "pa": "pan_guru", "or": "ory_orya", "ur": "urd_arab",
                "as": "asm_beng", "zh": "cmn_hans", "ne": "npi_deva", "si": "sin_sinh"}
CLOZE_METRICS = ("acc", "acc_norm", "acc_bytes")
# lm-eval's global_piqa generation filter: "The best answer is: X", "Answer: X" or \boxed{X}.
ANSWER_REGEX = r"[Tt]he (?:[Bb]est [Aa]nswer|[Ff]inal [Aa]nswer|[Aa]nswer)[^A-B]*([A-B])|[Aa]nswer\s*:[^A-B]*([A-B])|\\boxed\{([A-B])\}"
# Greedy, so a rerun gives the same numbers (lm-eval's own template samples at temperature 0.8).
DEFAULT_GENERATION = {"do_sample": False, "temperature": 0.0, "max_gen_toks": 256, "until": []}


def task_name(name: str) -> str:
    """lm-eval task names: lowercase letters, digits and underscores."""
    return "piqaforge_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def lm_eval_lang(lang: str | None) -> str:
    code = (lang or "und").lower()
    return LM_EVAL_LANG.get(code, re.sub(r"[^a-z0-9]+", "_", code).strip("_") or "und")


def _metric(name: str, **extra: Any) -> dict[str, Any]:
    return {"metric": name, "aggregation": "mean", "higher_is_better": True, **extra}


def cloze_template() -> dict[str, Any]:
    return {"dataset_path": "json", "output_type": "multiple_choice", "test_split": "test",
            "doc_to_text": "prompt", "doc_to_target": "label", "doc_to_choice": "{{[solution0, solution1]}}",
            "metric_list": [_metric(m) for m in CLOZE_METRICS], "metadata": {"version": 1.0}}


def generation_template(generation: dict[str, Any] | None = None) -> dict[str, Any]:
    prompt = load_prompt(GLOBAL_PIQA_PROMPT)
    return {"dataset_path": "json", "output_type": "generate_until", "test_split": "test",
            "doc_to_text": single_turn_template(prompt), "doc_to_target": "{{['A', 'B'][label]}}",
            "generation_kwargs": {**DEFAULT_GENERATION, **(generation or {})},
            "filter_list": [{"name": "strict_match", "filter": [
                {"function": "regex", "regex_pattern": ANSWER_REGEX, "group_select": -1},
                {"function": "take_first"}]}],
            "metric_list": [_metric("exact_match", ignore_case=True, ignore_punctuation=True)],
            "metadata": {"version": 1.0, "piqaforge_prompt": prompt.ref}}


def _dump(path: Path, data: dict[str, Any], header: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=10_000)
    path.write_text(header + text, encoding="utf-8")


def export_lm_eval_task(table: pa.Table, out_dir: str | Path, name: str, *, recipe: str = "generic",
                        version: str = "1.0", generation: dict[str, Any] | None = None,
                        description: str = "") -> dict[str, Any]:
    """Write the data, the cloze and generation templates, per-language tasks and the two groups.

    Returns {"task", "yaml", "data", "n", "groups", "tasks", "include_path"}: `task`/`yaml` are the
    cloze group and its file, `data` the data folder, `tasks` every per-language task name.
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    table = I.prepare_items(table)
    base = task_name(name)
    header = (f"# Written by piqaforge (transforms/eval/lm_eval_export.py) for {name} {version}; run with\n"
              f"#   lm_eval --model hf --model_args pretrained=<model> --include_path {out} "
              f"--tasks {base}_cloze,{base}_generation\n")
    langs = Counter(lm_eval_lang(x) for x in table.column(I.LANG).to_pylist())
    codes = pa.array([lm_eval_lang(x) for x in table.column(I.LANG).to_pylist()])
    tasks: dict[str, list[str]] = {"cloze": [], "generation": []}
    for lang in sorted(langs):
        part = table.filter(pc.equal(codes, lang))
        info = write_global_piqa(part, out / "data", lang, recipe)
        data = str(out / "data" / f"{lang}.jsonl")
        for kind in tasks:
            task = f"{base}_{kind}_{lang}"
            _dump(out / kind / f"{lang}.yaml", {"include": "_template", "task": task, "task_alias": lang,
                                                "dataset_kwargs": {"data_files": {"test": data}},
                                                "metadata": {"version": 1.0, "n_items": info["rows"]}})
            tasks[kind].append(task)
    _dump(out / "cloze" / "_template", cloze_template(), header)
    _dump(out / "generation" / "_template", generation_template(generation), header)
    meta = {"version": float(version) if version.replace(".", "", 1).isdigit() else version,
            "n_items": table.num_rows, **({"description": description} if description else {})}
    groups = {}
    for kind, metrics in (("cloze", CLOZE_METRICS), ("generation", ("exact_match",))):
        group = f"{base}_{kind}"
        path = out / kind / f"_{group}.yaml"
        _dump(path, {"group": group, "task": [{"task": t, "task_alias": t.rsplit(f"_{kind}_", 1)[1]}
                                              for t in tasks[kind]],
                     "aggregate_metric_list": [{"metric": m, "aggregation": "mean", "weight_by_size": False}
                                               for m in metrics],
                     "metadata": meta}, header)
        groups[kind] = {"group": group, "yaml": str(path)}
    return {"task": groups["cloze"]["group"], "yaml": groups["cloze"]["yaml"], "data": str(out / "data"),
            "n": table.num_rows, "groups": groups, "tasks": tasks["cloze"] + tasks["generation"],
            "include_path": str(out)}


HUB_FOLDER = "hub"  # lm_eval/hub/: the same tasks over the published dataset, beside the local ones


def export_release_tasks(out_dir: str | Path, name: str, version: str, configs: dict[str, int], *,
                         data_files: dict[str, str], repo_id: str | None = None,
                         generation: dict[str, Any] | None = None) -> dict[str, Any]:
    """lm-eval tasks over a release's own configs, written into `<release>/lm_eval/` without running a model.

    `configs` maps each config (a language) to its item count, `data_files` to its file in the release.
    The tasks `piqaforge_<N>_cloze` / `_generation` read each config's Parquet file by a path relative to the
    release folder (run `lm_eval --include_path lm_eval ...` from inside it; `datasets` cannot name a dataset
    loaded from "."), so a team can run them before publishing and nothing holds an absolute path. With
    `repo_id`, `lm_eval/hub/` also holds `piqaforge_<N>_hub_cloze` / `_hub_generation`, the same tasks over
    the published dataset by id and config (`dataset_name`). The item columns are read as they are: goal,
    sol1, sol2, label.
    """
    out = Path(out_dir)
    base = task_name(name)
    local = _release_task_family(out, base, name, version, configs, data_files=data_files, repo_id=None,
                                 generation=generation)
    families = [local]
    if repo_id:
        families.append(_release_task_family(out / HUB_FOLDER, f"{base}_hub", name, version, configs,
                                             data_files=data_files, repo_id=repo_id, generation=generation))
        families[-1]["files"] = [f"{HUB_FOLDER}/{f}" for f in families[-1]["files"]]
    return {"files": [f for fam in families for f in fam["files"]], "groups": local["groups"],
            "tasks": [t for fam in families for t in fam["tasks"]],
            "hub_groups": families[1]["groups"] if repo_id else [], "repo_id": repo_id}


def _release_task_family(out: Path, base: str, name: str, version: str, configs: dict[str, int], *,
                         data_files: dict[str, str], repo_id: str | None,
                         generation: dict[str, Any] | None) -> dict[str, Any]:
    """One cloze and one generation family over the release's configs: local files (`repo_id` None) or the Hub."""
    where = repo_id or "this release folder"
    header = (f"# Written by piqaforge for {name} {version} (transforms/eval/lm_eval_export.py); data: {where}. Run\n"
              f"#   lm_eval --model hf --model_args pretrained=<model> --include_path lm_eval "
              f"--tasks {base}_cloze,{base}_generation\n"
              + ("#   from inside the release folder\n" if repo_id is None else ""))
    common = {"dataset_path": repo_id or "parquet", "test_split": "test"}
    cloze = {**cloze_template(), **common, "doc_to_text": "goal", "doc_to_choice": "{{[sol1, sol2]}}"}
    prompt = load_prompt(GLOBAL_PIQA_PROMPT)
    gen = {**generation_template(generation), **common,
           "doc_to_text": single_turn_template(prompt, global_piqa_fields=False)}
    meta_version = float(version) if version.replace(".", "", 1).isdigit() else version
    files: list[str] = []
    tasks: dict[str, list[str]] = {"cloze": [], "generation": []}
    kinds: tuple[tuple[str, dict[str, Any], tuple[str, ...]], ...] = (
        ("cloze", cloze, CLOZE_METRICS), ("generation", gen, ("exact_match",)))
    for kind, template, metrics in kinds:
        _dump(out / kind / "_template", {**template, "metadata": {**template["metadata"], "release": version}},
              header)
        files.append(f"{kind}/_template")
        for config, n in configs.items():
            task = f"{base}_{kind}_{lm_eval_lang(config)}"
            where_data = {"dataset_name": config} if repo_id else {
                "dataset_kwargs": {"data_files": {"test": data_files[config]}}}
            _dump(out / kind / f"{config}.yaml", {"include": "_template", "task": task, "task_alias": config,
                                                  **where_data, "metadata": {"version": 1.0, "n_items": n}}, header)
            files.append(f"{kind}/{config}.yaml")
            tasks[kind].append(task)
        group = f"{base}_{kind}"
        _dump(out / kind / f"_{group}.yaml", {
            "group": group, "task": [{"task": t, "task_alias": c} for t, c in zip(tasks[kind], configs, strict=True)],
            "aggregate_metric_list": [{"metric": m, "aggregation": "mean", "weight_by_size": False} for m in metrics],
            "metadata": {"version": meta_version, "n_items": sum(configs.values())}}, header)
        files.append(f"{kind}/_{group}.yaml")
    return {"files": files, "groups": [f"{base}_cloze", f"{base}_generation"],
            "tasks": tasks["cloze"] + tasks["generation"]}
