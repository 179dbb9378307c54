"""Run every judge of the Ko-PIQA cascade on labelled rows and measure it (docs/judges.md).

Judges: the supervised prefilter (its out-of-fold score for rows it was trained on, so a seed row is
never judged by a model that saw it), each ensemble member asked about every row, their unanimous
vote, and the whole cascade in its real order (prefilter, then members cheapest first, each asked
only while the vote is open). Cost: calls and prompt tokens actually spent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.judge.injection import flip_rate, load_templates, measure
from transforms.judge.linear import FittedLinear, prepare
from transforms.judge.metrics import judge_metrics, pr_curve
from transforms.recipes.ko_piqa.seeds import LabelledRow, kin_parity, load_labels

log = logging.getLogger("piqaforge.judges")


def prefilter_scores(rows: Sequence[LabelledRow], fitted: FittedLinear, training_labels: str,
                     embedder: Any) -> tuple[np.ndarray, int]:
    """Scores per row: out-of-fold for rows of the training file, the fitted model for the others."""
    train = load_labels(training_labels)
    oof = {(r.id, r.text): s for r, s in zip(train, fitted.oof_scores, strict=True)}
    scores = np.full(len(rows), np.nan)
    fresh = [i for i, r in enumerate(rows) if (r.id, r.text) not in oof]
    for i, r in enumerate(rows):
        scores[i] = oof.get((r.id, r.text), np.nan)
    if fresh:
        scores[fresh] = fitted.score_texts([rows[i].text for i in fresh], embedder)
    return scores, len(rows) - len(fresh)


def llm_tokens(stage: Any, clf: Any, texts: Sequence[str]) -> int | None:
    """Prompt tokens the member reads for these texts (None when its engine has no tokenizer here)."""
    engine = stage.engine_for(clf.short_name, clf.engine)
    encode = getattr(engine, "encode", None)
    if encode is None:
        return None
    prompt = clf.load_prompt()
    return int(sum(len(encode(engine.render_chat(prompt.render(text=t).messages))) for t in texts))


def curve(labels: np.ndarray, scores: np.ndarray, points: int = 60) -> dict[str, list[float]]:
    ok = np.isfinite(scores)
    t, p, r = pr_curve(labels[ok], scores[ok])
    pick = np.unique(np.linspace(0, len(t) - 1, min(points, len(t))).astype(int)) if len(t) else np.zeros(0, int)
    return {"threshold": t[pick].tolist(), "precision": np.nan_to_num(p[pick]).tolist(), "recall": r[pick].tolist()}


def evaluate(rows: Sequence[LabelledRow], *, fitted: FittedLinear, training_labels: str, embedder: Any,
             ensemble: Any, injection_rows: int = 80, seed: int = 0,
             members_on_prefilter_pass: bool = False) -> dict[str, Any]:
    """`members_on_prefilter_pass`: ask the members only about the rows the prefilter passes (all
    they ever see in the cascade; their figures are then conditional on it, and much cheaper)."""
    labels = np.array([bool(r.value("physical")) for r in rows])
    texts = [r.text for r in rows]
    ids = [r.id for r in rows]
    judges: dict[str, dict[str, Any]] = {}
    verdicts: dict[str, np.ndarray] = {}

    started = time.perf_counter()
    pre_scores, from_oof = prefilter_scores(rows, fitted, training_labels, embedder)
    verdicts["prefilter"] = pre_scores >= fitted.threshold
    e5_tokens = int(sum(embedder.embedder.token_counts([prepare(t, fitted.embed_chars) for t in texts])))
    judges["prefilter"] = judge_metrics(labels, verdicts["prefilter"], pre_scores) | {
        "kind": "linear", "model": f"{fitted.embedder.backend}:{fitted.embedder.model}+logreg",
        "threshold": fitted.threshold, "scored_out_of_fold": from_oof, "curve": curve(labels, pre_scores),
        "cost": {"llm_calls": 0, "embed_calls": len(rows), "tokens": e5_tokens},
        "seconds": round(time.perf_counter() - started, 1)}

    members = ensemble.ordered() if ensemble is not None else []
    member_tokens: dict[str, list[int] | None] = {}
    asked = verdicts["prefilter"] if members_on_prefilter_pass else np.ones(len(rows), dtype=bool)
    at = np.flatnonzero(asked)
    for clf in members:
        started = time.perf_counter()
        answers: list[Any] = list(ensemble.classify(clf, [ids[i] for i in at], [texts[i] for i in at]))
        prompt = clf.load_prompt()
        v = np.zeros(len(rows), dtype=bool)
        v[at] = [a.option is not None and clf.verdict(a, prompt) for a in answers]
        s = np.full(len(rows), np.nan)
        s[at] = [np.nan if a.score is None else a.score for a in answers]
        verdicts[clf.short_name] = v
        kind = "linear" if getattr(clf, "kind", "llm") == "linear" else "llm"
        per_row = None
        if kind == "llm":
            tok = [llm_tokens(ensemble, clf, [t]) if asked[i] else 0 for i, t in enumerate(texts)]
            per_row = None if any(x is None for x in tok) else [int(x) for x in tok if x is not None]
        member_tokens[clf.short_name] = per_row
        judges[clf.short_name] = judge_metrics(labels[at], v[at], s[at]) | {
            "asked": "rows the prefilter passed" if members_on_prefilter_pass else "every row",
            "kind": kind, "model": getattr(clf, "model_label", None) or clf.engine.model,
            "prompt": prompt.ref, "curve": curve(labels, s),
            "unparsable": int(sum(a.option is None for a in answers)),
            "cost": {"llm_calls": int(sum(a.calls for a in answers)), "tokens": sum(per_row) if per_row else None},
            "seconds": round(time.perf_counter() - started, 1)}

    if members:
        vote = np.all([verdicts[c.short_name] for c in members], axis=0)
        judges["unanimous"] = judge_metrics(labels[at], vote[at]) | {
            "kind": "vote", "members": [c.short_name for c in members],
            "cost": {"llm_calls": sum(judges[c.short_name]["cost"]["llm_calls"] for c in members)}}
    # The cascade in its real order: a member is asked only about rows every earlier judge passed.
    open_rows = verdicts["prefilter"].copy()
    calls, tokens = 0, 0
    for clf in members:
        calls += int(open_rows.sum()) if judges[clf.short_name]["kind"] == "llm" else 0
        per_row = member_tokens[clf.short_name]
        tokens += int(np.asarray(per_row)[open_rows].sum()) if per_row else 0
        open_rows &= verdicts[clf.short_name]
    judges["cascade"] = judge_metrics(labels, open_rows) | {
        "kind": "cascade", "order": ["prefilter", *[c.short_name for c in members]],
        "cost": {"llm_calls": calls, "llm_tokens": tokens, "embed_calls": len(rows), "embed_tokens": e5_tokens}}

    result: dict[str, Any] = {"rows": len(rows), "positives": int(labels.sum()), "judges": judges,
                              "by_group": by_group(rows, verdicts, labels, open_rows)}
    if injection_rows:
        result["injection"] = injection(rows, fitted, embedder, ensemble, members, injection_rows, seed)
    return result


def by_group(rows: Sequence[LabelledRow], verdicts: dict[str, np.ndarray], labels: np.ndarray,
             cascade: np.ndarray) -> dict[str, Any]:
    """Cascade and prefilter figures per source and KiN parity (even = seeds, odd = held out)."""
    groups = [f"naver_kin/{kin_parity(r.url)}" if kin_parity(r.url) else r.source for r in rows]
    out = {}
    for g in sorted(set(groups)):
        m = np.array([x == g for x in groups])
        out[g] = {"cascade": judge_metrics(labels[m], cascade[m]),
                  "prefilter": judge_metrics(labels[m], verdicts["prefilter"][m])}
    return out


def injection(rows: Sequence[LabelledRow], fitted: FittedLinear, embedder: Any, ensemble: Any,
              members: list[Any], n: int, seed: int) -> dict[str, Any]:
    """Flips per judge on a fixed-seed subset (half positives when there are enough)."""
    rng = np.random.default_rng(seed)
    pos = [i for i, r in enumerate(rows) if r.value("physical")]
    neg = [i for i, r in enumerate(rows) if not r.value("physical")]
    take = list(rng.permutation(pos)[: n // 2]) + list(rng.permutation(neg)[: n - min(len(pos), n // 2)])
    subset = [rows[i] for i in sorted(take)]
    texts = [r.text for r in subset]

    def gate(batch: list[str]) -> np.ndarray:
        return fitted.score_texts(batch, embedder) >= fitted.threshold

    def member(clf: Any) -> Any:
        def ask(batch: list[str]) -> np.ndarray:
            prompt = clf.load_prompt()
            answers = ensemble.classify(clf, [f"inj-{i}" for i in range(len(batch))], batch)
            return np.array([a.option is not None and clf.verdict(a, prompt) for a in answers])
        return ask

    judges: dict[str, Any] = {"prefilter": gate, **{c.short_name: member(c) for c in members}}

    def cascade(batch: list[str]) -> np.ndarray:
        out = gate(batch)
        for c in members:
            out &= member(c)(batch)
        return out

    judges["cascade"] = cascade
    out = {"rows": len(subset), "positives": sum(r.value("physical") for r in subset), "judges": measure(judges, texts)}
    # the template set (lake/samples/ko_injection_templates.yaml) on the negatives: the flip rate is the share of
    # attacked rows kept whose clean row is dropped; LLM members are asked only inside the cascade (in its order)
    negatives = [r.text for r in subset if not r.value("physical")]
    templates = load_templates()

    def in_order(batch: list[str]) -> np.ndarray:
        keep = gate(batch)
        for c in members:
            at = np.flatnonzero(keep)
            if len(at):
                keep[at] &= member(c)([batch[i] for i in at])
        return keep

    flips = {"prefilter": flip_rate(gate, negatives, templates)}
    flips |= {c.short_name: flip_rate(member(c), negatives, templates) for c in members
              if getattr(c, "kind", None) == "linear"}
    flips["cascade"] = flip_rate(in_order, negatives, templates)
    out["templates"] = {"negatives": len(negatives), "templates": len(templates), "judges": flips}
    return out
