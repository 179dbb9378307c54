"""`piqaforge review agreement FILE...`: agreement statistics of long-format judgments, printed as text
or one JSON object (the statistics are transforms/review/agreement.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def run_agreement(args: argparse.Namespace) -> int:
    from transforms.review.agreement import AgreementConfig, agreement_report
    from transforms.review.judgments import rating_matrix

    item = [c.strip() for c in args.item.split(",")] if "," in args.item else args.item
    import pyarrow as pa

    from transforms.review.judgments import read_table, to_long

    parts = []
    for f in args.files:
        table = read_table(f)
        label = args.label or ("verdict" if "verdict" in table.column_names else "label")
        parts.append(to_long(table, item, args.annotator, label))
    long = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    if not args.raw_labels:
        long = normalise_verdicts(long)
    matrix = rating_matrix(long, on_duplicate=args.duplicates)
    cfg = AgreementConfig(n_boot=args.boot, seed=args.seed, confidence=args.confidence,
                          min_pair_items=args.min_pair_items, max_pairs=args.max_pairs,
                          raters_per_item=args.raters_per_item)
    report = agreement_report(matrix, cfg)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, allow_nan=False))
    else:
        print(format_report(report))
    return 0


def normalise_verdicts(long: Any) -> Any:
    """Labels that spell a review verdict (any case, or its full text) become the verdict, as the import
    reads them; other labels are left as they are."""
    import pyarrow as pa

    from transforms.review.validate import label_spellings

    spell = label_spellings()
    labels = [None if v is None else spell.get(str(v).strip().lower(), v) for v in long.column("label").to_pylist()]
    return long.set_column(long.column_names.index("label"), "label", pa.array(labels, pa.string()))


def _fmt(est: dict[str, Any]) -> str:
    if est.get("value") is None:
        return f"undefined ({est.get('undefined')})"
    text = f"{est['value']:.3f}"
    if est.get("ci"):
        text += f"  [{est['ci'][0]:.3f}, {est['ci'][1]:.3f}]"
    elif est.get("undefined"):
        text += f"  ({est['undefined']})"
    return text


def format_report(r: dict[str, Any]) -> str:
    conf = int(round(r["bootstrap"]["confidence"] * 100))
    fk = r["fleiss_kappa"]
    lines = [f"{r['items']} items, {r['annotators']} annotators, {r['ratings']} ratings, "
             f"categories: {', '.join(r['categories'])}  (intervals: {conf}% bootstrap over items, "
             f"{r['bootstrap']['replicates']} replicates, seed {r['bootstrap']['seed']})",
             f"  percent agreement   {_fmt(r['percent_agreement'])}  on {r['percent_agreement']['n_items']} items",
             f"  Fleiss' kappa       {_fmt(fk)}  on {fk['n_items']} items x {fk['raters_per_item']} raters",
             f"  Krippendorff alpha  {_fmt(r['krippendorff_alpha'])}  (nominal, {r['krippendorff_alpha']['n_items']} "
             "items)"]
    if fk["items_excluded"]:
        lines.append(f"  Fleiss left out {fk['items_excluded']} item(s) {fk['excluded_because']}, e.g. "
                     f"{', '.join(map(str, fk['excluded_items'][:5]))}")
    if r["items_with_one_rating"]:
        lines.append(f"  {r['items_with_one_rating']} item(s) have a single rating (no agreement to measure)")
    for key, value in r["notes"].items():
        if key != "rows" and value:
            lines.append(f"  note: {key.replace('_', ' ')}: {value}")
    lines.append("  per category (Fleiss' kappa_j):")
    for cat, info in r["per_category"].items():
        lines.append(f"    {cat:<14} share {info['share']:.3f}  {_fmt(info['fleiss_kappa'])}")
    if r["cohen_kappa"]:
        mean = r["cohen_kappa_mean"]
        lines.append(f"  Cohen's kappa per pair ({len(r['cohen_kappa'])} pairs"
                     + (f", mean {mean:.3f}" if mean is not None else "") + "):")
        for p in r["cohen_kappa"]:
            lines.append(f"    {p['pair'][0]} / {p['pair'][1]}  n={p['n_items']:<5} {_fmt(p)}  "
                         f"agree {p['percent_agreement']:.3f}")
    if r["cohen_pairs_not_reported"]:
        lines.append(f"  {r['cohen_pairs_not_reported']} more pair(s) share too few items or exceed --max-pairs")
    return "\n".join(lines)
