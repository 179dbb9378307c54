"""Every figure in README.md and docs/ comes from a results file (benchmarks/results/*.json, written by the
benchmark named in it): a marker that names a missing file or key, or shows another value than its file, fails;
so does a number with a speed, cost or quality unit typed in prose outside a marker, and development history
(dates, issue numbers, load averages, commit hashes) in prose. The detectors are tested on planted text both
ways, so a detector that stopped biting would fail here too."""

from __future__ import annotations

import pytest

from benchmarks.render_figures import ROOT, check, doc_paths, history, render, typed_figures
from transforms.core.results import figure, write_result

# Generated from the stage classes by `piqaforge stages --markdown` (tests/flow/test_stage_catalogue.py keeps it
# current): what it says is each class's own declaration, fixed in the class, not in the page.
GENERATED = {ROOT / "docs" / "stages_reference.md"}
PAGES = [p for p in doc_paths() if p not in GENERATED]


def _where(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PAGES, ids=_where)
def test_every_marker_agrees_with_its_results_file(path):
    problems = check(path.read_text(encoding="utf-8"), where=_where(path))
    assert not problems, "\n".join(map(str, problems))


@pytest.mark.parametrize("path", PAGES, ids=_where)
def test_no_figure_is_typed_by_hand(path):
    problems = typed_figures(path.read_text(encoding="utf-8"), where=_where(path))
    assert not problems, "\n".join(map(str, problems))


@pytest.mark.parametrize("path", PAGES, ids=_where)
def test_no_page_narrates_how_it_was_developed(path):
    problems = history(path.read_text(encoding="utf-8"), where=_where(path))
    assert not problems, "\n".join(map(str, problems))


def test_the_readme_shows_figures_from_results_files():
    from benchmarks.render_figures import MARKER

    assert len(MARKER.findall((ROOT / "README.md").read_text(encoding="utf-8"))) >= 3


@pytest.fixture
def results(tmp_path):
    write_result("bench_x", {"cpu_us_per_row": figure(8.6612, "CPU-µs/row", "the step"),
                             "rows": figure(1234567, "rows", "rows measured"),
                             "backend": figure("numba", "", "the kernel")},
                 benchmark="benchmarks/bench_x.py", argv=["benchmarks/bench_x.py"], directory=tmp_path)
    return tmp_path


def test_render_rewrites_a_marker_from_its_file_with_a_format_spec(results):
    text = ("A row costs <!--fig bench_x.cpu_us_per_row:.2f-->9.99<!--/fig--> CPU-µs over "
            "<!--fig bench_x.rows-->0<!--/fig--> rows with <!--fig bench_x.backend-->?<!--/fig-->.")
    out, problems = render(text, directory=results)
    assert not problems
    assert out == ("A row costs <!--fig bench_x.cpu_us_per_row:.2f-->8.66<!--/fig--> CPU-µs over "
                   "<!--fig bench_x.rows-->1,234,567<!--/fig--> rows with <!--fig bench_x.backend-->numba<!--/fig-->.")
    assert not check(out, directory=results)
    assert not typed_figures(out), "a figure inside its marker is not typed by hand"


def test_check_fails_on_a_stale_value_a_missing_key_and_a_missing_file(results):
    stale = check("<!--fig bench_x.cpu_us_per_row:.2f-->8.70<!--/fig-->", directory=results)
    assert len(stale) == 1 and "8.66" in stale[0].what
    missing_key = check("<!--fig bench_x.no_such-->1<!--/fig-->", directory=results)
    assert len(missing_key) == 1 and "cpu_us_per_row" in missing_key[0].what
    missing_file = check("<!--fig bench_y.rows-->1<!--/fig-->", directory=results)
    assert len(missing_file) == 1 and "no results file" in missing_file[0].what
    bad_spec = check("<!--fig bench_x.backend:.2f-->x<!--/fig-->", directory=results)
    assert len(bad_spec) == 1 and "format spec" in bad_spec[0].what


@pytest.mark.parametrize("text", [
    "the runner's step takes 8.66 CPU-µs a row",
    "the front half costs 165.4 CPU-s on the sample",
    "a forecast of 14.6 CPU-h for the crawl",
    "the vote needs about 2.4 H100-hours at 3M rows",
    "0.39 GPU-hours",
    "ours runs at 364k rows/CPU-s",
    "7,453 rows/s including start-up",
    "3.77 rows per CPU-second",
    "it costs $12.50 a run",
    "1.76× rensa's bulk API",
    "a speed-up of 2.60x the old prefilter",
    "the job took 7 min 12 s from its start",
    "134 s wall",
    "peak RSS 639 MiB, workers 6.4 GiB",
    "recall 0.964 at precision 0.9999",
    "held-out recall/precision 0.83/0.39",
    "AUC 0.669 on the seeds",
    "Cohen's κ 0.77",
    "a pass rate of 7.5%",
    "110.8 GFLOPs a row",
    "40–50 s a question",
])
def test_the_detector_finds_a_typed_figure(text):
    assert typed_figures(f"Some prose: {text}.\n"), text


@pytest.mark.parametrize("table, found", [
    ("| method | seconds | recall |\n|---|---:|---:|\n| exact | 422.7 | 1.0000 |\n", True),
    ("| engine | pair | chrF |\n|---|---|---|\n| qwen | en-ja | 19.5 |\n", True),
    ("| stage | rows in | kept |\n|---|---:|---:|\n| langid | 4,207 | 4,126 |\n", False),
    ("| figure | value |\n|---|---:|\n| a reducer's peak | <!--fig x.y-->21.1<!--/fig--> B |\n", False),
    ("| node type | advertises |\n|---|---|\n| cpu_worker | 32 CPU |\n", False),
])
def test_the_detector_reads_a_table_column_of_figures(table, found):
    assert bool(typed_figures(table)) is found, typed_figures(table)


@pytest.mark.parametrize("text", [
    "The bundled sample has 4,600 rows; 20 bands of 6 rows each.",
    "The stage runs on 2 cores and 16 partitions with 128 permutations.",
    "Qwen2.5 1.5B instruct and Gemma 3 270M are the local models; multilingual-e5-small embeds.",
    "A 1× H100 node and an 8× H100 node; 100k × 128-d vectors.",
    "The target is ≤ 10 min, and the supervised member is held to recall ≥ 0.8.",
    "Accuracy with a 95% Wilson interval; a bound of 60%.",
    "Run `piqaforge run ko-piqa --set timeout_s=30` (`max_wait: 5 s`).",
    "```\n[1/6] read  4,600 read → 4,600 kept  2.1 s\n```",
    "See [the rehearsal](cluster.md#the-rehearsal) and <!--fig bench_x.rows-->12 s<!--/fig-->.",
    "Section 3 of the paper; step 2 of the runbook; version 1.0.",
    "A retry backs off from `retry_backoff_s` (default 2 s) and doubles.",
    "The CPU time is sampled every 0.5 s while the stage runs.",
])
def test_the_detector_leaves_non_figures_alone(text):
    assert not typed_figures(text), typed_figures(text)


@pytest.mark.parametrize("text, found", [
    ("Measured 2026-11-28 on a quiet machine.", True),
    ("## Where the time goes (issue 16)", True),
    ("the MinHash change (#42 §3)", True),
    ("under load average 30–35", True),
    ("at commit 763b9f8, not before", True),
    ("attempt a4, still no release", True),
    ("The stage writes `rejected/` with the reason; see `git log 763b9f8` in code.", False),
    ("e5-small, 128-d embeddings and a SHA-256 digest", False),
])
def test_the_history_detector(text, found):
    assert bool(history(text)) is found, history(text)
