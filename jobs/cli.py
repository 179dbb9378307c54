"""`piqaforge` command line: run a job locally or on the Ray cluster it is submitted to.

The parser is jobs/parser.py, the overrides a command line makes jobs/overrides.py, what `run`, `submit`,
`publish` and `stages` do jobs/commands.py; here `main` dispatches and turns errors into one line.
"""

from __future__ import annotations

import logging
import os
import sys

from jobs import JOBS
from jobs.commands import (  # noqa: F401 (re-exported)
    UserError,
    _print_result,
    _publish,
    _run,
    _run_recipe,
    _stages,
    _submit,
)
from jobs.config import ConfigError
from jobs.overrides import (  # noqa: F401 (re-exported)
    flag_overrides,
    forwarded_secret_names,
    recipe_overrides,
    run_overrides,
)
from jobs.parser import build_parser
from transforms.core.secrets import install_log_scrubber, scrub_text
from transforms.flow.recipe import RecipeError


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the real command line: Ray's native log lines go to the run's ray.log, on a terminal or not
        os.environ.setdefault("PIQAFORGE_NATIVE_FILTER", "1")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.verbose:
        os.environ["PIQAFORGE_VERBOSE"] = "1"  # Ray's own log lines stay on the console
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_scrubber()  # no secret in our log lines (docs/secrets.md)
    try:
        if args.command == "jobs":
            for name, module in sorted(JOBS.items()):
                print(f"{name:<10} {module}")
            return 0
        if args.command == "recipes":
            from transforms.flow.recipe import list_recipes

            for name, description in list_recipes():
                print(f"{name:<12} {description}")
            return 0
        if args.command == "stages":
            return _stages(args)
        if args.command == "run":
            return _run(args, extra)
        if args.command in ("runs", "show"):
            from transforms.core.lake import Lake
            from transforms.core.manifest import RunManifest
            from transforms.core.run_listing import list_runs, show_run

            lake = Lake(args.lake)
            if args.command == "runs":
                print(list_runs(lake.root / "runs"))
                return 0
            path = lake.manifest_path(args.run_id)
            from transforms.flow.orchestrator import RecipeRecord, print_status

            if not path.exists() and (record := RecipeRecord.load(lake, args.run_id)) is not None:
                print(print_status(record, lake.run_dir(args.run_id)))
                return 0
            if not path.exists():
                raise UserError(f"no run {args.run_id!r} in {lake.root}")
            print(show_run(RunManifest.load(path), lake.run_dir(args.run_id) / "report.html"))
            return 0
        if args.command == "lineage":
            from transforms.core.lake import Lake
            from transforms.core.lineage import print_trace, trace

            try:
                print(print_trace(trace(Lake(args.lake), args.run_id, args.row_id), as_json=args.json))
            except KeyError as err:
                raise UserError(str(err.args[0])) from err
            return 0
        if args.command == "submit":
            return _submit(args, extra)
        if args.command == "publish":
            if extra:
                parser.error(f"unrecognised arguments: {' '.join(extra)}")
            return _publish(args)
        if args.command == "translate-eval":
            from jobs.translate_eval import run as run_translate_eval

            if extra:
                parser.error(f"unrecognised arguments: {' '.join(extra)}")
            return run_translate_eval(args)
        if args.command == "judge-eval":
            from jobs.judge_eval import run as run_judge_eval

            if extra:
                parser.error(f"unrecognised arguments: {' '.join(extra)}")
            return run_judge_eval(args)
        if args.command == "label":  # issue 43: the labelling loop (jobs/labelling.py)
            from jobs.labelling import run as run_label

            if extra:
                parser.error(f"unrecognised arguments: {' '.join(extra)}")
            return run_label(args)
        if args.command == "plan":  # issue 42: what a recipe run costs before it is submitted (jobs/plan.py)
            from jobs.plan_cli import run as run_plan

            if extra:
                parser.error(f"unrecognised arguments: {' '.join(extra)}")
            return run_plan(args)
        if args.command == "review":
            from jobs.review import run_review

            if extra:
                parser.error(f"unrecognised arguments: {' '.join(extra)}")
            return run_review(args)
        if extra:
            parser.error(f"unrecognised arguments: {' '.join(extra)}")
    except (ConfigError, UserError, RecipeError) as err:
        print(f"piqaforge: error: {scrub_text(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("piqaforge: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # one line for the user; the manifest keeps the traceback
        from transforms.core.stage import StageError
        from transforms.flow.context import RecipeRunError

        if isinstance(err, StageError | FileNotFoundError | ValueError | RecipeRunError):
            print(f"piqaforge: error: {scrub_text(str(err))}", file=sys.stderr)
            return int(getattr(err, "exit_code", 1))  # 2: a refused input (RefusedInputError)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
