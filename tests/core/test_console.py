"""The console: one line per stage in our words, with and without a terminal, and no Ray internals.

A small job (real Korean questions → normalise → length filter → exact dedup) runs in a subprocess,
once under a pseudo-terminal and once with a pipe; `piqaforge runs` and `show` read its lake back.
"""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transforms.core.console import StageConsole, progress, run_summary, stage_line
from transforms.core.manifest import RunManifest, StageRecord

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
RAY_INTERNALS = ("MapBatches(", "Dataset dataset_", "execution finished", "Queued blocks", "logging_progress", "core_worker",
                 "is deprecated")

JOB = """
import sys
from transforms.core.lake import Lake
from transforms.core.runner import init_ray, run_pipeline
from transforms.dedup.exact import ExactDedup
from transforms.io.crawl import CrawlInput, CrawlSource
from transforms.text.normalize import NormalizeText
from transforms.text.quality import LengthFilter
init_ray(num_cpus=2)
source = CrawlSource(CrawlInput(paths=[sys.argv[2]]))
run_pipeline(job="console", dataset="console", source=source, stages=[NormalizeText(), LengthFilter(), ExactDedup()],
             lake=Lake(sys.argv[1]), config={}, run_id="c1")
"""


def test_a_stage_line_names_the_stage_its_counts_and_reasons():
    rec = StageRecord(index=6, name="ensemble", kind="filter", rows_in=143, rows_kept=88,
                      rows_dropped={"ensemble_rejected:gemma-ko": 47, "ensemble_rejected:gemma-en": 8}, seconds=52.0)
    line = stage_line(6, 10, rec)
    assert line.startswith("[7/10] ensemble") and "143 rows → 88 kept, 55 dropped" in line
    assert "ensemble_rejected:gemma-ko 47" in line and line.endswith("52.0 s")
    made = StageRecord(index=2, name="generate", kind="expand", rows_in=10, rows_created=40, rows_consumed=9,
                       rows_kept=35, rows_dropped={"generation_failed": 1, "invalid_output": 5}, seconds=3)
    assert "10 rows → 40 created from 9, 35 kept, 6 dropped" in stage_line(2, 4, made)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Langid:
    name = "langid"


def test_a_long_stage_shows_a_live_bar_in_a_terminal_and_nothing_more_without_one():
    done = StageRecord(index=2, name="langid", kind="filter", rows_in=4207, rows_kept=4121,
                       rows_dropped={"lang:ja": 86}, seconds=7.7)
    screen = Terminal()
    console = StageConsole(10, screen, bar_after_s=0)
    console.before(2, Langid())
    progress(0, 4207)  # what the writer calls as partitions are written
    for _ in range(3):
        progress(1000)
        time.sleep(0.6)  # the bar redraws at most every 0.5 s
    console.after(done)
    progress(500)  # after the stage: no bar to move, nothing printed
    out = screen.getvalue()
    assert re.search(r"\[3/10\] langid\s+\d+%\|.*\| [12]000/4207 rows \[.*rows/s\]", out), out
    assert out.endswith("\r\x1b[2K[3/10] langid             4,207 rows → 4,121 kept, 86 dropped (lang:ja 86)  7.7 s\n")
    piped = io.StringIO()
    console = StageConsole(10, piped, bar_after_s=0)
    console.before(2, Langid())
    progress(0, 4207)
    progress(4207)
    console.after(done)
    assert piped.getvalue().splitlines() == ["[3/10] langid             running …", stage_line(2, 10, done)]


def test_the_end_of_a_run_prints_the_funnel_outputs_report_and_judges(tmp_path):
    report = tmp_path / "report.html"
    report.write_text("<html></html>", encoding="utf-8")
    m = RunManifest(run_id="r1", job="ko-piqa", dataset="ko", config={}, code_version={}, status="succeeded",
                    outputs={"curated": "/lake/curated/ko/r1"})
    m.stages = [StageRecord(index=0, name="read", kind="source", rows_in=0, rows_created=300, rows_kept=300, seconds=1.0),
                StageRecord(index=1, name="ensemble", kind="filter", rows_in=300, rows_kept=88,
                            rows_dropped={"ensemble_rejected:gemma-ko": 212}, seconds=52.0)]
    m.extras["judges"] = {
        "run": {"kept_rows": 88, "kept_stage": "ensemble", "kept_from_negative_sources": 2,
                "kept_share_from_negative_sources": 0.0227,
                "groups": {"kin held-out": {"rows": 120, "positives": 30, "tp": 27, "fp": 40, "precision": 0.403,
                                            "recall": 0.9, "auc": 0.81}}},
        "judge_eval": {"rows": 400, "positives": 90,
                       "judges": {"prefilter": {"kind": "supervised", "precision": 0.24, "recall": 0.92,
                                                "auc": 0.84, "pass_rate": 0.31}}}}
    text = run_summary(m, report)
    lines = text.splitlines()
    assert lines[0] == "run r1  succeeded"
    assert re.search(r"^ensemble\s+filter\s+300\s+0\s+88\s+212\s+0\s+52\.0$", text, re.M), text
    assert "curated    /lake/curated/ko/r1" in lines and f"report     {report}" in lines
    assert "kept rows against the labels: 88 kept after ensemble; from 3i4k/chatbot 2 (0.023)" in text
    assert re.search(r"kin held-out\s+120\s+30\s+67\s+0\.403\s+0\.900\s+0\.810", text), text
    assert re.search(r"prefilter\s+supervised\s+0\.240\s+0\.920\s+0\.840\s+0\.310", text), text
    assert "judge" not in run_summary(m.model_copy(update={"extras": {}}), None)


def test_warnings_from_rays_code_go_to_the_runs_log_and_ours_stay_on_the_console(tmp_path, recwarn):
    import warnings

    import ray.data._internal.execution.operators.actor_pool_map_operator as ray_code

    from transforms.core.console import quiet_ray_logging

    log = quiet_ray_logging(tmp_path / "logs", verbose=False)
    warnings.warn_explicit("actors are idle", UserWarning, ray_code.__file__, 551)
    warnings.warn("a warning of ours", UserWarning, stacklevel=1)
    shown = [str(w.message) for w in recwarn]  # what reached the console's warning display
    assert log is not None and "actor_pool_map_operator.py:551: UserWarning: actors are idle" in log.read_text()
    assert "actors are idle" not in shown and "a warning of ours" in shown


NATIVE = """
import os, sys
from pathlib import Path
from transforms.core.native_stderr import filter_native_stderr
print("filtering", filter_native_stderr(Path(sys.argv[1])), flush=True)
os.write(2, b"[2026-11-23 08:45:23,362 E 5920 5920] core_worker.cc:2465: Actor with class name: "
            b"'MapWorker(MapBatches(_StageActor))' has constructor arguments in the object store\\n")
sys.stderr.write("a line of ours on stderr\\n")
os.write(2, b" 50%|#####     | 5/10\\r")
raise RuntimeError("stopped on purpose")
"""


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def test_rays_native_log_lines_leave_a_terminals_stderr_for_the_runs_log(tmp_path):
    log = tmp_path / "ray.log"
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", NATIVE, str(log)], cwd=ROOT, env=_env(), stdin=slave,
                            stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    screen = _read_all(master).decode("utf-8", "replace")
    proc.wait(timeout=60)
    os.close(master)
    assert "filtering True" in screen and "a line of ours on stderr" in screen and " 50%|#####" in screen
    assert "RuntimeError: stopped on purpose" in screen and "Traceback" in screen  # errors still show
    assert "core_worker.cc" not in screen and "core_worker.cc:2465: Actor with class name" in log.read_text()
    piped = subprocess.run([sys.executable, "-c", NATIVE, str(tmp_path / "piped.log")], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=60)
    assert "filtering False" in piped.stdout and "core_worker.cc" in piped.stderr  # no terminal: unchanged


def _small_input(tmp_path: Path) -> Path:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:300]
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PIQAFORGE_CONSOLE", "PIQAFORGE_VERBOSE")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.slow  # two fresh Ray instances in subprocesses: ~40 s quiet, 3.5 min on the loaded machine
def test_console_with_and_without_a_terminal(tmp_path):
    small = _small_input(tmp_path)
    # without a terminal: one plain line per stage start and end
    piped = subprocess.run([sys.executable, "-c", JOB, str(tmp_path / "lake1"), str(small)], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr[-2000:]
    out = piped.stdout
    for i, name in enumerate(["read_crawl", "normalize", "length_filter", "exact_dedup"], 1):
        assert re.search(rf"^\[{i}/4\] {name}\s+running …$", out, re.M), out
        assert re.search(rf"^\[{i}/4\] {name}\s+.*(kept|read).*\d+\.\d s", out, re.M), out
    assert "300 read → 300 kept" in out
    assert "ray.log" in out and (tmp_path / "lake1" / "runs" / "c1" / "logs" / "ray.log").exists()
    for noise in RAY_INTERNALS:
        assert noise not in out + piped.stderr, noise
    # under a pseudo-terminal: the running line is rewritten in place, the end lines stay
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path / "lake2"), str(small)], cwd=ROOT, env=_env(),
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=600)
    os.close(master)
    tty = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, tty[-2000:]
    assert "\r\x1b[2K[4/4] exact_dedup" in tty and "[4/4] exact_dedup" in tty
    for noise in RAY_INTERNALS:
        assert noise not in tty, noise
    # the lake read back by the run commands
    runs = subprocess.run([str(ROOT / ".venv" / "bin" / "piqaforge"), "runs", "--lake", str(tmp_path / "lake1")],
                          capture_output=True, text=True, timeout=120)
    assert "c1" in runs.stdout and "succeeded" in runs.stdout and "300 →" in runs.stdout
    show = subprocess.run([str(ROOT / ".venv" / "bin" / "piqaforge"), "show", "c1", "--lake", str(tmp_path / "lake1")],
                          capture_output=True, text=True, timeout=120)
    assert "exact_dedup" in show.stdout and "curated" in show.stdout
