"""The labelling loop (transforms/review/labelling.py): a batch where the judge is least sure, spread over the
embedding space; a filled batch checked cell by cell and appended with who, when, round and batch."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from transforms.judge.labels import load_labels
from transforms.review.labelling import LabellingError, export_batch, import_batch, next_round, pick_batch


def test_the_batch_is_the_least_sure_rows_spread_over_the_space() -> None:
    # 12 rows at the threshold in one tight cluster, 12 nearly as unsure scattered elsewhere, 76 sure ones
    rng = np.random.default_rng(0)
    cluster = np.array([1.0, 0.0, 0.0, 0.0]) + 0.01 * rng.standard_normal((12, 4))
    scattered = rng.standard_normal((12, 4))
    sure = rng.standard_normal((76, 4))
    emb = np.vstack([cluster, scattered, sure])
    scores = np.concatenate([np.full(12, 0.50), np.full(12, 0.53), np.where(rng.random(76) < 0.5, 0.001, 0.999)])
    picked = pick_batch(scores, 0.5, emb, n=6)  # the pool: the 24 least sure
    assert len(picked) == len(set(picked)) == 6 and all(i < 24 for i in picked)  # none of the sure rows
    assert picked[0] < 12 and sum(i >= 12 for i in picked) >= 4  # not six near-copies from the cluster
    # log-odds: 0.0049 against 0.005 is as unsure as 0.49 against 0.5
    assert pick_batch(np.array([0.0049, 0.3]), 0.005, np.eye(2), n=1) == [0]


def _rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "text": f"=質問 {i}", "source": "crawl", "url": f"https://x/{i}", "score": i / n}
            for i in range(n)]


def _fill(folder: Path, out: Path, cells: dict[str, tuple[str, str, str]]) -> str:
    with (folder / "labelling.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["label"], r["annotator"], r["labelled_at"] = cells.get(r["id"], ("", "", ""))
    with out.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return str(out)


@pytest.fixture
def batch(tmp_path: Path) -> tuple[Path, Path, list[dict]]:
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"id": "r0", "text": "t", "everyday": 1}) + "\n", encoding="utf-8")
    folder = tmp_path / "labelling" / "run-round1"
    chosen = export_batch(_rows(40), threshold=0.5, embeddings=np.eye(40), n=8, folder=folder, label="everyday",
                          labels_path=str(labels), round_no=1, run_id="run")
    return folder, labels, chosen


def test_export_writes_a_spreadsheet_safe_csv_without_labelled_rows(batch) -> None:
    folder, _, chosen = batch
    assert len(chosen) == 8 and "r0" not in {r["id"] for r in chosen}
    with (folder / "labelling.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == [r["id"] for r in chosen]
    assert all(r["text"].startswith("'=") for r in rows)  # a formula-looking cell carries Excel's text marker
    assert json.loads((folder / "batch.json").read_text(encoding="utf-8"))["round"] == 1
    assert next_round(folder.parent, str(batch[1])) == 2


def test_import_appends_labels_with_who_when_round_and_batch(batch, tmp_path: Path) -> None:
    folder, labels, chosen = batch
    a, b, c = (r["id"] for r in chosen[:3])
    filled = _fill(folder, tmp_path / "filled.csv", {a: ("1", "Aiko", "2026-11-29"), b: ("0", "Ben", ""),
                                                      c: ("", "", "")})
    n, target = import_batch(folder, [filled], now="2026-11-30T09:00:00+00:00")
    assert (n, target) == (2, str(labels))
    rows = {r.id: r for r in load_labels(labels, label="everyday")}
    assert rows[a].value("everyday") == 1 and rows[b].value("everyday") == 0 and c not in rows
    assert rows[a].annotator == "Aiko" and rows[a].column("labelled_at") == "2026-11-29T00:00:00+00:00"
    assert rows[b].column("labelled_at") == "2026-11-30T09:00:00+00:00"
    assert rows[a].column("round") == 1 and rows[a].column("batch") == "run-round1"
    assert rows[a].text == chosen[0]["text"]  # the batch's text, not a cell someone edited
    with pytest.raises(LabellingError, match="imported before"):
        import_batch(folder, [filled])


@pytest.mark.parametrize("case, message", [
    ("unknown id", "not a row of batch"),
    ("label 2", "must be 0 or 1"),
    ("no name", "without a name"),
    ("bad date", "is not a date"),
])
def test_a_bad_cell_refuses_the_import_naming_file_and_line(batch, tmp_path: Path, case, message) -> None:
    folder, labels, chosen = batch
    first = chosen[0]["id"]
    cells = {"unknown id": ("1", "Aiko", ""), "label 2": ("2", "Aiko", ""), "no name": ("1", "", ""),
             "bad date": ("1", "Aiko", "yesterday")}[case]
    filled = _fill(folder, tmp_path / "filled.csv", {first: cells})
    if case == "unknown id":
        Path(filled).write_text(Path(filled).read_text(encoding="utf-8").replace(f"\n{first},", "\nX,", 1),
                                encoding="utf-8")
    before = labels.read_text(encoding="utf-8")
    with pytest.raises(LabellingError, match=rf"filled.csv:\d+: .*{message}"):
        import_batch(folder, [filled])
    assert labels.read_text(encoding="utf-8") == before  # nothing appended


def test_two_copies_that_disagree_are_refused(batch, tmp_path: Path) -> None:
    folder, _, chosen = batch
    one = _fill(folder, tmp_path / "a.csv", {chosen[0]["id"]: ("1", "Aiko", "")})
    two = _fill(folder, tmp_path / "b.csv", {chosen[0]["id"]: ("0", "Ben", "")})
    with pytest.raises(LabellingError, match="settle it in one copy"):
        import_batch(folder, [one, two])


def test_a_batch_is_half_random_half_least_sure_shuffled_and_repeatable(tmp_path: Path) -> None:
    # 200 rows: the least sure are r0..r39 (scores at the threshold); a random draw reaches far beyond them
    rows = [{"id": f"r{i}", "text": f"q{i}", "score": 0.5 if i < 40 else 0.999} for i in range(200)]
    emb = np.random.default_rng(1).standard_normal((200, 8))
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"id": "r199", "text": "t", "everyday": 1}) + "\n", encoding="utf-8")

    def export(folder: str, **kw) -> list[dict]:
        return export_batch(rows, threshold=0.5, embeddings=emb, n=10, folder=tmp_path / folder, label="everyday",
                            labels_path=str(labels), round_no=1, run_id="run", **kw)

    chosen = export("a")
    shares = [r["share"] for r in chosen]
    assert shares.count("random") == shares.count("uncertain") == 5  # RANDOM_SHARE: half
    assert all(int(r["id"][1:]) < 40 for r in chosen if r["share"] == "uncertain")  # the least sure rows
    assert "r199" not in {r["id"] for r in chosen}  # labelled already
    assert shares != sorted(shares) and shares != sorted(shares, reverse=True)  # shuffled: the shares look alike
    record = json.loads((tmp_path / "a" / "batch.json").read_text(encoding="utf-8"))
    assert record["shares"] == {r["id"]: r["share"] for r in chosen} and record["random_share"] == 0.5
    assert [r["id"] for r in export("b")] == [r["id"] for r in chosen]  # the same run and round: the same batch
    assert {r["share"] for r in export("c", random_share=0.0)} == {"uncertain"}
    assert {r["share"] for r in export("d", random_share=1.0)} == {"random"}
    with pytest.raises(LabellingError, match="between 0 and 1"):
        export("e", random_share=1.5)

    filled = _fill(tmp_path / "a", tmp_path / "filled.csv", {r["id"]: ("1", "Aiko", "") for r in chosen})
    import_batch(tmp_path / "a", [filled])
    imported = {r.id: r.column("share") for r in load_labels(labels, label="everyday")[1:]}
    assert imported == {r["id"]: r["share"] for r in chosen}  # each row says how it was chosen


def test_an_audit_batch_draws_only_kept_rows(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "text": f"q{i}", "score": i / 100} for i in range(100)]
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"id": "r99", "text": "t", "everyday": 1}) + "\n", encoding="utf-8")
    chosen = export_batch(rows, threshold=0.8, embeddings=np.eye(100), n=12, folder=tmp_path / "audit",
                          label="everyday", labels_path=str(labels), round_no=2, run_id="run", audit=True)
    assert len(chosen) == 12 and all(r["score"] >= 0.8 and r["share"] == "audit" for r in chosen)
    assert "r99" not in {r["id"] for r in chosen}
    assert "audit" in (tmp_path / "audit" / "README.md").read_text(encoding="utf-8")
    with pytest.raises(LabellingError, match="nothing to audit"):
        export_batch(rows, threshold=2.0, embeddings=np.eye(100), n=5, folder=tmp_path / "none", label="everyday",
                     labels_path=str(labels), round_no=3, run_id="run", audit=True)


def test_label_export_exports_a_random_share_by_default() -> None:
    import argparse

    from jobs import labelling

    parser = argparse.ArgumentParser()
    labelling.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["label", "export", "RUN"])
    assert args.random_share is None and args.audit is None  # _export then uses RANDOM_SHARE
    from transforms.review.labelling import RANDOM_SHARE

    assert 0 < RANDOM_SHARE < 1
    assert parser.parse_args(["label", "export", "RUN", "--audit", "30"]).audit == 30
