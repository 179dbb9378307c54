"""What the injection defence buys and costs, on the default ko-piqa judges (docs/judges.md, issue 24).

    python -m jobs.judge_eval defence [--negatives 60] [--cache DIR] [--json OUT]

* flips: the template set (lake/samples/ko_injection_templates.yaml) on the labelled negatives the
  cascade drops whose scores come nearest a judge's cut, for each linear judge and the cascade, with the
  defence (the recipe's settings) and without it (`parts: false, guard: false`);
* cost: each judge refitted both ways (thresholds cross-validated as the job sets them), the cascade's
  out-of-fold recall and precision on the even-docId KiN seeds and the chit-chat seeds passing it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from transforms.judge.injection import flip_rate, load_templates
from transforms.judge.linear import LinearJudge, embedder_for, train, training_rows
from transforms.recipes.ko_piqa.seeds import load_labels

ROOT = Path(__file__).resolve().parents[3]
LABELS = ("ko_seed_labels.jsonl", "ko_heldout_labels.jsonl", "ko_seed_chitchat.jsonl")
WITHOUT = {"parts": False, "guard": False}


def recipe_judges(specs: dict[str, dict[str, Any]], **overrides: Any) -> dict[str, LinearJudge]:
    """LinearJudges from judge specs (name -> the recipe's `judge` fields), label paths made absolute."""
    out = {}
    for name, spec in specs.items():
        files = {"labels": str(ROOT / spec["labels"]),
                 "extra_labels": [str(ROOT / f) for f in spec.get("extra_labels", [])]}
        out[name] = LinearJudge.model_validate(spec | files | overrides)
    return out


def flips(judges: dict[str, LinearJudge], negatives: int, cache: str | None) -> dict[str, Any]:
    fitted = {k: train(j, cache) for k, j in judges.items()}
    emb = {k: embedder_for(j, cache) for k, j in judges.items()}
    texts = [r.text for f in LABELS for r in load_labels(ROOT / "lake" / "samples" / f, allow_held_out=True)
             if not r.value("physical")]
    ratio = np.minimum.reduce([fitted[k].score_texts(texts, emb[k]) / fitted[k].threshold for k in judges])
    order = [i for i in np.argsort(-ratio) if ratio[i] < 1]  # dropped by some judge, so by the cascade
    chosen = [texts[i] for i in order[:negatives]]

    def judge(k: str) -> Any:
        return lambda b: fitted[k].score_texts(b, emb[k], lazy_below=fitted[k].threshold) >= fitted[k].threshold

    def cascade(b: list[str]) -> np.ndarray:
        return np.all([judge(k)(b) for k in judges], axis=0)

    templates = load_templates()
    out = {k: flip_rate(judge(k), chosen, templates) for k in judges} | {"cascade": flip_rate(cascade, chosen, templates)}
    return {"negatives": len(chosen), "templates": len(templates), "judges": out}


def cost(judges: dict[str, LinearJudge], cache: str | None) -> dict[str, Any]:
    seeds = load_labels(ROOT / "lake" / "samples" / "ko_seed_labels.jsonl")
    keep, thresholds = {}, {}
    for name, j in judges.items():
        f = train(j, cache)
        oof = {r.id: s for r, s in zip(training_rows(j), f.oof_scores, strict=True)}
        rest = [r for r in seeds if r.id not in oof]
        if rest:  # rows a judge was not trained on (the chit-chat gate and KiN negatives): its fitted model
            oof.update(zip([r.id for r in rest], f.score_texts([r.text for r in rest], embedder_for(j, cache)),
                           strict=True))
        keep[name] = np.array([oof[r.id] >= f.threshold for r in seeds])
        thresholds[name] = round(f.threshold, 3)
    y = np.array([bool(r.value("physical")) for r in seeds])
    kin = np.array([r.source == "naver_kin" for r in seeds])
    kept = np.all(list(keep.values()), axis=0)
    return {"thresholds": thresholds, "kin_kept": int((kept & kin).sum()),
            "recall": round(float((kept & y).sum() / y.sum()), 3),
            "precision": round(float((kept & y).sum() / max((kept & kin).sum(), 1)), 3),
            "chitchat_passing": int((kept & ~kin).sum())}


def measure_defence(specs: dict[str, dict[str, Any]], negatives: int, cache: str | None,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """Both figures without the defence (`parts: false, guard: false`) and with the specs as they are."""
    result: dict[str, Any] = {}
    for label, overrides in (("without", WITHOUT), ("with", {})):
        judges = recipe_judges(specs, **overrides)
        result[label] = {"cost": cost(judges, cache), "flips": flips(judges, negatives, cache)}
        c = result[label]["cost"]
        say(f"{label} the defence: cascade recall {c['recall']:.3f}, precision {c['precision']:.3f} on the KiN "
            f"seeds ({c['kin_kept']} kept), {c['chitchat_passing']} chit-chat seeds passing; thresholds {c['thresholds']}")
        for name, f in result[label]["flips"]["judges"].items():
            say(f"  {name:<12} kept {f['no_to_yes']:>4} of {f['attacked_dropped_clean']:>6} attacked rows dropped clean "
                f"(flip rate {f['flip_rate']:.4f}); by kind {f['by_kind']}; by position {f['by_position']}")
    return result
