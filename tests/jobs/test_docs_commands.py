"""Every `piqaforge` command the docs and the README give a reader is checked against the real CLI and recipes,
so a stale doc fails here (issue 32 §4).

Where commands are found: lines of fenced code blocks (``` or ~~~) that start with `piqaforge` (or a path to it,
after `VAR=value` assignments, `cd ... &&` or `;`; `\\` continuations joined; a trailing `# comment` dropped), and
inline code spans that start with `piqaforge `. Config examples are ```yaml blocks whose first line is
`# a --config FILE for <recipe>`: each is loaded as that recipe's `--config` file.

What each command gets:
- parsed by the real parser (`jobs.cli.build_parser`); a subcommand other than run/submit takes no extra argument;
- `run`/`submit` of a recipe: the recipe exists (jobs/recipes/<name>.yaml) and loads with the command's
  `--set` items, job-style flags, `--input`, `--allow-malformed` and `--config` (`load_recipe`, as `piqaforge run`
  does): an unknown param or dotted key is a RecipeError; `run` of a tool job (release, evaluate): its config
  resolves with the command's overrides (`resolve_config`);
- the cheap ones are executed and must exit 0: `piqaforge recipes`, `piqaforge stages [NAME] [--markdown]`,
  `piqaforge jobs`, anything with `--help`.

Placeholders, by rule (never by a list of lines):
- A usage synopsis, a command with `[optional]` parts or `a|b` / ` / ` alternatives, is not parsed as one
  command: its subcommand must exist and each `--option` it shows must be one of that subcommand's options.
- A command naming only a subcommand (`piqaforge run`, `piqaforge review import`) must name a real one.
- `...` or `…` stands for arguments left out: after an option that takes a value it is that value, else it is
  dropped; so is a shell variable (`$COMMON`, defined earlier in the doc).
- A value written as a placeholder (`<id>`, or a word in capitals such as RUN_ID, ORG/NAME, MY_FILES/) is
  parsed as it is; as the recipe, or in a `--set` key, it leaves that check out. A recipe given as a path or a
  `--config` file that is not in the repository is the reader's own file: not loaded (one under jobs/ must
  exist).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from jobs import JOBS
from jobs.cli import build_parser, main, recipe_overrides, run_overrides
from transforms.flow.recipe import RECIPES_DIR, is_recipe, load_recipe

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)")
SPAN = re.compile(r"(?<!`)`((?:\S*/)?piqaforge(?:\s[^`]*)?)`(?!`)")  # a span may run over a line break
LINE = re.compile(r"(?:^|&&|;)\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*((?:\S*/)?piqaforge(?:\s.*)?)$")
PLACEHOLDER = re.compile(r"<[^>]*>|[A-Z]{2,}[A-Z0-9_]*(?![a-z])")
ELLIPSIS = ("...", "…")
CHEAP = ("recipes", "stages", "jobs")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _strip_comment(line: str) -> str:
    """`cmd  # comment` → `cmd` (a `#` inside a word, as in a URL fragment, stays)."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


def doc_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        in_block, i, prose = False, 0, 0  # prose: where the text outside blocks since the last block starts
        while i < len(lines):
            line, start = lines[i], i
            if FENCE.match(line):
                if not in_block:
                    found += _spans(path, lines, prose, i)
                in_block, prose = not in_block, i + 1
            elif in_block:
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                if m := LINE.search(_strip_comment(line)):
                    found.append(DocCommand(f"{path.name}:{start + 1}", m.group(1).strip()))
            i += 1
        found += _spans(path, lines, prose, len(lines))
    return found


def _spans(path: Path, lines: list[str], start: int, end: int) -> list[DocCommand]:
    """Inline code spans naming piqaforge in lines[start:end] (prose), a span over a line break joined."""
    text = "\n".join(lines[start:end])
    return [DocCommand(f"{path.name}:{start + text[:m.start()].count(chr(10)) + 1}", " ".join(m.group(1).split()))
            for m in SPAN.finditer(text)]


def config_examples() -> list[tuple[str, str | None, str]]:
    """(file:line, recipe, YAML text) of every ```yaml block whose first line is a comment about a config: the
    recipe is the first bundled recipe that comment names (None: it names none)."""
    recipes = sorted((p.stem for p in RECIPES_DIR.glob("*.yaml")), key=len, reverse=True)
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```ya?ml\n(#([^\n]*\bconfig\b[^\n]*)\n.*?)^```", text, re.M | re.S):
            named = [(m.group(2).find(r), r) for r in recipes if re.search(rf"\b{r}\b", m.group(2))]
            out.append((f"{path.name}:{text[:m.start()].count(chr(10)) + 1}", min(named)[1] if named else None,
                        m.group(1)))
    return out


def _subparsers(parser) -> dict:
    import argparse

    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices if actions else {}


def _options(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def _takes_value(parser, option: str) -> bool:
    action = parser._option_string_actions.get(option.split("=", 1)[0])
    return action is None or action.nargs != 0  # a job-style flag (`--review auto`) takes one


def _placeholder_value(parser, option: str, word: str = "x") -> str:
    """What a placeholder stands for after `option`: its first choice, a number for a number, else `word`."""
    action = parser._option_string_actions.get(option)
    if action is not None and action.choices:
        return str(action.choices[0])
    return "1" if action is not None and action.type in (int, float) else word


def _command_path(words: list[str]):
    """The subcommand words at the head of `words` and the parser they lead to."""
    parser, used = build_parser(), []
    for word in words:
        sub = _subparsers(parser)
        if word not in sub:
            break
        parser, used = sub[word], [*used, word]
    return parser, used


def _words(cmd: DocCommand) -> list[str]:
    words = shlex.split(re.sub(r"<[^>]*>", lambda m: m.group(0).replace(" ", "_"), cmd.text))  # `<run id>`: one word
    assert Path(words[0]).name == "piqaforge", cmd
    return words[1:]


def is_synopsis(words: list[str]) -> bool:
    """Alternatives (`a|b`, ` / `): a usage synopsis, not one command."""
    return any(w == "/" or "|" in w for w in words)


def optional_parts_included(words: list[str]) -> list[str]:
    """`[--version 1.0]` → `--version 1.0`: a command's optional parts are checked as if given."""
    out = []
    for w in words:
        if w.startswith("["):
            w = w[1:]
        if w.endswith("]") and "[" not in w:
            w = w[:-1]
        out.append(w)
    return out


def concrete(words: list[str], parser) -> list[str]:
    """The argument list a reader would type: `...` after a value option is its value, else dropped (`FILES...`:
    the placeholder FILES); `$VAR` dropped."""
    out: list[str] = []
    for w in words:
        if w in ELLIPSIS:
            if out and out[-1].startswith("--") and "=" not in out[-1] and _takes_value(parser, out[-1]):
                out.append(_placeholder_value(parser, out[-1]))
        elif w.endswith(ELLIPSIS) and PLACEHOLDER.search(w):
            out.append(w.rstrip(".…"))
        elif re.fullmatch(r"<[^>]*>|[A-Z][A-Z0-9_:/.-]*", w) and out and out[-1].startswith("--"):
            out.append(_placeholder_value(parser, out[-1], w))  # `--k K`: a number
        elif not w.startswith("$"):
            out.append(w)
    return out


COMMANDS = doc_commands()


def test_the_docs_give_commands_of_every_kind():
    """The extraction itself: blocks, spans, continuations, env prefixes and synopses are all found."""
    texts = {c.text for c in COMMANDS}
    assert len(COMMANDS) > 100
    assert "piqaforge recipes" in texts and "piqaforge stages --markdown" in texts
    assert any(t.startswith("piqaforge publish lake/release/ta-piqa/") and "--private" not in t for t in texts)
    assert any(t.startswith("piqaforge review agreement ../shared/data/ru_russiansuperglue_humanbench") and
               "--json" in t for t in texts)  # a `\` continuation joined
    assert any(is_synopsis(_words(c)) for c in COMMANDS)
    assert config_examples(), "no --config example found"


@pytest.mark.parametrize("cmd", COMMANDS, ids=str)
def test_a_documented_command_is_real(cmd, capsys):
    words = _words(cmd)
    if not words:
        return  # `piqaforge`: the program's name
    parser, path = _command_path(words)
    assert path, f"{cmd}: no such piqaforge command {words[:1]}"
    if is_synopsis(words):
        if "/" in words:  # `review export / push / pull`: each is a subcommand beside the first
            group, _ = _command_path(path[:-1])
            for alt in (w for w in words[len(path):] if w != "/"):
                assert alt in _subparsers(group), f"{cmd}: no command {' '.join([*path[:-1], alt])!r}"
            return
        for w in words:
            option = w.strip("[]").split("=", 1)[0]
            if option.startswith("--"):
                assert option in _options(parser), f"{cmd}: {' '.join(path)} has no option {option}"
        return
    argv = concrete(optional_parts_included(words), parser)
    if len(argv) == len(path) and path[0] not in CHEAP:
        return  # the bare name of a command (`piqaforge run`, `piqaforge review import …`): it exists
    if path == ["run"] and len(argv) == 2 and argv[1] in JOBS:
        return  # `piqaforge run release`: the name of a tool job
    try:
        args, extra = build_parser().parse_known_args(argv)
    except SystemExit as err:
        if "--help" in argv or "-h" in argv:
            assert err.code == 0, cmd
            return
        pytest.fail(f"{cmd}: argparse refused it: {capsys.readouterr().err.strip()}")
    if args.command not in ("run", "submit"):
        assert not extra, f"{cmd}: unrecognised arguments {extra}"
    if args.command in ("run", "submit"):
        _check_run(cmd, args, extra)
    if args.command in CHEAP:
        assert main(argv) == 0, f"{cmd}: {capsys.readouterr().err}"
        assert capsys.readouterr().out.strip(), f"{cmd}: printed nothing"


def _check_run(cmd: DocCommand, args, extra: list[str]) -> None:
    config = None if args.config and PLACEHOLDER.search(args.config) else args.config  # jobs/configs/<recipe>-...
    if config and not (ROOT / config).exists():
        assert not config.startswith("jobs/"), f"{cmd}: no config file {config}"
        config = None  # the reader's own file
    if args.job not in JOBS and not is_recipe(args.job) and args.job.endswith(".yaml") \
            or PLACEHOLDER.search(args.job):
        assert not args.job.startswith("jobs/"), f"{cmd}: no recipe file {args.job}"
        return  # the reader's own recipe file, or a placeholder
    assert is_recipe(args.job) or args.job in JOBS, f"{cmd}: no recipe or job {args.job!r} (`piqaforge recipes`)"
    overrides_keys = [item.split("=", 1)[0] for item in args.set or []]
    if any(PLACEHOLDER.search(k) for k in overrides_keys):
        args.set = [s for s in args.set if not PLACEHOLDER.search(s.split("=", 1)[0])]
    if is_recipe(args.job):
        assert (RECIPES_DIR / f"{args.job}.yaml").exists() or Path(args.job).exists(), cmd
        load_recipe(args.job, recipe_overrides(args, extra), config_file=config and str(ROOT / config))
        return
    assert not args.allow_malformed, f"{cmd}: --allow-malformed is for a recipe"
    from jobs.config import resolve_config

    resolve_config(args.job, config and str(ROOT / config), run_overrides(args, extra), bind_lake=False)


@pytest.mark.parametrize("where, recipe, text", config_examples(), ids=[w for w, _, _ in config_examples()])
def test_a_documented_config_file_loads_with_its_recipe(where, recipe, text, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    assert recipe, f"{where}: a config example names the recipe it is for in its first line"
    assert isinstance(yaml.safe_load(text), dict), where
    load_recipe(recipe, {}, config_file=str(path))


def test_a_stale_command_fails_the_check():
    """The checks bite: an unknown param, an unknown dotted key, an unknown recipe, an unknown option."""
    from jobs.config import ConfigError
    from transforms.flow.recipe import RecipeError

    stale = [("piqaforge run ta-piqa --set review_run=r1", RecipeError),
             ("piqaforge run ko-piqa --set runs.crawl.stages.no_such_stage.threshold=1", RecipeError),
             ("piqaforge run zh-piqa --config jobs/configs/no-such.yaml", AssertionError),
             ("piqaforge run release --input x.jsonl --no-such-field 1", ConfigError),
             ("piqaforge run no-such-recipe", AssertionError)]
    for text, error in stale:
        cmd = DocCommand("x:1", text)
        args, extra = build_parser().parse_known_args(_words(cmd))
        with pytest.raises(error):
            _check_run(cmd, args, extra)
    parser, path = _command_path(["publish"])
    assert "--repo" in _options(parser) and "--no-such-option" not in _options(parser)


def test_a_config_in_the_format_from_before_recipes_is_refused(tmp_path):
    """What docs/secrets.md and docs/cluster.md showed before: a top-level block per stage."""
    from transforms.flow.recipe import RecipeError

    path = tmp_path / "old.yaml"
    path.write_text("normalize: {resources: {secrets: [HF_TOKEN]}}\n", encoding="utf-8")
    with pytest.raises(RecipeError, match="normalize"):
        load_recipe("ko-piqa", {}, config_file=str(path))
