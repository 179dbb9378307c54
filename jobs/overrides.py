"""A command line's config overrides: job-style flags (`--review auto`), `--set KEY=VALUE`, `--input`,
`--lake`; and the secrets a job names, which `piqaforge submit` forwards outside Ray's job record."""

from __future__ import annotations

import argparse
from typing import Any

from jobs.config import ConfigError, parse_set
from jobs.parser import build_parser


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
