"""`piqaforge review ...`: human review of a run's items (docs/review.md).

    piqaforge review agreement FILE... [--item COL --annotator COL --label COL] [--json]
    piqaforge review export RUN_ID --to labelstudio|csv [--annotators N] [--batch NAME] [--lake DIR]
    piqaforge review push BATCH --url URL [--api-key KEY]       # create the project, import tasks
    piqaforge review pull BATCH --url URL [--api-key KEY]       # annotations back, then `import`
    piqaforge review import BATCH --from FILES...               # Label Studio JSON or filled CSV
    piqaforge review auto BATCH [--engine ...]                  # LLM annotators fill the batch
    piqaforge review requeue BATCH [--to csv] [--batch NAME]    # export the disagreement queue again

This module only parses arguments and prints (`agreement`: jobs/review_agreement.py); the work is in
transforms/review/.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from jobs.review_agreement import format_report, normalise_verdicts, run_agreement  # noqa: F401 (re-exported)


def add_review_parser(sub: Any) -> None:
    review = sub.add_parser("review", help="human review: export, Label Studio, import, consensus, agreement")
    actions = review.add_subparsers(dest="review_command", required=True)

    agree = actions.add_parser("agreement", help="agreement statistics of a long-format judgments file")
    agree.add_argument("files", nargs="+", metavar="FILE", help="JSONL, JSON, CSV, TSV or Parquet: one row per "
                       "item x annotator; several files (e.g. one per annotator) are read as one")
    agree.add_argument("--item", default="item_id", help="item column; several comma-separated columns form "
                       "one key (default: item_id)")
    agree.add_argument("--annotator", default="annotator", help="annotator column (default: annotator)")
    agree.add_argument("--label", help="label column (default: verdict when the file has one, as a review batch's "
                       "CSV does, else label)")
    agree.add_argument("--raw-labels", action="store_true", help="compare labels as written (default: the review "
                       "verdicts' spellings are normalised as the import does: SOL2, 'Solution 2 is correct' -> sol2)")
    agree.add_argument("--json", action="store_true", help="print one JSON object")
    agree.add_argument("--boot", type=int, default=1000, help="bootstrap replicates (default 1000; 0: none)")
    agree.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    agree.add_argument("--confidence", type=float, default=0.95, help="interval coverage (default 0.95)")
    agree.add_argument("--min-pair-items", type=int, default=10, help="Cohen's kappa for pairs sharing >= N items")
    agree.add_argument("--max-pairs", type=int, default=100, help="report at most N pairs (most shared items)")
    agree.add_argument("--raters-per-item", type=int, help="Fleiss: use items with exactly N raters "
                       "(default: the most common count)")
    agree.add_argument("--duplicates", choices=["error", "first"], default="error",
                       help="a second label by the same annotator for the same item: error, or keep the first")

    lake = {"default": os.environ.get("PIQAFORGE_LAKE", "lake"), "help": "lake root (default: lake)"}
    export = actions.add_parser("export", help="write a review batch for a run's curated items")
    export.add_argument("run_id", help="the run whose curated table is reviewed")
    export.add_argument("--to", choices=["labelstudio", "csv"], default="labelstudio")
    export.add_argument("--annotators", default="2", help="how many annotators (N), or their names, comma-separated")
    export.add_argument("--batch", help="batch name (default: review-<run id>)")
    export.add_argument("--rule", choices=["unanimous", "k_of_n", "majority"], default="unanimous",
                        help="consensus rule recorded with the batch (default: unanimous)")
    export.add_argument("--k", type=int, help="k for --rule k_of_n")
    export.add_argument("--limit", type=int, help="export only the first N items")
    export.add_argument("--lake", **lake)  # type: ignore[arg-type]

    requeue = actions.add_parser("requeue", help="export a batch's disagreement queue as a new batch")
    requeue.add_argument("batch")
    requeue.add_argument("--to", choices=["labelstudio", "csv"], default="labelstudio")
    requeue.add_argument("--annotators", help="default: the batch's annotators")
    requeue.add_argument("--name", help="new batch name (default: <batch>-requeue)")
    requeue.add_argument("--lake", **lake)  # type: ignore[arg-type]

    imp = actions.add_parser("import", help="import judgments (Label Studio JSON exports or filled CSVs)")
    imp.add_argument("batch")
    imp.add_argument("--from", dest="files", nargs="+", required=True, help="Label Studio JSON or filled CSV files")
    imp.add_argument("--rule", choices=["unanimous", "k_of_n", "majority"], help="override the batch's rule")
    imp.add_argument("--k", type=int, help="k for --rule k_of_n")
    imp.add_argument("--lake", **lake)  # type: ignore[arg-type]
    imp.add_argument("--dry-run", action="store_true", help="check every file and show what the import would do; "
                     "write nothing")
    imp.add_argument("--replace", action="store_true", help="import a batch imported before: the new import "
                     "supersedes the earlier one")
    imp.add_argument("--allow-partial", action="store_true", help="accept a filled CSV without rows for some items "
                     "(otherwise such a file is taken as cut short)")

    for name, text in (("push", "create the Label Studio project and import the batch's tasks"),
                       ("pull", "pull the annotations of the batch's Label Studio project and import them")):
        p = actions.add_parser(name, help=text)
        p.add_argument("batch")
        p.add_argument("--url", default=os.environ.get("LABEL_STUDIO_URL", "http://127.0.0.1:8080"),
                       help="Label Studio address (default: $LABEL_STUDIO_URL or http://127.0.0.1:8080)")
        p.add_argument("--api-key", default=os.environ.get("LABEL_STUDIO_API_KEY"),
                       help="API token (default: $LABEL_STUDIO_API_KEY)")
        p.add_argument("--lake", **lake)  # type: ignore[arg-type]
        if name == "pull":
            p.add_argument("--no-import", action="store_true", help="only save the export JSON")
            p.add_argument("--replace", action="store_true", help="the batch was imported before: supersede it")

    auto = actions.add_parser("auto", help="LLM annotators fill the batch (a dry run without people)")
    auto.add_argument("batch")
    auto.add_argument("--engine", action="append", metavar="BACKEND:MODEL",
                      help="one annotator per engine (default: transformers:gemma3-270m)")
    auto.add_argument("--prompt", action="append", help="prompt ids (default: review/en and review/en_strict)")
    auto.add_argument("--annotators", type=int, default=2, help="how many LLM annotators")
    auto.add_argument("--lake", **lake)  # type: ignore[arg-type]


def run_review(args: argparse.Namespace) -> int:
    handler = {"agreement": run_agreement, "export": _export, "requeue": _requeue, "import": _import,
               "push": _push, "pull": _pull, "auto": _auto}[args.review_command]
    return handler(args)


def _lake(args: argparse.Namespace) -> Any:
    from transforms.core.lake import Lake

    return Lake(args.lake)


def _rule(args: argparse.Namespace) -> Any:
    from transforms.review.consensus import ConsensusRule

    return ConsensusRule(rule=args.rule, k=args.k) if args.rule else None


def _print_batch(record: Any, lake: Any) -> None:
    from transforms.review.batch import batch_dir

    folder = batch_dir(lake, record.batch)
    print(f"review batch {record.batch}: {record.n_items} items x {len(record.annotators)} annotators "
          f"({', '.join(record.annotators)}), rule {record.rule.rule}" + (f" k={record.rule.k}" if record.rule.k else ""))
    for name in record.files.values():
        print(f"  {folder / name}")
    print(f"  {folder / 'batch.json'}  (fingerprint {record.fingerprint[:16]})")


def _export(args: argparse.Namespace) -> int:
    from transforms.review.batch import export_run

    lake = _lake(args)
    record = export_run(lake, args.run_id, to=args.to, annotators=args.annotators, batch=args.batch,
                        rule=_rule(args), limit=args.limit)
    _print_batch(record, lake)
    print(f"  run {args.run_id}: status awaiting_review")
    return 0


def _requeue(args: argparse.Namespace) -> int:
    from transforms.review.batch import requeue

    lake = _lake(args)
    _print_batch(requeue(lake, args.batch, to=args.to, annotators=args.annotators, name=args.name), lake)
    return 0


def _print_import(result: Any, manifest: Any) -> None:
    st = result.stats
    for path, f in st.get("files", {}).items():
        print(f"{path}: {f['judgments']} judgment(s), {f['valid']} valid"
              + "".join(f", {n} {r} (first at {f['first'][r]})" for r, n in f["rejected"].items()))
    print(f"imported {st['judgments']} judgment(s) into batch {st['batch']}: {st['judgments_valid']} valid"
          + "".join(f", {n} {r}" for r, n in st["judgments_rejected"].items()))
    print(f"  items {st['items']}: kept {st['kept']}" + "".join(f", {r} {n}" for r, n in st["dropped"].items()))
    print(f"  edits applied {st['edits_applied']}, labels changed {st['labels_changed']}, "
          f"disagreement queue {st['queue']}")
    if "agreement" in st:
        print("\n".join("  " + line for line in format_report(st["agreement"]).splitlines()))
    if manifest is None:
        print("  dry run: nothing written")
        return
    print(f"  run {manifest.run_id} (parent {', '.join(manifest.parents) or '-'}): {manifest.outputs['curated']}")
    if st.get("supersedes"):
        print(f"  supersedes the earlier import(s): {', '.join(st['supersedes'])}")


def _import(args: argparse.Namespace) -> int:
    from transforms.review.importing import check_import, import_files

    if args.dry_run:
        _print_import(check_import(_lake(args), args.batch, args.files, rule=_rule(args),
                                   allow_partial=args.allow_partial, replace=True), None)
        return 0
    result, manifest = import_files(_lake(args), args.batch, args.files, rule=_rule(args), replace=args.replace,
                                    allow_partial=args.allow_partial)
    _print_import(result, manifest)
    return 0


def _push(args: argparse.Namespace) -> int:
    from transforms.review.batch import ReviewError, batch_dir, load_batch
    from transforms.review.labelstudio import client, push, talking_to, tasks_for

    lake = _lake(args)
    record, items = load_batch(lake, args.batch)
    if record.labelstudio.get("project_id"):
        raise ReviewError(f"batch {record.batch!r} is already Label Studio project {record.labelstudio['project_id']} "
                          f"at {record.labelstudio.get('url')}; `review pull` it, or export a new batch")
    with talking_to(args.url):
        project = push(client(args.url, args.api_key), f"piqaforge {record.batch}", tasks_for(items, record.batch))
    record.labelstudio = {"url": args.url, "project_id": project}
    record.write(batch_dir(lake, record.batch))
    print(f"Label Studio project {project} at {args.url}/projects/{project}: {items.num_rows} tasks")
    return 0


def _pull(args: argparse.Namespace) -> int:
    from transforms.review.batch import ReviewError, batch_dir, load_batch
    from transforms.review.importing import import_files
    from transforms.review.labelstudio import client, pull, talking_to

    lake = _lake(args)
    record, _ = load_batch(lake, args.batch)
    if not record.labelstudio.get("project_id"):
        raise ReviewError(f"batch {args.batch!r} was never pushed to Label Studio (run `review push` first)")
    with talking_to(args.url):
        tasks, users = pull(client(args.url, args.api_key), int(record.labelstudio["project_id"]))
    # a JSON export as Label Studio writes it, with annotators resolved to their e-mail addresses
    for task in tasks:
        for ann in task["annotations"]:
            ann["completed_by"] = {"id": ann.get("completed_by"), "email": users.get(int(ann["completed_by"]))} \
                if isinstance(ann.get("completed_by"), int) else ann.get("completed_by")
    out = batch_dir(lake, record.batch) / f"labelstudio-export-{len(record.imports) + 1}.json"
    out.write_text(json.dumps(tasks, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    n = sum(len(t["annotations"]) for t in tasks)
    print(f"pulled {n} annotation(s) on {len(tasks)} task(s) into {out}")
    if not args.no_import:
        _print_import(*import_files(lake, args.batch, [out], replace=args.replace))
    return 0


def _auto(args: argparse.Namespace) -> int:
    from transforms.llm.base import EngineConfig
    from transforms.review.auto import AutoReviewConfig, auto_review

    engines = []
    for spec in args.engine or ["transformers:gemma3-270m"]:
        backend, _, model = spec.partition(":")
        engines.append(EngineConfig(backend=backend, model=model))  # type: ignore[arg-type]
    cfg = AutoReviewConfig(engines=engines, annotators=args.annotators,
                           **({"prompts": args.prompt} if args.prompt else {}))
    result, manifest = auto_review(_lake(args), args.batch, cfg)
    _print_import(result, manifest)
    return 0
