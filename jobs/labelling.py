"""`piqaforge label export RUN_ID --n N [--random-share S | --audit N]` and `piqaforge label import BATCH --from
FILLED`: the labelling loop (transforms/review/labelling.py). Export writes a batch under <lake>/labelling/ of the
rows a run's `supervised_prefilter` scored: half drawn at random from them (the judge's threshold and the kept
set's precision estimate are set on these), half where the judge was least sure, spread over the embedding
space; `--audit N` draws N of the kept rows instead. Import checks the filled CSV and appends its labels, with
annotator, date, round, batch and share, to the judge's labels file, which the next run learns from.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("label", help="the labelling loop: export rows to label (a random share and the ones the "
                       "judge is least sure of), import labels")
    verbs = p.add_subparsers(dest="label_command", required=True)
    export = verbs.add_parser("export", help="a labelling batch from a run whose supervised_prefilter scored rows")
    export.add_argument("run_id", help="the run holding the prefilter (`piqaforge runs`)")
    export.add_argument("--n", type=int, default=50, help="rows in the batch (default 50)")
    export.add_argument("--random-share", type=float, default=None,
                        help="share of the batch drawn at random from the crawl, the rest where the judge is least "
                        "sure (default 0.5: the threshold and the kept set's precision estimate are set on it)")
    export.add_argument("--audit", type=int, default=None, metavar="N",
                        help="instead: N rows drawn at random from the rows the judge kept, to estimate the kept "
                        "set's precision")
    export.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    imp = verbs.add_parser("import", help="append a filled labelling batch to the judge's labels file")
    imp.add_argument("batch", help="the batch folder (<lake>/labelling/<batch>)")
    imp.add_argument("--from", dest="files", nargs="+", required=True, help="the filled labelling.csv (or copies)")
    imp.add_argument("--labels", help="the labels file to append to (default: the one the batch was made for)")
    imp.add_argument("--dry-run", action="store_true", help="check the files and say what would be appended")


def run(args: argparse.Namespace) -> int:
    from transforms.review.labelling import LabellingError

    try:
        return _export(args) if args.label_command == "export" else _import(args)
    except LabellingError as err:
        from jobs.errors import UserError

        raise UserError(str(err)) from None


def _export(args: argparse.Namespace) -> int:
    from transforms.core.lake import Lake, read_table
    from transforms.core.manifest import RunManifest
    from transforms.embed.cache import CachedEmbedder
    from transforms.judge.linear import FittedLinear, prepare
    from transforms.review.labelling import RANDOM_SHARE, LabellingError, export_batch, next_round

    lake = Lake(args.lake)
    folder = lake.run_dir(args.run_id) / "prefilter"
    if not (folder / "model.json").exists():
        raise LabellingError(f"run {args.run_id!r} in {lake.root} has no prefilter/model.json: export from the run "
                             "whose supervised_prefilter scored the crawl")
    fitted = FittedLinear.model_validate_json((folder / "model.json").read_text(encoding="utf-8"))
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    dataset = RunManifest.load(lake.manifest_path(args.run_id)).dataset
    rows = [r for zone in ("curated", "rejected") if lake.zone(zone, dataset, args.run_id).exists()
            for r in read_table(lake.zone(zone, dataset, args.run_id)).to_pylist()
            if r.get("prefilter_score") is not None]
    for r in rows:
        r["score"] = r["prefilter_score"]
    embedder = CachedEmbedder(fitted.embedder, lake.root / "cache" / "embeddings")
    embeddings = embedder.encode([prepare(r["text"], fitted.embed_chars) for r in rows])
    batches = lake.root / "labelling"
    round_no = next_round(batches, report["labels"])
    audit = args.audit is not None
    if audit and args.random_share is not None:
        raise LabellingError("--audit draws from the kept rows only: it takes no --random-share")
    out = batches / f"{args.run_id}-{'audit' if audit else 'round'}{round_no}"
    chosen = export_batch(rows, threshold=float(report["threshold"]), embeddings=embeddings,
                          n=args.audit if audit else args.n, folder=out, label=report.get("label", "physical"),
                          labels_path=report["labels"], round_no=round_no, run_id=args.run_id, audit=audit,
                          random_share=RANDOM_SHARE if args.random_share is None else args.random_share)
    shares = ", ".join(f"{sum(r['share'] == s for r in chosen)} {s}" for s in ("random", "uncertain", "audit")
                       if any(r["share"] == s for r in chosen))
    print(f"labelling batch {out}: {len(chosen)} rows ({shares}; round {round_no}); fill labelling.csv, then\n"
          f"  piqaforge label import {out} --from FILLED.csv")
    return 0


def _import(args: argparse.Namespace) -> int:
    from transforms.review.labelling import import_batch

    n, target = import_batch(Path(args.batch), args.files, labels_path=args.labels, dry_run=args.dry_run)
    verb = "would append" if args.dry_run else "appended"
    print(f"{verb} {n} labelled rows to {target}; the next run of the recipe learns from them")
    return 0
