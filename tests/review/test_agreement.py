"""Agreement statistics against published worked examples and against direct numpy implementations
of the formulas (written here from the definitions, independent of transforms/review) on real
multi-annotator data in ../shared/data."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from jobs.cli import main
from transforms.review.agreement import AgreementConfig, agreement_report, kappa_replicates
from transforms.review.judgments import JudgmentError, rating_matrix, read_judgments

pytest.importorskip("statsmodels")
pytest.importorskip("krippendorff")

# Fleiss (1971), Table 1: 30 patients, 6 psychiatrists each, 5 diagnoses (1 depression,
# 2 personality disorder, 3 schizophrenia, 4 neurosis, 5 other); kappa = 0.430.
FLEISS_1971 = [
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5], [2, 2, 2, 4, 4, 4],
    [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4], [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5],
    [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4], [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5],
    [3, 3, 3, 3, 3, 5], [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4], [1, 4, 4, 4, 4, 5],
    [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4], [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5]]
# ... and its per-category kappas (as R irr::kappam.fleiss(diagnoses, detail = TRUE) prints them)
FLEISS_1971_PER_CATEGORY = {"1": 0.245, "2": 0.245, "3": 0.520, "4": 0.471, "5": 0.566}
# The Wikipedia "Fleiss' kappa" worked example: 10 subjects x 14 raters, 5 categories; kappa = 0.210.
WIKIPEDIA_COUNTS = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers x 12 units
# with missing values; nominal alpha = 0.743 (interval 0.849).
N = None
KRIPPENDORFF_2011 = [[1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N], [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
                     [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N], [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N]]
FAST = AgreementConfig(n_boot=200)


def long_table(rows: list[tuple[str, str, object]]) -> pa.Table:
    return pa.table({"item": [r[0] for r in rows], "annotator": [r[1] for r in rows],
                     "label": [None if r[2] is None else str(r[2]) for r in rows]})


def report_of(rows: list[tuple[str, str, object]], cfg: AgreementConfig = FAST) -> dict:
    return agreement_report(rating_matrix(long_table(rows)), cfg)


# -- independent implementations (from the definitions, on plain Python rows) ---------------------
def by_item(rows):
    items = defaultdict(dict)
    for item, ann, label in rows:
        if label is not None:
            items[item][ann] = str(label)
    return items


def fleiss_np(rows, n_raters):
    items = [v for v in by_item(rows).values() if len(v) == n_raters]
    cats = sorted({lab for v in items for lab in v.values()})
    counts = np.array([[list(v.values()).count(c) for c in cats] for v in items], float)
    n = n_raters
    p_i = ((counts * (counts - 1)).sum(1)) / (n * (n - 1))
    p_j = counts.sum(0) / counts.sum()
    return (p_i.mean() - (p_j**2).sum()) / (1 - (p_j**2).sum())


def krippendorff_nominal_np(rows):
    units = [list(v.values()) for v in by_item(rows).values() if len(v) >= 2]
    cats = sorted({lab for u in units for lab in u})
    idx = {c: i for i, c in enumerate(cats)}
    o = np.zeros((len(cats), len(cats)))
    for u in units:
        for i, j in ((i, j) for i in range(len(u)) for j in range(len(u)) if i != j):
            o[idx[u[i]], idx[u[j]]] += 1 / (len(u) - 1)
    n_c = o.sum(1)
    n = n_c.sum()
    d_o = o.sum() - np.trace(o)
    d_e = (np.outer(n_c, n_c).sum() - (n_c**2).sum()) / (n - 1)
    return 1 - d_o / d_e


def cohen_np(x, y):
    cats = sorted(set(x) | set(y))
    po = np.mean([a == b for a, b in zip(x, y, strict=True)])
    pe = sum((x.count(c) / len(x)) * (y.count(c) / len(y)) for c in cats)
    return (po - pe) / (1 - pe)


def percent_np(rows):
    items = [v for v in by_item(rows).values() if len(v) >= 2]
    return np.mean([len(set(v.values())) == 1 for v in items])


def check_against_numpy(rows, report, n_raters):
    assert report["fleiss_kappa"]["value"] == pytest.approx(fleiss_np(rows, n_raters), abs=1e-9)
    assert report["krippendorff_alpha"]["value"] == pytest.approx(krippendorff_nominal_np(rows), abs=1e-9)
    assert report["percent_agreement"]["value"] == pytest.approx(percent_np(rows), abs=1e-12)
    items = by_item(rows)
    assert report["cohen_kappa"], "no pair reported"
    for pair in report["cohen_kappa"]:
        a, b = pair["pair"]
        shared = [v for v in items.values() if a in v and b in v]
        assert pair["n_items"] == len(shared)
        expected = cohen_np([v[a] for v in shared], [v[b] for v in shared])
        assert pair["value"] == pytest.approx(expected, abs=1e-9)


# -- published worked examples ----------------------------------------------------------------------
def test_fleiss_1971_table():
    rows = [(f"p{i}", f"r{j}", v) for i, row in enumerate(FLEISS_1971) for j, v in enumerate(row)]
    r = report_of(rows)
    assert round(r["fleiss_kappa"]["value"], 3) == 0.430
    assert r["fleiss_kappa"]["value"] == pytest.approx(fleiss_np(rows, 6), abs=1e-12)
    for cat, kappa in FLEISS_1971_PER_CATEGORY.items():
        assert round(r["per_category"][cat]["fleiss_kappa"]["value"], 3) == kappa
    lo, hi = r["fleiss_kappa"]["ci"]
    assert lo < r["fleiss_kappa"]["value"] < hi and hi - lo < 0.4


def test_fleiss_wikipedia_example():
    rows = []
    for i, counts in enumerate(WIKIPEDIA_COUNTS):
        raters = iter(range(14))
        rows += [(f"s{i}", f"r{next(raters)}", cat + 1) for cat, c in enumerate(counts) for _ in range(c)]
    r = report_of(rows)
    assert round(r["fleiss_kappa"]["value"], 3) == 0.210
    assert r["percent_agreement"]["value"] == pytest.approx(0.1)  # only subject 1 is unanimous


def test_krippendorff_2011_example_with_missing_values():
    rows = [(f"u{u}", f"obs{o}", v) for o, row in enumerate(KRIPPENDORFF_2011) for u, v in enumerate(row)]
    r = report_of(rows)
    assert round(r["krippendorff_alpha"]["value"], 3) == 0.743
    assert r["krippendorff_alpha"]["value"] == pytest.approx(krippendorff_nominal_np(rows), abs=1e-12)
    # unit 12 has a single value: not pairable, left out of alpha; Fleiss uses the 4-rater units only
    assert r["krippendorff_alpha"]["n_items"] == 11
    assert r["items_with_one_rating"] == 1
    assert r["fleiss_kappa"]["raters_per_item"] == 4 and r["fleiss_kappa"]["n_items"] == 8
    assert sorted(r["fleiss_kappa"]["excluded_items"]) == ["u0", "u10", "u11", "u9"]


# -- edge cases ------------------------------------------------------------------------------------
def test_single_category_everywhere_is_undefined_not_nan():
    rows = [(f"i{i}", a, "sol1") for i in range(12) for a in ("ann_a", "ann_b", "ann_c")]
    r = report_of(rows)
    assert r["percent_agreement"]["value"] == 1.0
    for key in ("fleiss_kappa", "krippendorff_alpha"):
        assert r[key]["value"] is None and "one category (sol1)" in r[key]["undefined"]
    assert all(p["value"] is None and p["undefined"] for p in r["cohen_kappa"])
    text = json.dumps(r, allow_nan=False)  # raises on NaN
    assert "NaN" not in text


def test_bootstrap_samples_without_the_one_disagreement_are_counted():
    # 40 unanimous "a" items and one split item: about 1/e of the resamples miss the split item, and
    # there kappa is 0/0; the interval comes from the others and the report says how many were left out
    rows = [(f"i{i}", ann, "a") for i in range(40) for ann in ("x", "y")] + [("odd", "x", "a"), ("odd", "y", "b")]
    fk = report_of(rows)["fleiss_kappa"]
    assert fk["value"] == pytest.approx(fleiss_np(rows, 2)) and fk["ci"] is not None
    lost = fk["bootstrap"]["replicates"] - fk["bootstrap"]["valid"]
    assert 0.25 * 200 < lost < 0.5 * 200
    assert fk["note"].startswith(f"interval from the other samples: {lost} of 200")


def test_bootstrap_is_seeded():
    rows = [(f"p{i}", f"r{j}", v) for i, row in enumerate(FLEISS_1971) for j, v in enumerate(row)]
    a = report_of(rows, AgreementConfig(n_boot=100, seed=1))
    b = report_of(rows, AgreementConfig(n_boot=100, seed=1))
    c = report_of(rows, AgreementConfig(n_boot=100, seed=2))
    assert a["fleiss_kappa"]["ci"] == b["fleiss_kappa"]["ci"] != c["fleiss_kappa"]["ci"]


def test_vectorised_bootstrap_kappa_equals_sklearn():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 3, 50), rng.integers(0, 3, 50)
    idx = rng.integers(0, 50, (20, 50))
    got = kappa_replicates(x, y, 3, idx)
    want = [cohen_kappa_score(x[r], y[r], labels=[0, 1, 2]) for r in idx]
    assert got == pytest.approx(want, abs=1e-12)


def test_duplicates_and_missing_annotators_are_errors():
    rows = [("i1", "a", 1), ("i1", "a", 0), ("i1", "b", 1)]
    with pytest.raises(JudgmentError, match="more than one label"):
        rating_matrix(long_table(rows))
    m = rating_matrix(long_table(rows), on_duplicate="first")
    assert m.notes["duplicate_labels_dropped"] == 1 and m.categories == ["1"] and m.codes.tolist() == [[0, 0]]
    with pytest.raises(JudgmentError, match="no annotator"):
        rating_matrix(pa.table({"item": ["i1"], "annotator": pa.array([None], pa.string()), "label": ["1"]}))


# -- real raw judgments ----------------------------------------------------------------------------
def jsonl_rows(path, item="item_id", ann="annotator", label="label"):
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        out.append((str(d[item]), str(d[ann]), d[label]))
    return out


@pytest.mark.parametrize("path,n_raters,fleiss", [
    ("annot_piqa_qualtrics_en/piqa_annotations.jsonl", 3, 0.75),   # MANIFEST: 0.75
    ("annot_rte_snow2008_en/rte_annotations.jsonl", 10, 0.24),     # MANIFEST: 0.24
    ("annot_mera_humanbench_ru/ruworldtree_annotations.jsonl", 5, 0.76),  # README: 0.76 (test items)
    ("annot_mera_humanbench_ru/rwsd_annotations.jsonl", 5, 0.54),  # README: 0.54
])
def test_real_judgments_match_direct_computation(shared_data, path, n_raters, fleiss):
    rows = jsonl_rows(shared_data / path)
    r = agreement_report(rating_matrix(read_judgments(shared_data / path)), AgreementConfig(n_boot=50))
    assert round(r["fleiss_kappa"]["value"], 2) == fleiss
    assert r["fleiss_kappa"]["raters_per_item"] == n_raters
    check_against_numpy(rows, r, n_raters)
    lo, hi = r["fleiss_kappa"]["ci"]
    assert lo < r["fleiss_kappa"]["value"] < hi


def test_mera_control_items_are_excluded_from_fleiss_and_named(shared_data):
    items = [json.loads(line) for line in (shared_data / "annot_mera_humanbench_ru/ruworldtree_items.jsonl").open()]
    control = {d["item_id"] for d in items if d["is_control"]}
    r = agreement_report(rating_matrix(read_judgments(
        shared_data / "annot_mera_humanbench_ru/ruworldtree_annotations.jsonl")), AgreementConfig(n_boot=0))
    assert r["fleiss_kappa"]["items_excluded"] == len(control) == 30
    assert set(r["fleiss_kappa"]["excluded_items"]) <= control


def test_binpiqa_duplicate_annotators_are_reported(shared_data):
    path = shared_data / "annot_piqa_qualtrics_en/binpiqa_annotations.jsonl"
    with pytest.raises(JudgmentError, match="30 .item, annotator. pair"):
        rating_matrix(read_judgments(path))
    r = agreement_report(rating_matrix(read_judgments(path), on_duplicate="first"), AgreementConfig(n_boot=0))
    assert r["notes"]["duplicate_pairs"] == 30
    assert r["fleiss_kappa"]["items_excluded"] == 30  # those items now have 2 raters, not 3


def test_cli_on_parus_tsv_json(shared_data, capsys):
    """PARus has no item id: the item is the premise, question and both choices; the .tsv uses ';'."""
    path = shared_data / "ru_russiansuperglue_humanbench/assign_PARus.tsv"
    cols = ["INPUT:premise", "INPUT:question", "INPUT:sent1", "INPUT:sent2"]
    assert main(["review", "agreement", str(path), "--item", ",".join(cols), "--annotator", "ASSIGNMENT:worker_id",
                 "--label", "OUTPUT:variant", "--json", "--boot", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"percent_agreement", "fleiss_kappa", "cohen_kappa", "krippendorff_alpha"} <= set(report)
    import csv

    with open(path, encoding="utf-8") as f:
        rows = [("\x1f".join(d[c] for c in cols), d["ASSIGNMENT:worker_id"], d["OUTPUT:variant"])
                for d in csv.DictReader(f, delimiter=";")]
    assert report["items"] == len(by_item(rows)) == 500
    check_against_numpy(rows, report, 3)
    for key in ("percent_agreement", "fleiss_kappa", "krippendorff_alpha"):
        assert len(report[key]["ci"]) == 2


def test_same_statistics_from_csv_and_parquet(shared_data, tmp_path):
    src = shared_data / "annot_piqa_qualtrics_en/piqa_annotations.jsonl"
    table = read_judgments(src)
    pacsv.write_csv(table.rename_columns(["item_id", "annotator", "label"]), tmp_path / "j.csv")
    pq.write_table(table.rename_columns(["item_id", "annotator", "label"]), tmp_path / "j.parquet")
    cfg = AgreementConfig(n_boot=30)
    ref = agreement_report(rating_matrix(table), cfg)
    for f in ("j.csv", "j.parquet"):
        got = agreement_report(rating_matrix(read_judgments(tmp_path / f)), cfg)
        assert got["fleiss_kappa"] == ref["fleiss_kappa"] and got["cohen_kappa"] == ref["cohen_kappa"]


def test_cli_text_table_says_undefined(tmp_path, capsys):
    path = tmp_path / "same.jsonl"
    path.write_text("\n".join(json.dumps({"item_id": f"i{i}", "annotator": a, "label": "x"})
                              for i in range(5) for a in "ab"))
    assert main(["review", "agreement", str(path), "--boot", "10"]) == 0
    out = capsys.readouterr().out
    assert "Fleiss' kappa       undefined (every rating is in one category (x)" in out
    assert "nan" not in out.lower()


def test_cohen_pairs_over_many_workers_are_capped(shared_data):
    r = agreement_report(rating_matrix(read_judgments(shared_data / "annot_rte_snow2008_en/rte_annotations.jsonl")),
                         AgreementConfig(n_boot=0, max_pairs=5))
    assert len(r["cohen_kappa"]) == 5 and r["cohen_pairs_not_reported"] > 1000
    shared = sorted((p["n_items"] for p in r["cohen_kappa"]), reverse=True)
    assert shared[-1] >= 10


def test_cli_reads_one_file_per_annotator_as_one(shared_data, tmp_path, capsys):
    """Judgments often arrive as one file per annotator: the CLI reads several files as one table."""
    table = read_judgments(shared_data / "annot_piqa_qualtrics_en/piqa_annotations.jsonl")
    table = table.rename_columns(["item_id", "annotator", "label"])
    pacsv.write_csv(table, tmp_path / "all.csv")
    files = []
    for name in sorted(set(table.column("annotator").to_pylist())):
        files.append(tmp_path / f"{name}.csv")
        pacsv.write_csv(table.filter(pa.compute.equal(table.column("annotator"), name)), files[-1])
    assert len(files) > 2
    reports = []
    for args in ([str(tmp_path / "all.csv")], [str(f) for f in files]):
        assert main(["review", "agreement", *args, "--json", "--boot", "20"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0] == reports[1]
    assert main(["review", "agreement", str(files[0]), "--json", "--boot", "0"]) == 0  # one annotator alone
    assert json.loads(capsys.readouterr().out)["fleiss_kappa"] != reports[0]["fleiss_kappa"]
