"""Deprecated (kept for one release): the judges' HTML is transforms/recipes/ko_piqa/judge_report.py; a recipe's
report hook is `transforms.recipes.ko_piqa.judge_report:render_judges`."""

from transforms.recipes.ko_piqa.judge_report import (  # noqa: F401
    json_dumps,
    plot_png,
    render_judge_eval,
    render_judges,
    render_run,
)
