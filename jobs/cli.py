"""`piqaforge` command line: run a job locally or on the Ray cluster it is submitted to."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from jobs import JOBS
from jobs.config import ConfigError, parse_set, resolve_config
from transforms.core.secrets import install_log_scrubber, scrub_text
from transforms.flow.recipe import RecipeError


class UserError(Exception):
    """An error to print as one clear message, without a stack trace."""


def _run(args: argparse.Namespace, extra: list[str]) -> int:
    from jobs.config import load_job_module
    from jobs.submit import RECIPE_FROM_ENV, RECIPE_TEXT_VAR
    from transforms.flow.recipe import is_recipe

    if args.job == RECIPE_FROM_ENV:  # submitted from outside the repository: the recipe came in the environment
        import base64
        import tempfile

        text = os.environ.get(RECIPE_TEXT_VAR)
        if not text:
            raise UserError(f"run {RECIPE_FROM_ENV}: no recipe in ${RECIPE_TEXT_VAR} (piqaforge submit sets it)")
        path = Path(tempfile.mkdtemp(prefix="piqaforge-recipe-")) / "recipe.yaml"
        path.write_bytes(base64.b64decode(text))
        args.job = str(path)

    if is_recipe(args.job):
        return _run_recipe(args, extra)
    if args.allow_malformed:
        raise UserError(f"--allow-malformed sets a recipe's allow_malformed param; {args.job!r} is a tool job")
    overrides = run_overrides(args, extra)
    module = load_job_module(args.job)
    config = resolve_config(args.job, args.config, overrides)
    if os.environ.get("PIQAFORGE_VERBOSE") != "1":
        from transforms.core.ray_logs import hold_ray_logs

        hold_ray_logs()  # Ray's start-up lines go to the run's logs/ray.log, not the console
    result = module.run(config, run_id=args.run_id or args.resume, resume=bool(args.resume))
    return _print_result(args.job, result or {})


def _print_result(job: str, result: dict[str, Any]) -> int:
    """The last run's funnel, outputs and report, then what the summary did not print."""
    status = result.get("status")
    print(f"\n{job}: {status if status and status != 'succeeded' else 'done'}")
    shown: dict[str, str] = {}  # key → value already printed by the summary
    if result.get("manifest") and os.path.exists(str(result["manifest"])):
        # the funnel, outputs, report and judges' figures of the job's (last) run
        from pathlib import Path

        from transforms.core.manifest import RunManifest
        from transforms.core.run_listing import run_summary

        manifest = RunManifest.load(Path(str(result["manifest"])))
        report = Path(str(result["report"])) if result.get("report") else None
        print(scrub_text(run_summary(manifest, report)))
        shown = {"run_id": manifest.run_id, **manifest.outputs}
        if report is not None and report.exists():
            shown["report"] = str(report)
    for key, value in result.items():
        if shown.get(key) != str(value):  # what the summary did not print (a second run, a release ...)
            print(f"  {key:<10} {scrub_text(str(value))}")
    return int(result.get("exit_code", 0))


def flag_overrides(extra: list[str], sets: list[str] | None = None) -> dict[str, Any]:
    """Job-style flags of a command line (`--recipe x`, `--review auto`, `--version 2`) as overrides of that name,
    then the `--set KEY=VALUE` items."""
    overrides: dict[str, Any] = {}
    it = iter(extra)
    for token in it:
        if not token.startswith("--"):
            raise ConfigError(f"unexpected argument {token!r}")
        key = token[2:].replace("-", "_")
        key, value = key.split("=", 1) if "=" in key else (key, next(it, None))
        if value is None:
            raise ConfigError(f"{token} needs a value")
        overrides[key] = parse_set(f"{key}={value}")[1]
    overrides.update(parse_set(item) for item in sets or [])
    return overrides


def recipe_overrides(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """`--set`, `--input` and job-style flags (`--review auto`) of a recipe's command line."""
    overrides = flag_overrides(extra, args.set)
    if args.input:
        overrides["input"] = args.input[0] if len(args.input) == 1 else list(args.input)
    if getattr(args, "allow_malformed", False):
        overrides["allow_malformed"] = True
    return overrides


def _stages(args: argparse.Namespace) -> int:
    import difflib

    from transforms.flow import catalogue
    from transforms.flow.registry import STAGES

    if args.markdown:
        print(catalogue.reference_markdown(), end="")
    elif args.name is None:
        print("\n".join(catalogue.stages_lines()))
    elif args.name in STAGES:
        print(catalogue.stage_text(args.name))
    else:
        near = difflib.get_close_matches(args.name, list(STAGES), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        print(f"piqaforge: error: no stage {args.name!r}{hint} (`piqaforge stages` lists them)", file=sys.stderr)
        return 2
    return 0


def _run_recipe(args: argparse.Namespace, extra: list[str]) -> int:
    from jobs.config import apply_secrets_env
    from jobs.forwarding import receive_forwarded_secrets
    from transforms.core.secrets import bind_fingerprint_key
    from transforms.flow.orchestrator import run_recipe
    from transforms.flow.recipe import load_recipe, secret_names_of

    overrides = recipe_overrides(args, extra)
    # under `piqaforge submit`, secrets (and --set items holding one) arrive outside Ray's job record
    overrides.update(dict(parse_set(item) for item in receive_forwarded_secrets()))
    recipe = load_recipe(args.job, overrides, config_file=args.config)
    apply_secrets_env(secret_names_of(recipe))
    bind_fingerprint_key(args.lake or "lake")
    if os.environ.get("PIQAFORGE_VERBOSE") != "1":
        from transforms.core.ray_logs import hold_ray_logs

        hold_ray_logs()
    command = ["piqaforge", "run", args.job, *(a for s in args.set or [] for a in ("--set", s)),
               *(["--allow-malformed"] if args.allow_malformed else []), *extra]
    result = run_recipe(recipe, lake=args.lake or "lake", run_id=args.run_id or args.resume,
                        resume=bool(args.resume), command=command)
    return _print_result(args.job, result)


def run_overrides(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """The config overrides of a `run` command line (`piqaforge submit` resolves the same config)."""
    from jobs.config import load_job_module

    overrides = flag_overrides(extra, args.set)
    if args.lake:
        overrides["lake"] = args.lake
    module = load_job_module(args.job)
    if args.input:
        input_field = module.Config.model_fields.get("input")
        takes_paths = input_field is not None and hasattr(input_field.annotation, "model_fields") and \
            "paths" in input_field.annotation.model_fields
        overrides["input.paths" if takes_paths else "input"] = args.input if takes_paths else args.input[0]
    return overrides


def forwarded_secret_names(job: str, run_args: list[str]) -> list[str]:
    """The variables the job names in `secrets:` (job level and per stage), from its resolved config."""
    from jobs.config import resolve_config, secret_names
    from transforms.flow.recipe import is_recipe, load_recipe, secret_names_of

    args, extra = build_parser().parse_known_args(["run", job, *run_args])
    if is_recipe(job):
        return secret_names_of(load_recipe(job, recipe_overrides(args, extra), config_file=args.config))
    return secret_names(resolve_config(job, args.config, run_overrides(args, extra), bind_lake=False))


def _submit(args: argparse.Namespace, extra: list[str]) -> int:
    from jobs.submit import submit

    if not args.address:
        raise UserError("submit needs --address http://HEAD:8265 (or $RAY_DASHBOARD_ADDRESS)")
    run_args: list[str] = []
    for flag in ("config", "lake", "run_id", "resume"):
        if getattr(args, flag):
            run_args += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    if args.input:
        run_args += ["--input", *args.input]
    for item in args.set or []:
        run_args += ["--set", item]
    if args.allow_malformed:
        run_args.append("--allow-malformed")
    names = forwarded_secret_names(args.job, run_args + extra)  # secret --set items included: they name none
    env_vars = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise UserError(f"--env expects NAME=VALUE, got {item!r}")
        env_vars[name] = value
    options = {"env_vars": env_vars} if env_vars else {}
    _, status = submit(args.job, run_args + extra, address=args.address, follow=not args.no_wait, secret_names=names,
                       **options)
    return 0 if args.no_wait or status == "SUCCEEDED" else 1


def _publish(args: argparse.Namespace, client: Any = None) -> int:
    from transforms.release.publish import PublishError, publish

    try:
        info = publish(args.release_dir, args.repo, private=args.private, dry_run=args.dry_run, client=client)
    except PublishError as err:
        raise UserError(str(err)) from err
    verb = "would upload" if args.dry_run else "uploaded"
    print(f"{verb} {len(info['files'])} files ({info['bytes']:,} bytes, {info['items']} items) from {info['folder']} "
          f"to https://huggingface.co/datasets/{info['repo_id']}{' (private)' if args.private else ''}")
    for name in info["files"]:
        print(f"  {name}")
    if args.dry_run:
        print("card: metadata checked offline against the Hub's documented values (the Hub's own validate() "
              "needs the network)")
    else:
        print(f"commit: {info.get('commit')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="piqaforge", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job (locally, or on the cluster under `ray job submit`)")
    run.add_argument("job", metavar="RECIPE", help="a recipe (jobs/recipes/<name>.yaml; `piqaforge recipes`), a "
                     "recipe file (PATH.yaml), or a tool job (release, evaluate; `piqaforge jobs`)")
    run.add_argument("--config", help="YAML file merged over the job's defaults (jobs/configs/)")
    run.add_argument("--input", nargs="+", help="input path(s), overriding the config")
    run.add_argument("--lake", help="lake root directory")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config value (dotted keys)")
    run.add_argument("--run-id", help="name the run (default: <job>-<utc time>-<random>)")
    run.add_argument("--resume", metavar="RUN_ID", help="continue RUN_ID, reusing finished stages")
    run.add_argument("--allow-malformed", action="store_true", help="human-authored input files with a malformed "
                     "line (cut in the middle) are refused whole (exit 2); keep the rest instead and say how many "
                     "lines were set aside (sets the recipe's allow_malformed param)")
    submit = sub.add_parser("submit", help="run a job on a Ray cluster through the Jobs API (docs/cluster.md)")
    submit.add_argument("job", metavar="RECIPE", help="a recipe (`piqaforge recipes`) or a tool job, as for `run`")
    submit.add_argument("--address", default=os.environ.get("RAY_DASHBOARD_ADDRESS"),
                        help="the cluster's Jobs API, e.g. http://HEAD:8265 (default: $RAY_DASHBOARD_ADDRESS)")
    submit.add_argument("--no-wait", action="store_true", help="print the job id and return; do not stream logs")
    submit.add_argument("--env", action="append", metavar="NAME=VALUE", default=[],
                        help="an environment variable for the job's driver and workers (not for secrets: Ray "
                        "keeps these in the job record; name secrets in the recipe's `secrets:`)")
    for flag, kwargs in (("--config", {}), ("--input", {"nargs": "+"}), ("--lake", {}),
                         ("--set", {"action": "append", "metavar": "KEY=VALUE"}), ("--run-id", {}),
                         ("--resume", {"metavar": "RUN_ID"}), ("--allow-malformed", {"action": "store_true"})):
        submit.add_argument(flag, help="as for `run`", **kwargs)  # type: ignore[arg-type]
    publish = sub.add_parser("publish", help="push a released folder to the Hugging Face Hub (token: $HF_TOKEN)")
    publish.add_argument("release_dir", metavar="RELEASE_DIR", help="a release folder that carries RELEASED")
    publish.add_argument("--repo", required=True, metavar="ORG/NAME", help="the Hub dataset id")
    publish.add_argument("--private", action="store_true", help="create the dataset repo private")
    publish.add_argument("--dry-run", action="store_true", help="check offline and print what would be uploaded")
    sub.add_parser("jobs", help="list the jobs")
    sub.add_parser("recipes", help="list the recipes (jobs/recipes/*.yaml), one line each")
    stages = sub.add_parser("stages", help="the stages a recipe file can use, one line each; with NAME, its fields")
    stages.add_argument("name", nargs="?", help="a stage: print its fields (type, default, description), "
                        "what it reads and writes and the extras it needs")
    stages.add_argument("--markdown", action="store_true", help="the whole reference as Markdown "
                        "(docs/stages_reference.md is this output)")
    from jobs.judge_eval import add_parser as add_judge_eval_parser  # argparse only

    add_judge_eval_parser(sub)
    runs = sub.add_parser("runs", help="list the runs in a lake (id, job, status, rows in → kept, parents)")
    runs.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    show = sub.add_parser("show", help="print a run's funnel, drop reasons, outputs and report path")
    show.add_argument("run_id")
    show.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    lineage = sub.add_parser("lineage", help="print a row's parent chain back to its source row or request")
    lineage.add_argument("run_id", help="the run holding the row")
    lineage.add_argument("row_id", help="the row's id")
    lineage.add_argument("--lake", default="lake", help="lake root directory (default: lake)")
    lineage.add_argument("--json", action="store_true", help="print the hops as JSON")
    from jobs.review import add_review_parser  # argparse only: nothing heavy is imported

    add_review_parser(sub)
    from jobs.translate_eval import add_parser as add_translate_eval_parser  # argparse only

    add_translate_eval_parser(sub)
    return parser


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
