"""What the runner leaves on disk: a stage's kept rows in staged/ are written uncompressed (the next stage's input,
read once), raw/, rejected/ and curated/ are snappy Parquet with the same rows; and every drop reason a stage
gives is checked against its class's `drop_reasons` by the runner too (a source's, which no `__call__` sees)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from transforms.core import columns as C
from transforms.core.lake import Lake, parquet_files, read_table
from transforms.core.runner import run_pipeline
from transforms.core.stage import StageError
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.io.sources import RowsSource
from transforms.text.normalize import NormalizeText
from transforms.text.quality import LengthFilter

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"

pytestmark = pytest.mark.ray


def _codecs(folder: Path) -> set[str]:
    return {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in parquet_files(folder)
            if pq.ParquetFile(f).metadata.num_row_groups}


def test_staged_is_uncompressed_and_curated_is_snappy_with_the_same_rows(tmp_path):
    lake = Lake(tmp_path / "lake").create()
    source = CrawlSource(CrawlInput.model_validate(
        {"paths": [str(SAMPLE)], "format": "jsonl", "columns": {"id": "id", "source": "source", "url": "url"}}))
    manifest = run_pipeline(job="zones", dataset="ko", source=source, lake=lake, config={}, run_id="zones-1",
                            stages=[NormalizeText(), LengthFilter(min_chars=20, max_chars=400)])
    assert manifest.status == "succeeded", manifest.error
    kept_last = Path(manifest.stages[-1].outputs["kept"])
    assert "staged" in kept_last.parts and _codecs(kept_last) == {"UNCOMPRESSED"}
    assert _codecs(Path(manifest.stages[0].outputs["kept"])) == {"SNAPPY"}  # raw/
    assert _codecs(Path(manifest.stages[-1].outputs["rejected"])) == {"SNAPPY"}
    curated = Path(manifest.outputs["curated"])
    assert _codecs(curated) == {"SNAPPY"}
    staged, published = read_table(kept_last), read_table(curated)
    assert published.num_rows == manifest.stages[-1].rows_kept > 0
    assert published.sort_by(C.ID).equals(staged.sort_by(C.ID))
    dropped = manifest.stages[-1].rows_dropped
    assert dropped and set(dropped) <= set(LengthFilter.drop_reasons)


def test_a_source_giving_an_undeclared_reason_fails_the_run_naming_it(tmp_path):
    lake = Lake(tmp_path / "lake").create()
    source = RowsSource(records=[{"id": "a", "text": "kept", C.DROP_REASON: None},
                                 {"id": "b", "text": "gone", C.DROP_REASON: "mystery:detail"}])
    with pytest.raises(StageError) as err:
        run_pipeline(job="zones", dataset="ko", source=source, stages=[NormalizeText()], lake=lake,
                     config={}, run_id="zones-2")
    assert "'mystery'" in str(err.value) and "RowsSource" in str(err.value) and "drop_reasons" in str(err.value)
    written = json.loads((lake.run_dir("zones-2") / "manifest.json").read_text())
    assert written["status"] == "failed" and "mystery" in written["error"]
