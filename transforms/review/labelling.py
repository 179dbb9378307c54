"""The labelling loop: a batch of crawl rows, part drawn at random and part where the judge is least sure,
labelled by people, appended to the judge's labels file, and learnt from on the next run.

1. **Export** (`export_batch`): the rows a `supervised_prefilter` scored in a run, minus those already labelled.
   A share `random_share` of the N rows (half, by default) is drawn uniformly from them: the judge sets its
   threshold on these rows and the labels the team started with (`judge.threshold_on: representative`), and the
   run report estimates the kept set's precision and recall from them (transforms/judge/linear.kept_estimate),
   because they represent the crawl. The rest are where the judge is least sure, which is where a label teaches
   the model most: from the `pool_factor` x N rows whose score is nearest the threshold (in log-odds: a row at
   0.49 against 0.50 is as unsure as one at 0.0049 against 0.005), rows spread over the embedding space (greedy
   farthest-point, starting at the least sure row), so one dense cluster of near-identical questions does not
   fill the batch. An audit batch (`audit=True`) is N rows drawn uniformly from the kept rows only, for the
   kept set's precision. The rows are written shuffled, so nobody can tell the shares apart, as `labelling.csv`
   (the CSV form of review batches: UTF-8, one row a line, cells a spreadsheet cannot run as formulas,
   transforms/review/batch_files.py), `batch.json` (which row came from which share) and `README.md`.
2. **Import** (`import_batch`): every filled row is checked (an id of the batch, a label of 0 or 1, a name in
   `annotator`, a date in `labelled_at` or none); one bad cell refuses the whole import, naming file, line and
   the cell. Rows left blank stay unlabelled. Accepted rows are appended to the labels file with `annotator`,
   `labelled_at` (UTC, the import's time when the cell is empty), `round` (the batch's), `batch` and `share`
   (random, uncertain or audit).
3. **Refit**: the next run of the recipe trains the judge on the grown file (its sha is in the prefilter's
   report); the new rows' embeddings come from the cache. Imported rows train; the held-out rows stay the ones
   the split picked among the labels the team started with (`judge.imported_rows`).
"""

from __future__ import annotations

import csv
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from transforms.review.batch_files import spreadsheet_safe

CSV_COLUMNS = ["id", "text", "source", "url", "score", "label", "annotator", "labelled_at", "comment"]
# The share of a batch drawn at random from the crawl unless a team asks for another (`label export --random-share`):
# the benchmark (docs/tutorials/your_crawl.md) measures the loop at it.
RANDOM_SHARE = 0.5


class LabellingError(ValueError):
    """A batch cannot be made or a filled batch cannot be imported (the message names file, line and cell)."""


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def pick_batch(scores: np.ndarray, threshold: float, embeddings: np.ndarray, n: int, pool_factor: int = 4
               ) -> list[int]:
    """Indices of `n` rows: the least sure `pool_factor * n` (nearest the threshold in log-odds), then spread
    over the embedding space by greedy farthest-point selection (cosine distance) from the least sure."""
    if n <= 0 or not len(scores):
        return []
    doubt = np.abs(_logit(scores) - _logit(np.array([threshold]))[0])
    pool = np.argsort(doubt, kind="stable")[:max(n, pool_factor * n)]
    emb = np.asarray(embeddings, dtype=np.float64)[pool]
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    chosen = [0]
    nearest = 1.0 - emb @ emb[0]
    while len(chosen) < min(n, len(pool)):
        nxt = int(np.argmax(nearest))
        chosen.append(nxt)
        nearest = np.minimum(nearest, 1.0 - emb @ emb[nxt])
    return [int(pool[i]) for i in chosen]


def _labelled_ids(paths: list[str]) -> set[str]:
    ids: set[str] = set()
    for path in paths:
        if Path(path).exists():
            for line in Path(path).read_text(encoding="utf-8-sig").splitlines():
                if line.strip():
                    ids.add(str(json.loads(line).get("id")))
    return ids


def batch_rng(run_id: str, round_no: int) -> np.random.Generator:
    """The random draws of one run's batch of one round: the same on every machine, another for another round."""
    return np.random.default_rng(int.from_bytes(hashlib.sha256(f"{run_id}\x00{round_no}".encode()).digest()[:8],
                                                "big"))


def choose_rows(scores: np.ndarray, threshold: float, embeddings: np.ndarray, n: int, *, random_share: float,
                audit: bool, rng: np.random.Generator) -> list[tuple[int, str]]:
    """(index, share) of the rows of a batch: `round(random_share * n)` drawn uniformly, the rest by `pick_batch`
    among the others; with `audit`, n drawn uniformly from the rows scoring >= threshold. In a shuffled order."""
    scores = np.asarray(scores, dtype=np.float64)
    if audit:
        kept = np.flatnonzero(scores >= threshold)
        if not len(kept):
            raise LabellingError("no unlabelled row is kept (scores >= the threshold): nothing to audit")
        out = [(int(i), "audit") for i in rng.choice(kept, min(n, len(kept)), replace=False)]
    else:
        n = min(n, len(scores))
        drawn = rng.choice(len(scores), min(round(random_share * n), n), replace=False)
        rest = np.setdiff1d(np.arange(len(scores)), drawn)
        near = pick_batch(scores[rest], threshold, np.asarray(embeddings)[rest], n - len(drawn))
        out = [(int(i), "random") for i in drawn] + [(int(rest[i]), "uncertain") for i in near]
    return [out[i] for i in rng.permutation(len(out))]


def export_batch(rows: list[dict[str, Any]], *, threshold: float, embeddings: np.ndarray, n: int, folder: Path,
                 label: str, labels_path: str, round_no: int, run_id: str, already: list[str] | None = None,
                 random_share: float = RANDOM_SHARE, audit: bool = False) -> list[dict[str, Any]]:
    """Write a labelling batch of `n` of `rows` (each with id, text, score) to `folder`; returns the rows chosen
    (each with its `share`), in the CSV's order."""
    if not 0 <= random_share <= 1:
        raise LabellingError(f"random_share {random_share} must be between 0 and 1")
    done = _labelled_ids(already or [labels_path])
    keep = [i for i, r in enumerate(rows) if str(r["id"]) not in done]
    if not keep:
        raise LabellingError("every scored row is labelled already: nothing to export")
    picked = choose_rows(np.array([rows[i]["score"] for i in keep]), threshold, np.asarray(embeddings)[keep], n,
                         random_share=random_share, audit=audit, rng=batch_rng(run_id, round_no))
    chosen = [rows[keep[i]] | {"share": share} for i, share in picked]
    folder.mkdir(parents=True, exist_ok=False)
    with (folder / "labelling.csv").open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in chosen:
            writer.writerow([spreadsheet_safe(v) for v in (r["id"], r["text"], r.get("source") or "",
                                                           r.get("url") or "", f"{r['score']:.4f}", "", "", "", "")])
    record = {"batch": folder.name, "round": round_no, "label": label, "labels": labels_path, "run": run_id,
              "threshold": threshold, "ids": [str(r["id"]) for r in chosen],
              "shares": {str(r["id"]): r["share"] for r in chosen}, "random_share": None if audit else random_share,
              "rows": {str(r["id"]): {k: r.get(k) for k in ("text", "source", "url")} for r in chosen},
              "made_at": datetime.now(UTC).isoformat(timespec="seconds")}
    (folder / "batch.json").write_text(json.dumps(record, ensure_ascii=False, indent=1), encoding="utf-8")
    counts = {s: sum(r["share"] == s for r in chosen) for s in ("random", "uncertain", "audit")}
    what = (f"{len(chosen)} rows drawn at random from the rows the judge keeps (score at least its threshold "
            f"{threshold:.3f}): an audit of the kept set's precision" if audit else
            f"{len(chosen)} rows: {counts['random']} drawn at random from the crawl (the judge sets its threshold "
            f"and the run report its precision estimate on these) and {counts['uncertain']} the judge is least sure "
            f"of (score nearest its threshold {threshold:.3f}), spread over the embedding space, in a shuffled order")
    (folder / "README.md").write_text(
        f"# Labelling batch {folder.name} (round {round_no})\n\n{what}.\n\nFill `label` with "
        f"1 (the row is `{label}`) or 0 (it is not), write your name in `annotator`; `labelled_at` (a date) and "
        "`comment` are optional. Leave `id` as it is; a row left blank stays unlabelled (label every row if you "
        "can: skipping the hard ones makes the estimates too kind). Several people may each "
        f"fill a copy.\n\n```bash\npiqaforge label import {folder} --from FILLED.csv\n```\n\nThe rows are "
        f"appended to `{labels_path}` with annotator, date, round {round_no}, batch and share; the next run of the "
        "recipe learns from them.\n", encoding="utf-8")
    return chosen


def _date(value: str) -> str | None:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).isoformat(timespec="seconds")


def read_filled(folder: Path, files: list[str], now: str | None = None) -> list[dict[str, Any]]:
    """The labelled rows of the filled copies, checked; raises LabellingError naming file, line and cell."""
    from transforms.io.input_files import InputFileError, read_sheet, require_columns, unformat

    record = json.loads((folder / "batch.json").read_text(encoding="utf-8"))
    label, when = record["label"], now or datetime.now(UTC).isoformat(timespec="seconds")
    out: dict[str, dict[str, Any]] = {}
    for path in files:
        try:
            sheet = read_sheet(path)
            require_columns(sheet, [["id"], ["label"], ["annotator"]], "labelling batch")
        except InputFileError as err:
            raise LabellingError(str(err)) from None
        for line, row in zip(sheet.lines, sheet.rows, strict=True):
            cell = {k: (unformat(v) or "") for k, v in row.items()}
            where = f"{path}:{line}"
            if cell["id"] not in record["rows"]:
                raise LabellingError(f"{where}: id {cell['id']!r} is not a row of batch {record['batch']}")
            if not cell["label"]:
                continue
            if cell["label"] not in ("0", "1"):
                raise LabellingError(f"{where}: label {cell['label']!r} must be 0 or 1 (or empty: not labelled)")
            if not cell["annotator"]:
                raise LabellingError(f"{where}: label {cell['label']} without a name in `annotator`")
            at = _date(cell.get("labelled_at", "")) if cell.get("labelled_at") else when
            if at is None:
                raise LabellingError(f"{where}: labelled_at {cell['labelled_at']!r} is not a date (2026-11-29 or "
                                     "2026-11-29T10:00)")
            seen = out.get(cell["id"])
            if seen is not None and seen[label] != int(cell["label"]):
                raise LabellingError(f"{where}: {cell['id']} is labelled {cell['label']} here and {seen[label]} by "
                                     f"{seen['annotator']}: settle it in one copy")
            source = record["rows"][cell["id"]]
            out[cell["id"]] = {"id": cell["id"], "text": source["text"], "source": source.get("source") or "",
                               "url": source.get("url"), label: int(cell["label"]), "annotator": cell["annotator"],
                               "labelled_at": at, "round": record["round"], "batch": record["batch"],
                               "share": (record.get("shares") or {}).get(cell["id"], "uncertain"),
                               "note": cell.get("comment", "")}
    return list(out.values())


def import_batch(folder: Path, files: list[str], *, labels_path: str | None = None, dry_run: bool = False,
                 now: str | None = None) -> tuple[int, str]:
    """Append the filled batch's labelled rows to the labels file (the batch's unless given); (rows, path)."""
    record = json.loads((folder / "batch.json").read_text(encoding="utf-8"))
    target = labels_path or record["labels"]
    rows = read_filled(folder, files, now)
    twice = sorted({r["id"] for r in rows} & _labelled_ids([target]))
    if twice:
        raise LabellingError(f"{target} labels {len(twice)} of these rows already ({', '.join(twice[:5])}): "
                             "was this batch imported before?")
    if rows and not dry_run:
        with Path(target).open("a", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(rows), target


def next_round(batches: Path, labels_path: str) -> int:
    """1 + the rounds of the batches already made for this labels file."""
    rounds = [json.loads(p.read_text(encoding="utf-8")).get("round", 0) for p in batches.glob("*/batch.json")
              if json.loads(p.read_text(encoding="utf-8")).get("labels") == labels_path]
    return 1 + max(rounds, default=0)
