"""A test tier's time against its budget (scripts/test.sh runs this after each tier).

    python scripts/tier_budget.py TIER ELAPSED_S [JUNIT_XML ...]

Prints `tier TIER: 412 s of its 600 s budget (69%)`. A tier over its budget by more than 10% fails (exit 3) and
prints its ten slowest tests from the JUnit files pytest wrote, so the test that pushed it over is named where it
was added, not found later by a CI run that ran out of time. The budgets are `BUDGETS` below; they are set for
this project's machine kind (2 cores), where CI runs. `set-up`, `lint` and `total` have no budget and are only
recorded.

With PIQAFORGE_RECORD_TIERS=1 (and PIQAFORGE_TIER_RUN naming one scripts/test.sh run) each tier's time is also
written to benchmarks/results/test-tiers.json, the results file the README's test table renders its times from:
`PIQAFORGE_RECORD_TIERS=1 bash .ci/run` on a fresh clone is the measurement.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

# seconds of each tier's pytest run on this project's machine kind (2 cores), with room for a little growth, so that
# the next slow test fails here, by name, before CI meets its 90-minute limit:
# - `default`: the default tier alone (README command 2 less its set-up and its ruff, mypy and lint-imports, which
#   are timed apart as `lint`), the target for either CPU;
# - `default+slow`: --slow's (CI's) first pytest run, the default tier and the slow tests that may share the machine,
#   in one process (their module fixtures made once); `slow-alone`: its slow tests that run alone, one at a time;
#   `other-cpu`: the float-sensitive tests playing another CPU, both directions. CI runs these (.ci/run): with
#   set-up and lint, about 40 minutes on this machine kind, so that a CI machine up to 1.5 times slower still
#   finishes well inside CI's 90;
# - `extended`: the slow tests CI leaves out (`--extended`); `slow`: --all's slow tier, extended included.
BUDGETS = {"default": 600, "default+slow": 1500, "slow-alone": 700, "other-cpu": 600, "extended": 4800, "slow": 6000}
SLACK = 1.10
UNBUDGETED = ("set-up", "lint", "total")
ROOT = Path(__file__).resolve().parents[1]
RESULT = "test-tiers"


def slowest(junit_files: list[Path], n: int = 10) -> list[tuple[float, str]]:
    """The `n` tests that took longest (setup + call + teardown, as pytest's JUnit file counts them)."""
    total: dict[str, float] = defaultdict(float)
    for path in junit_files:
        if not path.is_file():
            continue
        for case in ET.parse(path).iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            total[name] += float(case.get("time") or 0)
    return sorted(((s, t) for t, s in total.items()), reverse=True)[:n]


def record(tier: str, elapsed: float, run: str, directory: Path | None = None) -> Path:
    """Add `tier`'s seconds to test-tiers.json: to its figures if the file is this run's, else to a new file."""
    sys.path.insert(0, str(ROOT))
    from transforms.core.results import figure, results_dir, write_result

    path = (directory or results_dir()) / f"{RESULT}.json"
    figures, data = {}, {"run": run, "budgets_s": BUDGETS}
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("data", {}).get("run") == run:
            figures = old["figures"]
    what = (f"wall seconds of scripts/test.sh's {tier} tier" if tier not in UNBUDGETED
            else f"wall seconds of scripts/test.sh's {tier}")
    figures[f"{tier.replace('-', '_')}_s"] = figure(round(elapsed), "s", what + " on a fresh clone")
    if tier in BUDGETS:
        figures[f"{tier.replace('-', '_')}_budget_s"] = figure(BUDGETS[tier], "s", f"the {tier} tier's budget")
    return write_result(RESULT, figures, benchmark="scripts/test.sh",
                        command="PIQAFORGE_RECORD_TIERS=1 " + os.environ.get("PIQAFORGE_TIER_COMMAND", "bash .ci/run"),
                        data=data, directory=directory)


def check(tier: str, elapsed: float, junit_files: list[Path]) -> int:
    if tier not in BUDGETS and tier not in UNBUDGETED:
        print(f"tier_budget: unknown tier {tier!r}; tiers with a budget: {', '.join(BUDGETS)}", file=sys.stderr)
        return 2
    if os.environ.get("PIQAFORGE_RECORD_TIERS") == "1":
        print(f"recorded in {record(tier, elapsed, os.environ.get('PIQAFORGE_TIER_RUN', ''))}")
    if tier in UNBUDGETED:
        print(f"== {tier}: {elapsed:.0f} s")
        return 0
    budget = BUDGETS[tier]
    share = elapsed / budget
    print(f"== tier {tier}: {elapsed:.0f} s of its {budget} s budget ({share:.0%})")
    if elapsed <= budget * SLACK:
        return 0
    print(f"tier {tier} is over its budget by more than {SLACK - 1:.0%} ({elapsed:.0f} s > {budget * SLACK:.0f} s): "
          "make the slowest tests cheaper or move them to a slower tier (scripts/tier_budget.py holds the budgets)")
    for seconds, test in slowest(junit_files):
        print(f"  {seconds:7.1f} s  {test}")
    if os.environ.get("PIQAFORGE_STRICT_BUDGETS", "1") != "1":
        print("(PIQAFORGE_STRICT_BUDGETS=0: reported, not failed)")
        return 0
    return 3


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    return check(argv[0], float(argv[1]), [Path(p) for p in argv[2:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
