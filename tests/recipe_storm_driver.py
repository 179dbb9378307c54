"""The driver the kill-and-resume storm runs as a subprocess (tests/recipes/test_recipe_storm.py).

    python tests/recipe_storm_driver.py LAKE RUN_ID [--resume] [--questions FILE]

Runs the zh-piqa recipe (people review: the batch is exported, then imported from a CSV the driver fills,
then the recipe goes on) with the engine double of tests/recipe_doubles.py, whose every question is
appended to --questions, one line each, as it is asked; and marks each run's start and end in
LAKE/../events.log so the storm can kill the driver at a chosen place. SIGKILL may land anywhere.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.recipe_doubles import RecipeDouble, zh  # noqa: E402

OVERRIDES = {"n": 6, "evaluate": False, "version": "storm", "runs.items.stages.translate.engine.batch_size": 1}


class LoggingDouble(RecipeDouble):
    """The double, writing every question it is asked to a file (one JSON line, flushed at once)."""

    def __init__(self, log: str, correct: set[str]):
        super().__init__(correct)
        self.log = log

    def chat(self, conversations, params):  # type: ignore[no-untyped-def]
        with open(self.log, "a", encoding="utf-8") as f:
            for conv in conversations:
                f.write(json.dumps(conv[-1]["content"], ensure_ascii=False) + "\n")
        return super().chat(conversations, params)


def correct_solutions() -> set[str]:
    rows = [json.loads(line) for line in (ROOT / "lake/samples/piqa_valid_minimal_pairs.jsonl").read_text(
        encoding="utf-8").splitlines()]
    return {zh(r["sol1"] if r["label"] == 0 else r["sol2"]) for r in rows}


def fill_batch(lake: Path, batch: str) -> Path:
    """Every annotator picks the item's labelled solution; the filled CSV beside the batch."""
    import pyarrow.parquet as pq

    folder = lake / "review" / batch
    labels = {r["id"]: r["label"] for r in pq.read_table(folder / "items.parquet").to_pylist()}
    rows = list(csv.DictReader(io.StringIO((folder / "review.csv").read_text("utf-8-sig"))))
    for r in rows:
        r["verdict"] = "sol1" if labels[r["item_id"]] == 0 else "sol2"
    out = folder.parent / f"{batch}.filled.csv"
    with out.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lake")
    ap.add_argument("run_id")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--questions", required=True)
    args = ap.parse_args()
    from ray import cloudpickle

    import tests.recipe_doubles as doubles_module
    from transforms.core.lake import Lake
    from transforms.flow.orchestrator import run_recipe
    from transforms.flow.recipe import load_recipe
    from transforms.review.batch import load_batch
    from transforms.review.importing import import_files

    cloudpickle.register_pickle_by_value(doubles_module)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    lake = Path(args.lake)
    events = lake.parent / "events.log"

    def on_run(name: str, event: str) -> None:
        with events.open("a", encoding="utf-8") as f:
            f.write(f"{name} {event}\n")

    recipe = load_recipe("zh-piqa", OVERRIDES)
    double = LoggingDouble(args.questions, correct_solutions())
    out = run_recipe(recipe, lake=lake, run_id=args.run_id, resume=args.resume, doubles={"*": double},
                     on_run=on_run)
    if out.get("status") == "awaiting_review":  # people review: fill the batch and import it, then go on
        batch = out["review_batch"]
        record, _ = load_batch(Lake(lake), batch)
        if not record.imports:
            on_run("import", "start")
            import_files(Lake(lake), batch, [fill_batch(lake, batch)], n_boot=50)
            on_run("import", "end")
        out = run_recipe(recipe, lake=lake, run_id=args.run_id, resume=True, doubles={"*": double}, on_run=on_run)
    print(json.dumps({k: v for k, v in out.items() if k in ("status", "release", "released")}))
    return 0 if out.get("released") else 1


if __name__ == "__main__":
    sys.exit(main())
