"""Jobs: one thin module per recipe (config + composition of stages).

Registered by name as "module" strings so `piqaforge --help` imports nothing heavy.
Each module defines `Config` (a pydantic model, defaults in `jobs/configs/<module>.yaml`) and
`run(config, *, run_id=None, resume=False) -> dict` returning the paths worth printing.
"""

JOBS: dict[str, str] = {
    "ko-piqa": "jobs.ko_piqa",
    "ko-piqa-items": "jobs.ko_piqa_items",
    "pindic": "jobs.pindic",
    "j-piqa": "jobs.j_piqa",
    "ru-piqa": "jobs.ru_piqa",
    "ta-piqa": "jobs.ta_piqa",
    "evaluate": "jobs.evaluate",
    "release": "jobs.release",
}
