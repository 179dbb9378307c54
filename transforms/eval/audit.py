"""Artifact audit: can a release be solved without understanding the goal?

Each baseline looks at less than a model should need; a release on which one of them does much
better than chance has a shortcut (annotation artifacts, as in hypothesis-only NLI baselines):
    longer_solution     pick the longer solution (characters)
    goal_overlap        pick the solution sharing more word types with the goal
    majority_position   always answer the more frequent label (a lopsided label balance)
    bow_logreg          logistic regression on the two solutions alone: features are the difference
                        of their word and character n-gram count vectors, k-fold cross-validated
    solution_only_model (optional, needs an engine) the model scores each solution with the goal hidden
Ties (equal lengths, equal overlap) count half, the expected accuracy of breaking them by a coin.
The release is flagged when any baseline's accuracy exceeds `bound` (default 0.6).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from transforms.core.deps import require
from transforms.eval import items as I
from transforms.eval.metrics import random_baseline, wilson_interval

_WORD = re.compile(r"\w+", re.UNICODE)


def _score(pred_first: np.ndarray, pred_second: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """Accuracy of a rule that prefers sol1 where pred_first, sol2 where pred_second, else a coin."""
    n = len(labels)
    ties = ~(pred_first | pred_second)
    credit = np.where(ties, 0.5, np.where(pred_first, labels == 0, labels == 1).astype(float))
    acc = float(credit.mean()) if n else None
    lo, hi = wilson_interval(float(credit.sum()), n) if n else (0.0, 1.0)
    return {"acc": acc, "ci_low": lo, "ci_high": hi, "n": n, "ties": int(ties.sum())}


def longer_solution(table: pa.Table) -> dict[str, Any]:
    s1, s2 = table.column(I.SOL1).to_pylist(), table.column(I.SOL2).to_pylist()
    l1 = np.array([len(s or "") for s in s1])
    l2 = np.array([len(s or "") for s in s2])
    return _score(l1 > l2, l2 > l1, np.asarray(table.column(I.LABEL).to_pylist()))


def _words(text: str | None) -> set[str]:
    return {w.lower() for w in _WORD.findall(text or "")}


def goal_overlap(table: pa.Table) -> dict[str, Any]:
    goals = [_words(g) for g in table.column(I.GOAL).to_pylist()]
    o1 = np.array([len(g & _words(s)) for g, s in zip(goals, table.column(I.SOL1).to_pylist(), strict=True)])
    o2 = np.array([len(g & _words(s)) for g, s in zip(goals, table.column(I.SOL2).to_pylist(), strict=True)])
    return _score(o1 > o2, o2 > o1, np.asarray(table.column(I.LABEL).to_pylist()))


def majority_position(table: pa.Table) -> dict[str, Any]:
    rb = random_baseline(table.column(I.LABEL).to_pylist())
    n = rb["n"]
    acc = rb["majority"]
    lo, hi = wilson_interval(acc * n, n) if n else (0.0, 1.0)
    return {"acc": acc, "ci_low": lo, "ci_high": hi, "n": n, "label_dist": rb["label_dist"]}


def bow_logreg(table: pa.Table, folds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Cross-validated accuracy of a solutions-only bag-of-n-grams logistic regression.

    Features: x = v(sol1) - v(sol2) with v = binary word 1-2-gram and character 2-4-gram counts. Each training item is also added swapped (-x, 1 - y), so the
    classifier cannot learn "answer sol1" from the label balance (majority_position reports that).
    """
    require("sklearn", "embed", "the bag-of-words artifact baseline")
    from scipy.sparse import hstack, vstack
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold

    s1 = [s or "" for s in table.column(I.SOL1).to_pylist()]
    s2 = [s or "" for s in table.column(I.SOL2).to_pylist()]
    y = np.asarray(table.column(I.LABEL).to_pylist(), dtype=int)
    n = len(y)
    k = min(folds, n)
    if k < 2:
        return {"acc": None, "skipped": f"needs at least 2 items for cross-validation, has {n}", "n": n}
    # The vocabulary is fitted once on all solutions: it sees no labels, so nothing about the answer
    # leaks, and it saves refitting the character n-grams per fold on a 2-core machine.
    vecs = [CountVectorizer(analyzer="word", ngram_range=(1, 2), min_df=2, lowercase=True, binary=True),
            CountVectorizer(analyzer="char_wb", ngram_range=(2, 4), min_df=2, lowercase=True, binary=True,
                            max_features=50000)]
    fitted = []
    for v in vecs:
        try:
            v.fit(s1 + s2)
            fitted.append(v)
        except ValueError:  # empty vocabulary: nothing occurs twice
            continue
    if not fitted:
        return {"acc": None, "skipped": "no n-gram occurs twice in the solutions", "n": n}
    x = (hstack([v.transform(s1) for v in fitted]) - hstack([v.transform(s2) for v in fitted])).tocsr()
    accs, correct = [], 0
    for train, test in KFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(n)):
        x_aug = vstack([x[train], -x[train]])
        y_aug = np.concatenate([y[train], 1 - y[train]])
        clf = LogisticRegression(C=1.0, solver="liblinear", max_iter=1000, fit_intercept=False)
        clf.fit(x_aug, y_aug)
        pred = clf.predict(x[test])
        hits = int((pred == y[test]).sum())
        correct += hits
        accs.append(hits / len(test))
    lo, hi = wilson_interval(correct, n)
    return {"acc": float(np.mean(accs)), "fold_acc": [round(a, 4) for a in accs], "folds": k,
            "pooled_acc": correct / n, "ci_low": lo, "ci_high": hi, "n": n}


def solution_only_model(table: pa.Table, engine: Any, model: str = "model", batch_size: int = 16) -> dict[str, Any]:
    """The model scores ' <solution>' after the log-likelihood context rendered with an empty goal."""
    from transforms.eval.evaluator import LOGLIK_NORM, loglik_predictions
    from transforms.eval.templates import load_loglik_contexts

    preds = loglik_predictions(engine, table, model=model, contexts=load_loglik_contexts(), hide_goal=True,
                               batch_size=batch_size)
    out: dict[str, Any] = {"n": table.num_rows, "model": model}
    for method in sorted(set(preds.column("method").to_pylist())):
        mine = [c for c, m in zip(preds.column("correct").to_pylist(), preds.column("method").to_pylist(),
                                  strict=True) if m == method]
        correct = [c for c in mine if c is not None]  # an unusable score is omitted, not a guess
        k = sum(bool(c) for c in correct)
        lo, hi = wilson_interval(k, len(correct))
        out[method] = {"acc": k / len(correct) if correct else None, "ci_low": lo, "ci_high": hi,
                       "omitted": len(mine) - len(correct)}
    norm = out.get(LOGLIK_NORM, {})
    out["acc"] = norm.get("acc")
    return out


def audit_release(table: pa.Table, bound: float = 0.6, *, engine: Any = None, model: str = "model",
                  folds: int = 5, seed: int = 0, min_items: int = 20) -> dict[str, Any]:
    """Run every shortcut baseline on `table` (goal/sol1/sol2/label) and flag the release.

    Returns {"n", "bound", "baselines": {name: {"acc", "ci_low", "ci_high", ...}}, "flagged",
    "flags": [names over the bound], "chance"}. An empty table or one that cannot be scored gives
    accuracies of None and is not flagged on them; a baseline that could not run says why in "skipped".
    Below `min_items` items the baselines are still reported but never flag: on 5 items one lucky
    coin flip moves a baseline by 20 points.
    """
    if not 0 < bound < 1:
        raise ValueError(f"bound must be a fraction between 0 and 1, got {bound}")
    table = I.prepare_items(table)
    baselines: dict[str, dict[str, Any]] = {}
    if table.num_rows == 0:
        return {"n": 0, "bound": bound, "baselines": {}, "flagged": False, "flags": [],
                "note": "no items to audit", "chance": 0.5}
    baselines["longer_solution"] = longer_solution(table)
    baselines["goal_overlap"] = goal_overlap(table)
    baselines["majority_position"] = majority_position(table)
    baselines["bow_logreg"] = bow_logreg(table, folds=folds, seed=seed)
    if engine is not None:
        baselines["solution_only_model"] = solution_only_model(table, engine, model)
    flags = [name for name, b in baselines.items() if b.get("acc") is not None and b["acc"] > bound]
    out = {"n": table.num_rows, "bound": bound, "baselines": baselines, "flagged": bool(flags),
           "flags": flags, "chance": 0.5}
    if table.num_rows < min_items:
        out.update(flagged=False, flags=[], over_bound=flags,
                   note=f"only {table.num_rows} items (< {min_items}): reported, not flagged")
    return out


def audit_markdown(audit: dict[str, Any], title: str = "Artifact audit") -> str:
    lines = [f"### {title}", "", f"{audit['n']} items; a baseline above {100 * audit['bound']:.0f}% flags the release.",
             "", "| baseline | accuracy | 95% CI | over bound |", "|---|---|---|---|"]
    for name, b in audit["baselines"].items():
        if b.get("acc") is None:
            lines.append(f"| {name} | n/a | | {b.get('skipped', '')} |")
            continue
        over = "**yes**" if name in audit["flags"] else "no"
        lines.append(f"| {name} | {100 * b['acc']:.1f} | [{100 * b.get('ci_low', 0):.1f}, "
                     f"{100 * b.get('ci_high', 1):.1f}] | {over} |")
    verdict = f"FLAGGED ({', '.join(audit['flags'])})" if audit["flagged"] else "not flagged"
    if audit.get("note"):
        verdict += f" ({audit['note']})"
    return "\n".join([*lines, "", f"Verdict: {verdict}.", ""])
