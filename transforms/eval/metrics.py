"""Accuracy with a Wilson interval, random baselines, swap consistency and the log-likelihood picks; pure functions.

Accuracy is computed over *scored* replies only (parsed exactly or leniently); refusals, empty
and unparsable replies are omitted and counted beside it. With nothing scored the accuracy is
None and the interval the uninformative [0, 1], never a division by zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

Z95 = 1.959963984540054


def wilson_interval(correct: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; [0, 1] when n == 0."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy(correct: Sequence[bool | None], statuses: Sequence[str] | None = None) -> dict[str, Any]:
    """Accuracy over the non-None entries of `correct`; None entries are omitted and counted.

    `statuses` (one per entry) breaks the omitted count down by reason (refusal, empty, ...).
    """
    n_total = len(correct)
    scored = [c for c in correct if c is not None]
    n, k = len(scored), sum(bool(c) for c in scored)
    lo, hi = wilson_interval(k, n)
    omitted: dict[str, int] = {}
    if statuses is not None:
        for c, s in zip(correct, statuses, strict=True):
            if c is None:
                omitted[s] = omitted.get(s, 0) + 1
    return {"n": n_total, "scored": n, "correct": k, "omitted": n_total - n, "omitted_by": omitted,
            "acc": (k / n) if n else None, "ci_low": lo, "ci_high": hi}


def random_baseline(labels: Sequence[int], n_options: int = 2) -> dict[str, Any]:
    """Expected accuracy of guessers that never look at the item.

    uniform:   picks each option with probability 1/n_options            -> 1/n_options
    empirical: samples a label from the label distribution p              -> sum_i p_i^2
    majority:  always answers the most frequent label                     -> max_i p_i
    """
    n = len(labels)
    if n == 0:
        return {"n": 0, "label_dist": {}, "uniform": 1 / n_options, "empirical": None, "majority": None}
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=n_options)
    p = counts / n
    return {"n": n, "label_dist": {str(i): int(c) for i, c in enumerate(counts)}, "uniform": 1 / n_options,
            "empirical": float(np.sum(p * p)), "majority": float(p.max())}


def swap_consistency(pred_original: Sequence[int | None], pred_swapped: Sequence[int | None]) -> dict[str, Any]:
    """How often a model picks the same *solution* when the two are shown in the other order.

    `pred_swapped` is in the swapped run's positions, so the same solution is 1 - pred. Items where
    either run gave no answer are left out (and counted). `first_position_rate` is the share of all
    answers that named the first slot: 0.5 for a model without position bias.
    """
    pairs = [(a, b) for a, b in zip(pred_original, pred_swapped, strict=True) if a is not None and b is not None]
    n = len(pairs)
    same = sum(1 for a, b in pairs if a == 1 - b)
    answered = [p for p in (*pred_original, *pred_swapped) if p is not None]
    lo, hi = wilson_interval(same, n)
    return {"pairs": n, "omitted": len(pred_original) - n, "consistent": same,
            "consistency": (same / n) if n else None, "ci_low": lo, "ci_high": hi,
            "first_position_rate": (sum(1 for p in answered if p == 0) / len(answered)) if answered else None}


def grouped_accuracy(predictions: pa.Table, by: Sequence[str]) -> list[dict[str, Any]]:
    """Accuracy per group of `by` columns over a predictions table (`correct`, `status` columns)."""
    cols = predictions.select([*by, "correct", "status"]).to_pydict()
    groups: dict[tuple[Any, ...], tuple[list[bool | None], list[str]]] = {}
    for i in range(predictions.num_rows):
        key = tuple(cols[c][i] for c in by)
        correct, statuses = groups.setdefault(key, ([], []))
        correct.append(cols["correct"][i])
        statuses.append(cols["status"][i])
    out = []
    for key in sorted(groups, key=lambda k: tuple(str(v) for v in k)):
        correct, statuses = groups[key]
        out.append({**dict(zip(by, key, strict=True)), **accuracy(correct, statuses)})
    return out


def utf8_length(text: str) -> int:
    """Bytes of `text` in UTF-8: 1 per ASCII letter, 2 per Cyrillic, 3 per Hangul, kana, kanji or Tamil letter."""
    return len(text.encode("utf-8"))


def loglik_picks(lls: np.ndarray, sol1: Sequence[str], sol2: Sequence[str]) -> dict[str, np.ndarray]:
    """The three log-likelihood choices lm-evaluation-harness makes, from summed log-probabilities (n, 2).

    acc        argmax of log P(" " + solution | context)
    acc_norm   argmax of it divided by the solution's length in characters (`len(choice)` in lm-eval)
    acc_bytes  argmax of it divided by the solution's length in UTF-8 bytes (lm-eval's `acc_bytes`,
               added for Global PIQA: a character is one byte in English, two in Russian, three in
               Korean, Japanese or Tamil, and a Tamil "character" is itself ambiguous: a consonant
               with its vowel sign is one letter to a reader and two code points to `len`)
    Lengths are those of the solution without the leading space, at least 1; ties go to sol1
    (np.argmax), as in lm-eval.
    """
    scores = np.asarray(lls, dtype=np.float64).reshape(-1, 2)
    chars = np.array([[max(1, len(a)), max(1, len(b))] for a, b in zip(sol1, sol2, strict=True)],
                     dtype=np.float64).reshape(-1, 2)
    nbytes = np.array([[max(1, utf8_length(a)), max(1, utf8_length(b))] for a, b in zip(sol1, sol2, strict=True)],
                      dtype=np.float64).reshape(-1, 2)
    return {"acc": np.argmax(scores, axis=1), "acc_norm": np.argmax(scores / chars, axis=1),
            "acc_bytes": np.argmax(scores / nbytes, axis=1)}
