"""The ta-piqa job end to end: writer files → checks → neighbours → review batch → review → release.

Default tier: the duplicate votes, the intake slice, and run 1 + export on 11 records (Ray, e5).
Slow tier (2 min each and more on this machine): the whole chain on 25 records (the planted duplicates
included) with judgments written by the test as a filled CSV (4 annotators, disagreements, duplicate
comments), the manifest's percent agreement and Fleiss' kappa compared with a direct computation here;
and review=auto with four LLM annotators (two local llama.cpp models x two review prompts) on 2 items.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from transforms.dedup.review_neighbours import ReviewerDuplicates
from transforms.io.writers_intake import WritersIntake, record_positions

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "lake" / "samples" / "ta_items"
# first 4 items per writer (the originals of every planted duplicate) + writer_d's 9 planted ones
TINY = {"*": "1-4", "writer_d.xlsx": "1-4,151-159"}


# -- pieces ----------------------------------------------------------------------------------------------
def test_record_positions_parse_and_refuse_bad_specs():
    assert record_positions("1-3, 7,10-11") == {1, 2, 3, 7, 10, 11}
    for bad in ("0-3", "a-b", "3-x", "-4"):
        with pytest.raises(ValueError, match="record selection"):
            record_positions(bad)


def test_intake_reads_only_the_selected_records(tmp_path):
    table = WritersIntake(path=str(SAMPLE), allow_malformed=True, records={"*": "1-30", "writer_d.xlsx": "1-30,151-159"},
                          feedback_dir=str(tmp_path)).rows()
    assert table.num_rows == 129
    reasons = sorted(r for r in table.column("drop_reason").to_pylist() if r)
    # the 30th record of each writer is damaged (docs/ta_piqa.md)
    assert reasons == ["bad_label", "identical_solutions", "malformed_row", "mojibake"]
    summary = json.loads((tmp_path / "summary.json").read_text("utf-8"))
    assert {w: s["rows"] for w, s in summary.items()} == {"writer_a": 30, "writer_b": 30, "writer_c": 30,
                                                          "writer_d": 39}


def _votes_table(comments: list[list[str | None]], suggested: list[str | None]) -> pa.Table:
    return pa.table({"id": [f"i{k}" for k in range(len(comments))],
                     "review_annotators": [[f"ann_{j + 1}" for j in range(len(c))] for c in comments],
                     "review_comments": comments, "dup_suggested_of": suggested})


def test_duplicate_votes_follow_the_unanimous_rule():
    table = _votes_table(
        [["duplicate", "duplicate", "dup", "duplicate of x1"],       # 4 votes, suggested x1 and named x1
         ["duplicate", "duplicate", "duplicate", None],              # 3 of 4: not confirmed
         ["duplicate of a7", "நகல் a7", "Duplicate: a7", "duplicate of a7"],   # named, Tamil word too
         ["duplicated words, fine", None, "", "ok"]],                # not a vote
        ["x1", "x2", None, None])
    out = ReviewerDuplicates().process(table)
    assert out.column("review_duplicate_of").to_pylist() == ["x1", None, "a7", None]
    assert out.column("review_duplicate_votes").to_pylist() == [4, 3, 4, 0]
    three = ReviewerDuplicates(min_votes=3).process(table)
    assert three.column("review_duplicate_of").to_pylist() == ["x1", "x2", "a7", None]


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text("utf-8-sig"))))


# -- independent agreement figures -----------------------------------------------------------------------
def percent_agreement(verdicts: dict[str, list[str]]) -> float:
    return sum(len(set(v)) == 1 for v in verdicts.values()) / len(verdicts)


def fleiss_kappa(verdicts: dict[str, list[str]]) -> float:
    """Fleiss (1971) from the item x category count table, written out here."""
    cats = sorted({c for v in verdicts.values() for c in v})
    counts = np.array([[v.count(c) for c in cats] for v in verdicts.values()], dtype=float)
    n = counts.sum(axis=1)[0]
    p_i = ((counts ** 2).sum(axis=1) - n) / (n * (n - 1))
    p_j = counts.sum(axis=0) / counts.sum()
    p_bar, p_e = p_i.mean(), (p_j ** 2).sum()
    return float((p_bar - p_e) / (1 - p_e))


def fill_review_csv(batch_dir: Path, out: Path) -> tuple[dict[str, list[str]], dict[str, str | None]]:
    """Four annotators' verdicts and comments, with planned disagreements. Returns the verdicts per item
    and the item each item must be confirmed a duplicate of."""
    import pyarrow.parquet as pq

    items = pq.read_table(batch_dir / "items.parquet").to_pylist()
    by_id = {r["id"]: r for r in items}
    rows = _csv_rows(batch_dir / "review.csv")
    verdicts: dict[str, list[str]] = {}
    confirmed: dict[str, str | None] = {}
    order = sorted(by_id)
    for row in rows:
        item = by_id[row["item_id"]]
        k, ann = order.index(item["id"]), row["annotator"]
        right = "sol1" if item["label"] == 0 else "sol2"
        verdict = right
        if k % 5 == 1 and ann == "ann_4":
            verdict = "both_wrong"                      # one dissenter
        elif k % 7 == 3 and ann in ("ann_2", "ann_3"):
            verdict = "not_physical"                    # a 2-2 split
        elif k == 2:
            verdict = "sol2" if right == "sol1" else "sol1"   # unanimous against the writer's label
        comment = ""
        source = item.get("source") or ""
        if item["dup_level"] == "near" and item["dup_suggested_of"]:
            comment = "duplicate"                       # every annotator: confirmed
        elif source == "written-paraphrase" and item["dup_suggested_of"] and ann != "ann_1":
            comment = f"duplicate of {item['dup_suggested_of']}"   # 3 of 4: not confirmed
        row.update(verdict=verdict, comment=comment)
        verdicts.setdefault(item["id"], []).append(verdict)
    for item in items:
        confirmed[item["id"]] = item["dup_suggested_of"] if item["dup_level"] == "near" and \
            item["dup_suggested_of"] else None
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return verdicts, confirmed


# -- the recipe (jobs/recipes/ta-piqa.yaml) --------------------------------------------------------------
def _recipe(**overrides):
    from transforms.flow.recipe import load_recipe

    # the bundled writers' files plant two cut lines: the run is `piqaforge run ta-piqa --allow-malformed`
    return load_recipe("ta-piqa", {"records": TINY, "runs.review.review.auto.n_boot": 200, "allow_malformed": True,
                                   **overrides})


def _figures(lake: Path, run_id: str) -> dict:
    return json.loads((lake / "runs" / run_id / "figures.json").read_text("utf-8"))


def test_job_wiring_on_a_tiny_slice_stops_awaiting_review(tmp_path, ray_local):
    """The items run + export on 11 records: the first 2 of each writer and writer_d's 3 verbatim copies."""
    from transforms.core.manifest import RunManifest
    from transforms.flow.orchestrator import run_recipe

    lake = tmp_path / "lake"
    out = run_recipe(_recipe(records={"*": "1-2", "writer_d.xlsx": "1-2,151-153"}), lake=lake, run_id="ta-w")
    manifest = RunManifest.load(lake / "runs" / "ta-w-items" / "manifest.json")
    assert manifest.status == "awaiting_review" and out["status"] == "awaiting_review"
    assert [s.name for s in manifest.stages] == ["writers_intake", "prompt_length", "opening_variety", "contrast",
                                                 "degenerate", "safety_screen", "review_neighbours"]
    figures = _figures(lake, "ta-w-items")
    assert figures["items"] == 11 and "ta_piqa" not in manifest.extras   # figures in their own record
    pairs = {p["id"]: (p["of"], p["level"]) for p in figures["neighbours"]["pairs"]}
    # writer_d's records 151-153 copy val-0002, val-0005, val-0006 (writer_c 1, writer_b 2, writer_c 2)
    assert pairs == {"writer_d-151": ("writer_c-1", "exact"), "writer_d-152": ("writer_b-2", "exact"),
                     "writer_d-153": ("writer_c-2", "exact")}
    batch = lake / "review" / out["review_batch"]
    assert {f.name for f in batch.iterdir()} >= {"batch.json", "items.parquet", "review.csv", "context.csv",
                                                   "guidelines.md", "README.md"}
    rows = _csv_rows(batch / "review.csv")
    assert len(rows) == 11 * 4 and {r["annotator"] for r in rows} == {"ann_1", "ann_2", "ann_3", "ann_4"}
    assert json.loads((lake / "runs" / "ta-w-items" / "feedback" / "summary.json").read_text("utf-8"))[
        "writer_d"] == {"rows": 5, "accepted": 5, "rejected": 0, "reasons": {}}


@pytest.mark.slow
def test_job_export_then_imported_csv_to_release(tmp_path, ray_local):
    import pyarrow.parquet as pq

    from transforms.core.lake import Lake
    from transforms.core.manifest import RunManifest
    from transforms.flow.orchestrator import run_recipe
    from transforms.review.importing import import_files

    lake = tmp_path / "lake"
    recipe = _recipe(version="t1")
    out = run_recipe(recipe, lake=lake, run_id="ta-t")
    assert out["status"] == "awaiting_review" and "review import" in out["next"]
    items_run = RunManifest.load(lake / "runs" / "ta-t-items" / "manifest.json")
    assert items_run.status == "awaiting_review"
    stats = _figures(lake, "ta-t-items")
    assert stats["items"] == 25                           # no damaged row among the first 4 of any writer
    assert sum(w["rejected"] for w in stats["feedback"].values()) == 0
    # the planted duplicates, each at its level, pointing at its original (docs/ta_piqa.md)
    assert stats["neighbours"]["suggested"] == {"exact": 3, "near": 3, "semantic": 3}
    assert sorted((lake / "runs" / "ta-t-items" / "feedback").glob("*.csv"))
    batch = lake / "review" / out["review_batch"]
    record = json.loads((batch / "batch.json").read_text("utf-8"))
    assert record["annotators"] == ["ann_1", "ann_2", "ann_3", "ann_4"] and record["rule"]["rule"] == "unanimous"
    context = _csv_rows(batch / "context.csv")
    assert len(context) == 25 and sum(bool(r["suggested_duplicate_of"]) for r in context) == 9
    assert "4 annotator(s) per item" in (batch / "README.md").read_text("utf-8")

    verdicts, confirmed = fill_review_csv(batch, tmp_path / "filled.csv")
    _, review = import_files(Lake(lake), out["review_batch"], [tmp_path / "filled.csv"], n_boot=200)
    ag = review.extras["review"]["agreement"]
    assert ag["percent_agreement"]["value"] == pytest.approx(percent_agreement(verdicts))
    assert ag["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(verdicts))
    assert 0.0 < percent_agreement(verdicts) < 1.0

    done = run_recipe(recipe, lake=lake, run_id="ta-t", resume=True)
    final = RunManifest.load(lake / "runs" / "ta-t-final" / "manifest.json")
    assert final.parents == [review.run_id] and review.parents == ["ta-t-items"]
    # kept = unanimous on the writer's label, minus confirmed duplicates (near: voted; exact: auto-confirmed)
    exact = {r["item_id"] for r in context if r["level"] == "exact" and r["suggested_duplicate_of"]}
    labels = {r["id"]: r["label"] for r in pq.read_table(batch / "items.parquet").to_pylist()}
    agreed = {i for i, v in verdicts.items() if len(set(v)) == 1 and v[0] == ("sol1" if labels[i] == 0 else "sol2")}
    expected = agreed - exact - {i for i, d in confirmed.items() if d}
    kept = pq.read_table(Path(final.outputs["curated"])).column("id").to_pylist()
    assert sorted(kept) == sorted(expected)
    dropped = pq.read_table(lake / "rejected" / "ta-piqa" / "ta-t-final").to_pylist()
    assert {r["id"]: r["duplicate_of"] for r in dropped} == {
        **{i: d for i, d in confirmed.items() if d and i in agreed},
        **{r["item_id"]: r["suggested_duplicate_of"] for r in context if r["item_id"] in exact & agreed}}
    release = Path(done["release"])
    readme = (release / "README.md").read_text("utf-8")
    assert "Fleiss" in readme and "XCOPA-ta" in readme and f"| items | {len(expected):,} |" in readme
    assert f"{percent_agreement(verdicts):.3f}"[:4] in readme
    assert done["released"] and (release / "RELEASED").exists() and done["exit_code"] == 0, done
    # the Hub layout, loaded with `datasets` row for row as the gate passed it
    from hubutil import assert_hub_ready, gated_table

    assert_hub_ready(release, gated_table(lake, "ta-t-release"), tmp_path / "hf")
    meta = readme.split("---")[1]
    assert "- expert-generated" in meta and "license: cc-by-4.0" in meta and "extended|cambridgeltl/xcopa" in meta
    assert "Krippendorff" in readme and "95% CI" in readme


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 1.5B-model option scoring of Tamil prompts: > 13 min for 6 items at load 35
def test_job_review_auto_with_four_llm_annotators(tmp_path, ray_local):
    import pyarrow.parquet as pq

    from transforms.core.manifest import RunManifest
    from transforms.flow.orchestrator import run_recipe

    lake = tmp_path / "lake"
    out = run_recipe(_recipe(review="auto", review_limit=2, version="auto1",
                             records={"*": "1-2", "writer_d.xlsx": "1-2,151-153"}), lake=lake, run_id="ta-auto")
    review = RunManifest.load(lake / "runs" / out["runs"]["review"] / "manifest.json")
    assert review.parents == ["ta-auto-items"] and review.extras["review"]["automatic"] is True
    judgments = pq.read_table(lake / "review" / "review-ta-auto-items" / "judgments.parquet")
    names = set(judgments.column("annotator").to_pylist())
    assert len(names) == 4 and all(n.startswith("llm:") for n in names)
    assert judgments.num_rows == 2 * 4
    final = RunManifest.load(lake / "runs" / "ta-auto-final" / "manifest.json")
    if final.stages[-1].rows_kept:   # what four weak LLMs agree on unanimously varies; both outcomes are handled
        assert "no person reviewed" in (Path(out["release"]) / "README.md").read_text("utf-8")
    else:
        assert out["status"] == "nothing_to_release" and out["exit_code"] == 1
