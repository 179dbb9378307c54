"""Evaluation of models on PIQA-style releases, and the release's artifact audit.

items.py      the columns an evaluated table needs, subsets, swapping solutions
templates.py  prompts/eval_*/ templates (YAML + Jinja2, StrictUndefined)
parse.py      answer parsing (exact, then lenient) and refusal detection
metrics.py    accuracy with Wilson intervals, random baselines, swap consistency
evaluator.py  generation and log-likelihood scoring of a table by one LLMEngine
report.py     the papers' table (Markdown, CSV) and a plot
audit.py      shortcut baselines (length, overlap, solution-only BoW) and the flag
lm_eval_export.py  a release as an lm-evaluation-harness task

Nothing heavy is imported here; scikit-learn and matplotlib load inside the functions that use them.
"""
