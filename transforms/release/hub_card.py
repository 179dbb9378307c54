"""The parts of the dataset card a Hub user reads first: how to load it, how the items were made and
reviewed, the sources with their licences and attribution, the columns, and how to cite it."""

from __future__ import annotations

from typing import Any

from transforms.piqa.schema import REVIEW_COLUMNS
from transforms.release.hub import BENCHMARK_COLUMNS, COLUMN_DOCS, SPLIT
from transforms.release.licences import SourceSpec


def _estimate(e: dict[str, Any] | None) -> str:
    if not e or e.get("value") is None:
        return f"undefined ({e.get('undefined')})" if e else "not computed"
    ci = e.get("ci")
    return f"{e['value']:.3f}" + (f" (95% CI {ci[0]:.3f}–{ci[1]:.3f})" if ci else "")


def review_section(review: dict[str, Any] | None, agreement: dict[str, Any] | None) -> str:
    """Who reviewed the items: people (how many, agreement with intervals), LLM annotators, or nobody."""
    lines = ["## How the items were reviewed", ""]
    if not review:
        lines.append("**Not reviewed by people** for this release: the items and their labels are as the sources "
                     "(below) give them, checked only by the automatic quality gate.")
    elif not review.get("people"):
        lines.append(f"**Not reviewed by people.** {review['automatic']:,} items were reviewed automatically by "
                     "LLM annotators (a dry run of the review); no person validated them, and the metadata says "
                     "`annotations_creators: machine-generated`.")
    else:
        who = f"{review['people']:,} items were reviewed by people"
        if review.get("automatic"):
            who += f" and {review['automatic']:,} automatically by LLM annotators (not people)"
        lines.append(who + f" (batch {', '.join(review.get('batches') or []) or '–'}).")
    if agreement:
        rule = (agreement.get("rule") or {}).get("rule")
        kind = "LLM annotators" if agreement.get("automatic") else "annotators"
        lines += ["", "| | |", "|---|---|",
                  f"| annotators | {agreement.get('annotators')} {kind} per item, consensus rule {rule} |",
                  f"| items reviewed / kept | {agreement.get('items')} / {agreement.get('kept')} |",
                  f"| percent agreement | {_estimate(agreement.get('percent_agreement'))} |",
                  f"| Fleiss' kappa | {_estimate(agreement.get('fleiss_kappa'))} |",
                  f"| Krippendorff's alpha | {_estimate(agreement.get('krippendorff_alpha'))} |", "",
                  "Intervals are percentile bootstrap intervals over items. Annotators appear in the data only "
                  "as pseudonymous ids (`annotator-1`, ...)."]
    return "\n".join(lines) + "\n"


def sources_section(licence: str, sources: list[SourceSpec], notes: list[str], conflicts: list[str]) -> str:
    lines = ["## Sources and licence", "", f"This release is licensed **{licence}**."]
    if sources:
        lines += ["", "| source | licence | attribution |", "|---|---|---|"]
        for s in sources:
            name = f"[{s.name}]({s.url})" if s.url else s.name
            credit = s.attribution or "–"
            if s.note:
                credit += f" ({s.note})"
            lines.append(f"| {name} | {s.licence} | {credit} |")
        if conflicts:
            lines += ["", "**The gate refused this licence:**"] + [f"- {c}" for c in conflicts]
        else:
            lines += ["", "Each source's licence allows this release's licence (checked by the gate: share-alike "
                      "sources need the same terms, non-commercial ones a non-commercial release)."]
    else:
        lines += ["", "No source was declared: the items were written for this benchmark."]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def citation_section(name: str, version: str, repo_id: str | None, sources: list[SourceSpec]) -> str:
    key = "".join(ch for ch in name.lower() if ch.isalnum()) + version.replace(".", "")
    where = f"https://huggingface.co/datasets/{repo_id}" if repo_id else "piqaforge release folder"
    lines = ["## Citation", "", "```bibtex", f"@misc{{{key},", f"  title = {{{name} ({version})}},",
             f"  note = {{Built with piqaforge; {where}}},", f"  year = {{{version[:4] if version[:4].isdigit() else ''}}}",
             "}"]
    cited = [s.citation.strip() for s in sources if s.citation and s.citation.strip()]
    lines += [c for c in cited if is_bibtex(c)]
    lines.append("```")
    prose = [c for c in cited if not is_bibtex(c)]  # a reference written as prose is not BibTeX: cited as text
    if prose:
        lines += ["", "Please also cite the sources:", "", *[f"- {c}" for c in prose]]
    return "\n".join(lines) + "\n"


def is_bibtex(text: str) -> bool:
    """A BibTeX entry (`@article{key, ...}`), as opposed to a reference written as prose."""
    import re

    return re.match(r"^@[A-Za-z]+\s*[{(]", text.strip()) is not None


def usage_section(name: str, configs: dict[str, int], repo_id: str | None, groups: list[str],
                  hub_groups: list[str] | None = None) -> str:
    path = repo_id or "path/to/this/folder"
    first = next(iter(configs))
    lines = ["## Use", "", "```python", "from datasets import load_dataset", "",
             f"ds = load_dataset(\"{path}\", \"{first}\", split=\"{SPLIT}\")", "```", "",
             "| config | split | items |", "|---|---|---|"]
    lines += [f"| `{c}` | `{SPLIT}` | {n:,} |" for c, n in configs.items()]
    run = "`lm_eval --model hf --model_args pretrained=<model> --include_path lm_eval --tasks "
    lines += ["", f"lm-evaluation-harness from inside this folder: {run}{','.join(groups)}` (cloze: acc, acc_norm, "
              "acc_bytes; generation: the A/B prompt, exact_match)."]
    if hub_groups:
        lines += ["", f"The same tasks over the published dataset `{repo_id}` (lm_eval/hub/, from anywhere the "
                  f"lm_eval folder is): {run}{','.join(hub_groups)}`."]
    return "\n".join(lines) + "\n"


def columns_section(columns: list[str], added_by: dict[str, list[str]] | None = None) -> str:
    """The card's column table; with `added_by` (column -> stages), the stages of the recipe that add each."""
    def origin(column: str) -> str:
        if column in REVIEW_COLUMNS:
            return "the review"
        stages = (added_by or {}).get(column)
        return ", ".join(f"`{s}`" for s in stages) if stages else "the recipe (input or `set_columns`)"

    lines = ["## Columns", "", "| column | meaning | added by |", "|---|---|---|"]
    lines += [f"| `{c}` | {COLUMN_DOCS.get(c, 'declared by the recipe (release.columns)')} | "
              f"{'—' if c in BENCHMARK_COLUMNS else origin(c)} |" for c in columns]
    lines += ["", "Nothing else is published: source posts, raw model output, annotators' names and comments "
              "stay in the lake."]
    return "\n".join(lines) + "\n"
