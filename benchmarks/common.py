"""A synthetic Korean crawl with known near-duplicates and exact copies, from real questions.

Every original row joins `parts` random pieces of real questions (Naver KiN, 3i4k, songys chatbot
and question pairs from ../shared/data; long KiN posts are cut into pieces of <= 40 characters),
so N can exceed the ~73k unique questions without making accidental copies. Then a fraction of rows is replaced by *variants* of an earlier row: spacing
changes, punctuation, a swapped particle (은/는, 이/가, 을/를) or a one-syllable typo, and another
fraction by exact copies. Each row records its `family` (the id of the original it derives from)
and `kind` (original | near | exact), which is the ground truth the benchmarks score against.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

def tree_cpu_seconds(proc) -> dict[int, float]:  # noqa: ANN001 (a psutil.Process)
    """User + system CPU seconds of `proc` and each of its descendants, by pid (the benchmarks' samplers
    keep the largest value seen per pid, so a worker that exits keeps what it used)."""
    import contextlib

    import psutil

    out = {}
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
    return out


PARTICLES = {"은": "는", "는": "은", "이": "가", "가": "이", "을": "를", "를": "을"}
PUNCT = "?.!,~"


def korean_questions(shared: Path = SHARED) -> list[str]:
    """Unique real Korean questions/utterances from the four bundled sources, in a fixed order."""
    texts: list[str] = []
    with open(shared / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl", encoding="utf-8") as f:
        texts += [json.loads(line)["question"] for line in f if line.strip()]
    with open(shared / "ko_3i4k" / "fci.txt", encoding="utf-8") as f:
        texts += [line.rstrip("\n").split("\t", 1)[-1] for line in f]
    with open(shared / "ko_chatbot_songys" / "ChatbotData.csv", encoding="utf-8") as f:
        texts += [row["Q"] for row in csv.DictReader(f)]
    for name in ("kor_pair_train.csv", "kor_Pair_test.csv"):
        with open(shared / "ko_question_pair_songys" / name, encoding="utf-8-sig") as f:
            for row in csv.DictReader(f):
                texts += [row["question1"], row["question2"]]
    seen: dict[str, None] = {}
    for t in texts:
        t = " ".join(t.split())
        if t:
            seen.setdefault(t, None)
    return list(seen)


def question_pieces(shared: Path = SHARED, max_chars: int = 40) -> list[str]:
    """The questions, long ones cut at spaces into pieces of at most ~`max_chars` characters.

    Rows are built from several pieces; without the cut, two rows that happen to share one long
    KiN question would be near-duplicates by accident, whatever their other parts.
    """
    pieces: dict[str, None] = {}
    for t in korean_questions(shared):
        words, cur = t.split(" "), ""
        for w in words:
            if cur and len(cur) + 1 + len(w) > max_chars:
                pieces.setdefault(cur, None)
                cur = w
            else:
                cur = f"{cur} {w}" if cur else w
        if cur:
            pieces.setdefault(cur, None)
    return list(pieces)


def perturb(text: str, rng: random.Random, edits: int = 1) -> str:
    """A near-duplicate: `edits` random spacing/punctuation/particle/typo changes."""
    for _ in range(edits):
        kind = rng.choice(("space", "punct", "particle", "typo"))
        chars = list(text)
        if kind == "space":
            spaces = [i for i, c in enumerate(chars) if c == " "]
            if spaces and rng.random() < 0.5:
                del chars[rng.choice(spaces)]
            else:
                chars.insert(rng.randrange(1, max(len(chars), 2)), " ")
        elif kind == "punct":
            if chars and chars[-1] in PUNCT:
                chars[-1] = rng.choice(PUNCT)
            else:
                chars.append(rng.choice(PUNCT))
        elif kind == "particle":
            spots = [i for i, c in enumerate(chars) if c in PARTICLES and (i + 1 == len(chars) or chars[i + 1] == " ")]
            if spots:
                i = rng.choice(spots)
                chars[i] = PARTICLES[chars[i]]
            else:
                kind = "typo"
        if kind == "typo":
            hangul = [i for i, c in enumerate(chars) if "가" <= c <= "힣"]
            if hangul:
                i = rng.choice(hangul)
                # A neighbouring syllable: same initial consonant and vowel, another final consonant.
                chars[i] = chr(0xAC00 + ((ord(chars[i]) - 0xAC00) // 28) * 28 + rng.randrange(28))
        text = "".join(chars)
    return text


@dataclass
class Crawl:
    table: pa.Table  # id, text, source, family, kind

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def texts(self) -> list[str]:
        return self.table.column("text").to_pylist()


def build_crawl(n: int, *, near_rate: float = 0.10, exact_rate: float = 0.03, parts: int = 4,
                max_edits: int = 2, seed: int = 0, shared: Path = SHARED) -> Crawl:
    """`n` rows: originals, plus `near_rate` near-duplicates and `exact_rate` exact copies of them."""
    pool = question_pieces(shared)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    n_near, n_exact = int(n * near_rate), int(n * exact_rate)
    n_orig = n - n_near - n_exact
    picks = nrng.integers(0, len(pool), size=(n_orig, parts))
    originals = [" ".join(pool[j] for j in row) for row in picks.tolist()]
    width = len(str(n))
    ids = [f"crawl-{i:0{width}d}" for i in range(n)]
    # Shuffle positions so copies are spread over all blocks, like a real crawl.
    order = nrng.permutation(n)
    text: list[str] = [""] * n
    family: list[str] = [""] * n
    kind: list[str] = [""] * n
    orig_pos = order[:n_orig]
    for pos, t in zip(orig_pos.tolist(), originals, strict=True):
        text[pos], family[pos], kind[pos] = t, ids[pos], "original"
    sources = nrng.integers(0, n_orig, size=n_near + n_exact)
    for k, pos in enumerate(order[n_orig:].tolist()):
        src = int(orig_pos[sources[k]])
        if k < n_near:
            text[pos] = perturb(text[src], rng, rng.randint(1, max_edits))
            kind[pos] = "near"
        else:
            text[pos], kind[pos] = text[src], "exact"
        family[pos] = ids[src]
    table = pa.table({"id": ids, "text": text, "source": ["synthetic-ko"] * n, "family": family, "kind": kind})
    return Crawl(table)


def char_ngrams(text: str, n: int = 5) -> set[str]:
    text = text if len(text) >= n else text.ljust(n, "\x00")
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def jaccard(a: str, b: str, n: int = 5) -> float:
    x, y = char_ngrams(a, n), char_ngrams(b, n)
    return len(x & y) / len(x | y) if x or y else 1.0


def score_clusters(crawl: Crawl, duplicate_of: dict[str, str], threshold: float, ngram: int = 5
                   ) -> dict[str, float]:
    """Precision of the drops and recall of the injected pairs.

    Precision: a dropped row is right when its kept row is in the same family. `precision_jaccard`
    also accepts drops whose exact n-gram Jaccard with their kept row reaches `threshold`: real
    near-duplicates that were already in the source questions. Recall: an injected (copy,
    original) pair is found when both ended in the same cluster; `recall_above_threshold` only
    counts pairs whose exact Jaccard reaches `threshold` (what the stage is asked to find).
    """
    ids = crawl.table.column("id").to_pylist()
    fam = dict(zip(ids, crawl.table.column("family").to_pylist(), strict=True))
    txt = dict(zip(ids, crawl.texts(), strict=True))
    kinds = dict(zip(ids, crawl.table.column("kind").to_pylist(), strict=True))
    tp = sum(1 for d, r in duplicate_of.items() if fam[d] == fam[r])  # r: the row d was judged a copy of
    fp_pairs = [(d, r) for d, r in duplicate_of.items() if fam[d] != fam[r]]
    fp_true_near = sum(1 for d, r in fp_pairs if jaccard(txt[d], txt[r], ngram) >= threshold)

    def cluster(i: str) -> str:
        # Follow chains: an exact copy may point at a row that near-dedup dropped in turn.
        for _ in range(len(duplicate_of) + 1):
            if i not in duplicate_of:
                return i
            i = duplicate_of[i]
        raise ValueError("duplicate_of has a cycle")

    pairs = [(i, fam[i]) for i in ids if kinds[i] != "original"]
    found = [cluster(a) == cluster(b) for a, b in pairs]
    near = [(a, b, f) for (a, b), f in zip(pairs, found, strict=True) if kinds[a] == "near"]
    above = [f for a, b, f in near if jaccard(txt[a], txt[b], ngram) >= threshold]
    exact = [f for (a, _), f in zip(pairs, found, strict=True) if kinds[a] == "exact"]
    return {
        "dropped": len(duplicate_of),
        "injected": len(pairs),
        "precision": tp / len(duplicate_of) if duplicate_of else 1.0,
        "precision_jaccard": (tp + fp_true_near) / len(duplicate_of) if duplicate_of else 1.0,
        "recall": sum(found) / len(found) if found else 1.0,
        "recall_near": sum(f for _, _, f in near) / len(near) if near else 1.0,
        "recall_exact": sum(exact) / len(exact) if exact else 1.0,
        "recall_above_threshold": sum(above) / len(above) if above else 1.0,
        "near_above_threshold": len(above) / len(near) if near else 1.0,
        "false_positives": len(fp_pairs),
        "false_positives_true_near": fp_true_near,
    }


def seed_shares(run) -> dict[str, dict]:  # noqa: ANN001 (a transforms.core.manifest.RunManifest)
    """`piqaforge plan`'s seed entry per stage of a finished run (jobs/plan.py `seed_runs`): the rows it
    processed (a source stage's rows in are the rows it read), the rows it kept and the config its rate belongs to;
    a benchmark adds the stage's rate."""
    from jobs.plan import rate_config

    if run.status not in ("succeeded", "awaiting_review"):
        raise SystemExit(f"run {run.run_id}: its status is {run.status!r}; a seed's shares need a finished run")
    out: dict[str, dict] = {}
    for st in run.stages:
        entry: dict = {"rows_in": st.rows_in or st.rows_created, "rows_kept": st.rows_kept}
        if st.config:
            entry["config"] = rate_config(st.config)
        out[st.name] = entry
    return out
