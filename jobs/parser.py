"""The `piqaforge` argument parser: every subcommand and its flags (argparse only: nothing heavy is
imported, so `piqaforge --help` is quick)."""

from __future__ import annotations

import argparse
import os

DESCRIPTION = "`piqaforge` command line: run a job locally or on the Ray cluster it is submitted to."

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="piqaforge", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job (locally, or on the cluster under `ray job submit`)")
    run.add_argument("job", metavar="RECIPE", help="a recipe (jobs/recipes/<name>.yaml; `piqaforge recipes`), a "
                     "recipe file (PATH.yaml), or a tool job (release, evaluate; `piqaforge jobs`)")
    run.add_argument("--config", help="YAML file merged over the job's defaults (jobs/configs/)")
    run.add_argument("--input", nargs="+", help="input path(s), overriding the config")
    run.add_argument("--lake", help="lake root directory")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (dotted keys)")
    run.add_argument("--run-id", help="name the run (default: <job>-<utc time>-<random>)")
    run.add_argument("--resume", metavar="RUN_ID", help="continue RUN_ID, reusing finished stages")
    run.add_argument("--allow-malformed", action="store_true", help="human-authored input files with a malformed "
                     "line (cut in the middle) are refused whole (exit 2); keep the rest instead and say how many "
                     "lines were set aside (sets the recipe's allow_malformed param)")
    submit = sub.add_parser("submit", help="run a job on a Ray cluster through the Jobs API (docs/cluster.md)")
    submit.add_argument("job", metavar="RECIPE", help="a recipe (`piqaforge recipes`) or a tool job, as for `run`")
    submit.add_argument("--address", default=os.environ.get("RAY_DASHBOARD_ADDRESS"),
                        help="the cluster's Jobs API, e.g. http://HEAD:8265 (default: $RAY_DASHBOARD_ADDRESS)")
    submit.add_argument("--no-wait", action="store_true", help="print the job id and return; do not stream logs")
    submit.add_argument("--dry-run", action="store_true", help="check the job here and start nothing: the recipe "
                        "checked, the upload's size and files, each stage's node type, the plan's table; no address "
                        "is contacted (docs/cluster.md)")
    submit.add_argument("--rows", type=int, metavar="N", help="with --dry-run: the input's rows, for the plan's "
                        "table (default: the lines of a local JSONL input)")
    submit.add_argument("--cluster", metavar="CLUSTER_YAML", help="with --dry-run: the cluster's node types "
                        "(default: cluster.yaml of the repo)")
    submit.add_argument("--env", action="append", metavar="NAME=VALUE", default=[],
                        help="an environment variable for the job's driver and workers (not for secrets: Ray "
                        "keeps these in the job record; name secrets in the recipe's `secrets:`)")
    for flag, kwargs in (("--config", {}), ("--input", {"nargs": "+"}), ("--lake", {}),
                         ("--set", {"action": "append", "metavar": "KEY=VALUE"}), ("--run-id", {}),
                         ("--resume", {"metavar": "RUN_ID"}), ("--allow-malformed", {"action": "store_true"})):
        submit.add_argument(flag, help="as for `run`", **kwargs)  # type: ignore[arg-type]
    publish = sub.add_parser("publish", help="push a released folder to the Hugging Face Hub (token: $HF_TOKEN)")
    publish.add_argument("release_dir", metavar="RELEASE_DIR", help="a release folder that carries RELEASED")
    publish.add_argument("--repo", required=True, metavar="ORG/NAME", help="the Hub dataset id")
    publish.add_argument("--private", action="store_true", help="create the dataset repo private")
    publish.add_argument("--dry-run", action="store_true", help="check offline and print what would be uploaded")
    sub.add_parser("jobs", help="list the jobs")
    sub.add_parser("recipes", help="list the recipes (jobs/recipes/*.yaml), one line each")
    stages = sub.add_parser("stages", help="the stages a recipe file can use, one line each; with NAME, its fields")
    stages.add_argument("name", nargs="?", help="a stage: print its fields (type, default, description), "
                        "what it reads and writes and the extras it needs")
    stages.add_argument("--markdown", action="store_true", help="the whole reference as Markdown "
                        "(docs/stages_reference.md is this output)")
    from jobs.judge_eval import add_parser as add_judge_eval_parser  # argparse only

    add_judge_eval_parser(sub)
    runs = sub.add_parser("runs", help="list the runs in a lake (id, job, status, rows in → kept, parents)")
    runs.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    show = sub.add_parser("show", help="print a run's funnel, drop reasons, outputs and report path")
    show.add_argument("run_id")
    show.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    lineage = sub.add_parser("lineage", help="print a row's parent chain back to its source row or request")
    lineage.add_argument("run_id", help="the run holding the row")
    lineage.add_argument("row_id", help="the row's id")
    lineage.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    lineage.add_argument("--json", action="store_true", help="print the hops as JSON")
    from jobs.review import add_review_parser  # argparse only: nothing heavy is imported

    add_review_parser(sub)
    from jobs.translate_eval import add_parser as add_translate_eval_parser  # argparse only

    add_translate_eval_parser(sub)
    from jobs.labelling import add_parser as add_label_parser  # argparse only (issue 43: the labelling loop)

    add_label_parser(sub)
    from jobs.plan_cli import add_parser as add_plan_parser  # argparse only (issue 42)

    add_plan_parser(sub)
    return parser
