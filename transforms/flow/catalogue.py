"""What every registered stage says about itself, for `piqaforge stages [NAME]` and docs/stages_reference.md.

Everything here is read from the stage classes (their docstring, typed fields with descriptions and
defaults, `reads` / `writes`, `extras`, `stateful`, the members of their drop reasons' enum, `release_columns`): nothing is written
beside them (a release column's meaning is transforms/piqa/schema.ITEM_COLUMNS's). The reference document
is generated (`piqaforge stages --markdown > docs/stages_reference.md`) and a test keeps it current.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

from transforms.flow.recipe_check import ENTRY_KEYS
from transforms.flow.registry import DEPRECATED, STAGES, stage_class


@dataclass(frozen=True)
class FieldDoc:
    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class StageDoc:
    name: str
    ref: str
    summary: str
    kind: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    extras: tuple[str, ...]
    fields: tuple[FieldDoc, ...]
    drop_reasons: tuple[tuple[str, str], ...] = ()
    release_columns: tuple[tuple[str, str], ...] = ()
    fuses: bool = False  # runs in one pass with its fusable neighbours (transforms/core/fusion.py)

    @property
    def kind_text(self) -> str:
        return f"{self.kind}, fuses with cheap neighbours into one pass" if self.fuses else self.kind


def _type(annotation: Any) -> str:
    """A readable type: `list[Classifier | LinearClassifier]`, not pydantic's Annotated/Discriminator repr."""
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type(typing.get_args(annotation)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in typing.get_args(annotation)) + "]"
    if origin is not None:
        args = typing.get_args(annotation)
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type(a) for a in args)}]" if args else name
    if isinstance(annotation, type):
        return "None" if annotation is type(None) else annotation.__name__
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", str(annotation)).replace("NoneType", "None")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    else:
        value = field.default
    text = repr(value)
    # a nested config's defaults are its own fields' (docs/cluster.md for `resources`)
    return f"{type(value).__name__}() defaults" if len(text) > 80 and hasattr(type(value), "model_fields") else text


def _description(cls: Any, name: str, field: Any) -> str:
    """The field's description, or its base class's when a subclass only changed the default."""
    if field.description:
        return str(field.description)
    for base in cls.__mro__[1:]:
        inherited = getattr(base, "model_fields", {}).get(name)
        if inherited is not None and inherited.description:
            return str(inherited.description)
    return ""


def _kind(cls: Any) -> str:
    names = [c.__name__ for c in cls.__mro__]
    if "SourceStage" in names or cls.__name__.endswith("Source"):
        return "source"
    if "GlobalStage" in names:
        return "global"
    return "stateful" if getattr(cls, "stateful", False) else "row-wise"


def _drop_reasons(cls: Any) -> dict[str, str]:
    """Kind -> meaning: the members of the class's `DropReason` enum (transforms/core/drop_reasons.py), or the
    `drop_reasons` a class from outside the repo declares by hand."""
    reasons = getattr(cls, "reason_type", None)
    return reasons.meanings() if reasons is not None else dict(getattr(cls, "drop_reasons", None) or {})


def describe(name: str) -> StageDoc:
    """A registered stage's self-description (the class is imported)."""
    from transforms.flow.placement import declared_extras

    cls = stage_class(name)
    own = cls.__dict__.get("__doc__")  # not a base class's ("Base class of every row-wise stage")
    doc = inspect.cleandoc(own) if own else (inspect.getdoc(inspect.getmodule(cls)) or "")
    summary = " ".join(doc.split("\n\n")[0].split())
    fields = tuple(FieldDoc(n, _type(f.annotation), _default(f), " ".join(_description(cls, n, f).split()))
                   for n, f in getattr(cls, "model_fields", {}).items())
    from transforms.piqa.schema import ITEM_COLUMNS

    columns = tuple((c, ITEM_COLUMNS[c].meaning if c in ITEM_COLUMNS else "(not an item column: "
                     "transforms/piqa/schema.ITEM_COLUMNS lacks it)") for c in getattr(cls, "release_columns", ()))
    return StageDoc(name=name, ref=STAGES.get(name, name), summary=summary, kind=_kind(cls),
                    reads=tuple(getattr(cls, "reads", ())), writes=tuple(getattr(cls, "writes", ())),
                    extras=tuple(sorted(declared_extras(name))), fields=fields,
                    drop_reasons=tuple(sorted(_drop_reasons(cls).items())),
                    release_columns=columns, fuses=bool(getattr(cls, "fuse", False)))


def first_sentence(text: str, limit: int = 110) -> str:
    cut = re.split(r"(?<!e\.g)(?<!i\.e)(?<!etc)\.\s+(?=[A-Z`(*])", text)[0].rstrip(".")
    return cut if len(cut) <= limit else cut[:limit].rsplit(" ", 1)[0] + " …"


def stages_lines() -> list[str]:
    """`piqaforge stages`: one line each."""
    out = []
    for name in STAGES:
        d = describe(name)
        out.append(f"{name:<22} {d.kind:<9} {first_sentence(d.summary) or d.ref}")
    out.append("")
    if DEPRECATED:
        out.append("Old names still accepted for one release: " +
                   ", ".join(f"{old} -> {new}" for old, new in DEPRECATED.items()))
    out.append("`piqaforge stages NAME` prints a stage's fields; a recipe entry also takes "
               f"{', '.join(ENTRY_KEYS)} (docs/recipes.md).")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def stage_markdown(name: str, level: str = "##") -> str:
    d = describe(name)
    lines = [f"{level} `{name}`", "", d.summary or "(no description)", "",
             f"- kind: {d.kind_text}; class `{d.ref}`",
             f"- reads: {', '.join(f'`{c}`' for c in d.reads) or '—'}; writes: "
             f"{', '.join(f'`{c}`' for c in d.writes) or '—'}",
             f"- extras: {', '.join(d.extras) or 'none (core install)'}",
             "- drops rows for: " + ("; ".join(f"`{k}` ({m})" for k, m in d.drop_reasons) or "— (keeps every row)"),
             "- adds to a release: " + (", ".join(f"`{c}` ({m})" for c, m in d.release_columns) or "—"), "",
             "| field | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{f.name}` | {_cell(f.type)} | {_cell(f.default)} | {_cell(f.description) or '—'} |"
              for f in d.fields]
    return "\n".join(lines) + "\n"


def stage_text(name: str) -> str:
    """`piqaforge stages NAME`: the stage and its fields as a plain table."""
    d = describe(name)
    width = max([len(f.name) for f in d.fields] + [5])
    lines = [f"{name}  ({d.kind_text}; {d.ref})", "", d.summary, "",
             f"reads:  {', '.join(d.reads) or '-'}", f"writes: {', '.join(d.writes) or '-'}",
             f"extras: {', '.join(d.extras) or 'none'}"]
    lines += ["drops rows for:"] + [f"  {k}: {m}" for k, m in d.drop_reasons] if d.drop_reasons else \
        ["drops rows for: - (keeps every row)"]
    if d.release_columns:
        lines += ["adds to a release:"] + [f"  {c}: {m}" for c, m in d.release_columns]
    lines += ["", f"{'field':<{width}}  default / description"]
    for f in d.fields:
        lines.append(f"{f.name:<{width}}  {f.type} = {f.default}")
        if f.description:
            lines.append(f"{'':<{width}}    {f.description}")
    lines.append(f"\nA recipe entry: {{stage: {name}, when: PARAM, <field>: <value>, ...}}")
    return "\n".join(lines)


# Configs that stages take as one field (`judge:` of supervised_prefilter and of the ensemble's linear members),
# documented once after the stages: (anchor title, 'module:Class').
NESTED_CONFIGS = (
    ("The judge's fields (`judge:`)", "transforms.judge.linear:LinearJudge"),
    ("A labels file with its source (`judge.labels`, `judge.extra_labels`)", "transforms.judge.labels:LabelFile"),
    ("Held-out split by fraction (`judge.held_out: {fraction: 0.2, seed: 0}`)", "transforms.judge.labels:FractionSplit"),
    ("Held-out split by a column (`judge.held_out: {column: split, values: [test]}`)",
     "transforms.judge.labels:ColumnSplit"),
    ("Held-out split by a pattern (`judge.held_out: {column: url, pattern: ...}`)",
     "transforms.judge.labels:PatternSplit"),
    ("Held-out split by the parity of a URL's number (`judge.held_out: {url_id: ..., held_out: odd}`)",
     "transforms.judge.labels:ParitySplit"),
)


def config_markdown(title: str, ref: str, level: str = "###") -> str:
    """A nested config model's fields as the stage tables show them."""
    from transforms.flow.registry import resolve_ref

    cls = resolve_ref(ref, "config")
    doc = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
    lines = [f"{level} {title}", "", f"{doc} (`{ref}`)", "", "| field | type | default | description |",
             "|---|---|---|---|"]
    lines += [f"| `{n}` | {_cell(_type(f.annotation))} | {_cell(_default(f))} | "
              f"{_cell(' '.join(_description(cls, n, f).split())) or '—'} |" for n, f in cls.model_fields.items()]
    return "\n".join(lines) + "\n"


def reference_markdown() -> str:
    head = ("# Stage reference\n\n"
            "Generated from the stage classes by `piqaforge stages --markdown` (tests/flow/test_stage_catalogue.py "
            "keeps it current): every stage a recipe can name, what it reads and writes, the extras it needs, "
            "why it drops rows (a drop reason is `kind` or `kind:detail`), the item columns it adds to a release "
            "and every field with its type, default and description. A recipe entry is `{stage: NAME, when: "
            "PARAM, FIELD: VALUE, ...}` (docs/recipes.md).\n\n")
    if DEPRECATED:
        head += ("Old names accepted for one more release (a deprecation line is printed): " +
                 ", ".join(f"`{old}` → `{new}`" for old, new in DEPRECATED.items()) + ".\n\n")
    nested = "\n## Configs inside a stage's fields\n\n" + "\n".join(config_markdown(t, r) for t, r in NESTED_CONFIGS)
    return head + "\n".join(stage_markdown(name) for name in STAGES) + nested
