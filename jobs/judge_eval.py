"""`piqaforge judge-eval --labels FILE [--config FILE] [--set k=v] [--out DIR]`: measure every judge.

Runs the ko-piqa config's prefilter, every ensemble member, their unanimous vote and the whole
cascade on the labelled rows; writes judges.json and judges.html (tables + precision-recall plot)
under --out and prints one line per judge. The LLM answers go to a cache under --out, so a rerun
(or a rerun with another threshold) asks no model twice.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("judge-eval", help="measure the ko-piqa judges on labelled rows (docs/judges.md)")
    p.add_argument("--labels", action="append", required=True,
                   help="labelled JSONL (repeatable: seeds and the held-out set are measured together)")
    p.add_argument("--config", help="ko-piqa YAML merged over the defaults")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value")
    p.add_argument("--out", default="lake/judges", help="output folder (default lake/judges)")
    p.add_argument("--injection-rows", type=int, default=80, help="questions attacked with each injection (0: skip)")
    p.add_argument("--no-llm", action="store_true", help="measure the prefilter only")
    p.add_argument("--members-on-prefilter-pass", action="store_true",
                   help="ask the ensemble members only about rows the prefilter passes (all they see in the cascade)")


def run(args: argparse.Namespace) -> int:
    from transforms.embed.cache import CachedEmbedder
    from transforms.flow.config_io import parse_set
    from transforms.flow.recipe import REPO, load_recipe
    from transforms.flow.runs.common import run_stages
    from transforms.judge.gate import SupervisedPrefilter
    from transforms.recipes.ko_piqa.cascade_eval import evaluate
    from transforms.recipes.ko_piqa.judge_report import render_judge_eval
    from transforms.recipes.ko_piqa.seeds import load_labels

    def _resolve(path: str) -> str:  # a relative labels path: the working directory, else the repository
        p = Path(path)
        return str(p.resolve()) if p.is_absolute() or p.exists() else str(REPO / p)

    overrides = dict(parse_set(item) for item in args.set or [])
    recipe = load_recipe("ko-piqa", {"prefilter": "supervised", **overrides}, config_file=args.config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = str(Path("lake").resolve() / "cache" / "embeddings")
    _, stages = run_stages(recipe, "crawl", lake="lake")   # the recipe's own judges, as its crawl run builds them
    prefilter = next((s for s in stages if isinstance(s, SupervisedPrefilter)), None)
    if prefilter is None:
        raise ValueError("judge-eval measures the supervised prefilter: the ko-piqa recipe has none with these settings")
    training = prefilter.judge.labels_path
    gate = prefilter.model_copy(update={"embed_cache_dir": cache})
    fitted = gate.fit()
    rows = [r for path in args.labels for r in load_labels(_resolve(path), allow_held_out=True)]
    ensemble = None
    recipe_ensemble = next((s for s in stages if s.name == "ensemble"), None)
    if recipe_ensemble is not None and not args.no_llm:
        ensemble = recipe_ensemble.model_copy(update={"cache_dir": str(out / "cache" / "ensemble")})
        same = {"target_recall"}
        for clf in ensemble.classifiers:
            if getattr(clf, "kind", None) != "linear":
                continue
            if clf.judge.model_dump(exclude=same) == prefilter.judge.model_dump(exclude=same):
                clf.use_fitted(fitted)  # the prefilter's model at another cut: fit once
            else:  # a judge of its own (e.g. the chit-chat gate): trained on its labels, through the same cache
                clf.embed_cache_dir = cache
        ensemble.ensure_setup()
    result: dict[str, Any] = evaluate(rows, fitted=fitted, training_labels=training,
                                      embedder=CachedEmbedder(fitted.embedder, cache), ensemble=ensemble,
                                      injection_rows=args.injection_rows,
                                      members_on_prefilter_pass=args.members_on_prefilter_pass)
    result["labels"] = [str(p) for p in args.labels]
    result["prefilter_cv"] = {k: v for k, v in fitted.cv.items() if k != "curve"}
    (out / "judges.json").write_text(json.dumps(result, indent=1, default=float), encoding="utf-8")
    html = ("<!doctype html><html><head><meta charset='utf-8'><title>judge-eval</title><style>body{font-family:"
            "sans-serif;max-width:1000px;margin:2rem auto} td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:"
            "right} td.l,th.l{text-align:left} table{border-collapse:collapse}</style></head><body>"
            + render_judge_eval(result) + "</body></html>")
    (out / "judges.html").write_text(html, encoding="utf-8")
    flips = result.get("injection", {}).get("templates", {}).get("judges", {})
    print(f"{'judge':<12}{'precision':>10}{'recall':>8}{'AUC':>7}{'pass':>7}{'LLM calls':>10}{'flip rate':>11}")
    for name, j in result["judges"].items():
        auc = j.get("auc")
        flip = f"{flips[name]['flip_rate']:.4f}" if name in flips else "-"
        print(f"{name:<12}{j['precision']:>10.3f}{j['recall']:>8.3f}{(auc if auc is not None else float('nan')):>7.3f}"
              f"{j['pass_rate']:>7.3f}{j['cost'].get('llm_calls', 0):>10}{flip:>11}")
    for name, f in flips.items():
        print(f"injection templates {name:<12} kept {f['no_to_yes']} of {f['attacked_dropped_clean']} attacked rows "
              f"whose clean row is dropped (flip rate {f['flip_rate']:.4f}; by position {f['by_position']})")
    for name, v in result.get("injection", {}).get("judges", {}).items():
        print(f"injection {name:<12} no->yes {v['no_to_yes']:>3}  yes->no {v['yes_to_no']:>3}  of {v['verdicts']}")
    print(f"judge-eval: wrote {out / 'judges.json'} and {out / 'judges.html'}", file=sys.stderr)
    return 0


def ko_piqa_linear_judges() -> dict[str, dict[str, Any]]:
    """The ko-piqa recipe's linear judges as its crawl run declares them: name -> `judge` fields."""
    from transforms.flow.recipe import load_recipe

    stages = {s.stage: s.fields for s in load_recipe("ko-piqa").run("crawl").stages}
    specs = {"prefilter": stages["supervised_prefilter"]["judge"]}
    specs |= {c["name"]: c["judge"] for c in stages["ensemble"]["classifiers"] if c.get("kind") == "linear"}
    return specs


def defence_main(argv: list[str] | None = None) -> int:
    """`python -m jobs.judge_eval defence`: the injection defence's flip rates and recall cost (docs/judges.md)."""
    from transforms.recipes.ko_piqa.defence import ROOT, measure_defence

    p = argparse.ArgumentParser(prog="python -m jobs.judge_eval defence",
                                description="flip rate and recall cost of the injection defence (issue 24)")
    p.add_argument("--negatives", type=int, default=60, help="labelled negatives attacked (nearest the cuts)")
    p.add_argument("--cache", default=str(ROOT / "lake" / "cache" / "embeddings"), help="embedding cache")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    result = measure_defence(ko_piqa_linear_judges(), args.negatives, args.cache)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False, default=float), encoding="utf-8")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["defence"]:
        sys.exit("usage: python -m jobs.judge_eval defence [--negatives N] [--cache DIR] [--json OUT]")
    sys.exit(defence_main(sys.argv[2:]))
