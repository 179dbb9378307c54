"""What `piqaforge run`, `submit`, `publish` and `stages` do once their arguments are parsed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from jobs.config import parse_set, resolve_config
from jobs.errors import UserError  # noqa: F401 (re-exported: jobs.commands.UserError)
from jobs.overrides import forwarded_secret_names, recipe_overrides, run_overrides
from transforms.core.secrets import scrub_text


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


def _submit(args: argparse.Namespace, extra: list[str]) -> int:
    from jobs.submit import SubmitError, dry_run, submit

    if (args.rows is not None or args.cluster) and not args.dry_run:
        raise UserError("--rows and --cluster are for `submit --dry-run` (a real submit plans nothing)")
    if not args.address and not args.dry_run:
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
    if args.dry_run:
        return dry_run(args.job, run_args + extra, address=args.address, rows=args.rows,
                       cluster=Path(args.cluster) if args.cluster else None, every_file=bool(args.verbose))
    try:
        _, status = submit(args.job, run_args + extra, address=args.address, follow=not args.no_wait,
                           secret_names=names, **options)
    except SubmitError as err:
        raise UserError(str(err)) from None
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
