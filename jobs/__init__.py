"""The command line, config loading and submission.

Recipes are files (jobs/recipes/<name>.yaml, run by the one orchestrator in transforms/flow); the jobs
registered here are the tools around them, each a thin module with `Config` (defaults in
jobs/configs/<module>.yaml) and `run(config, *, run_id=None, resume=False) -> dict`, registered by name as
"module" strings so `piqaforge --help` imports nothing heavy.
"""

JOBS: dict[str, str] = {
    "evaluate": "transforms.flow.evaluate",
    "release": "jobs.release",
}
