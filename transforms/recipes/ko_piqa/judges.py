"""What a finished Ko-PIQA crawl run kept, measured against labelled rows (a run `reports` entry).

The figures go to `runs/<run id>/judges.json` (the run's report and `piqaforge show` read them),
with `judges.html` beside it; the run's manifest is not touched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from transforms.core.lake import Lake
from transforms.core.manifest import RunManifest


def measure_judges(manifest: RunManifest, lake: Lake, labels: list[str], judge_eval: str | None = None
                   ) -> dict[str, Any] | None:
    from transforms.recipes.ko_piqa.judge_report import render_judges
    from transforms.recipes.ko_piqa.run_eval import PREFILTERS, evaluate_run

    paths = [p for p in labels if Path(p).exists()]
    if not paths or not any(s.name in PREFILTERS for s in manifest.stages):
        return None
    figures: dict[str, Any] = {"run": evaluate_run(manifest, paths)}
    if judge_eval and Path(judge_eval).exists():
        figures["judge_eval"] = json.loads(Path(judge_eval).read_text(encoding="utf-8"))
    run = figures["run"]
    for group, m in run["groups"].items():
        print(f"ko-piqa: kept vs labels, {group}: precision {m['precision']:.2f}, recall {m['recall']:.2f} "
              f"({m['tp']} of {m['positives']} physical questions kept, {m['fp']} others)", file=sys.stderr)
    print(f"ko-piqa: {run['kept_rows']} rows kept, {run['kept_from_negative_sources']} from 3i4k/chatbot",
          file=sys.stderr)
    (lake.run_dir(manifest.run_id) / "judges.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>judges</title></head><body>"
        + render_judges(figures) + "</body></html>", encoding="utf-8")
    return figures
