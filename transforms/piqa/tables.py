"""J-PIQA's tables: an LLM reply holding a CSV table in, the paper's release columns out.

`parse_table_reply` reads what a model really sends back when asked for CSV: the table inside a
code fence or not, prose before and after it, a Markdown pipe table instead of CSV, quoted fields
with commas or line breaks inside, a header in Japanese, full-width commas as the delimiter, and a
last row cut off where the reply hit its token limit. Every data row comes out as one row; a row
that cannot be used carries a `drop_reason` (the model's own id and line number say which row).

`ParseTableReply` is the expand stage around it (one reply row → its items); `release_columns`
maps our item schema to the columns of the paper's appendix.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core.creating import ExpandStage
from transforms.core.drop_reasons import DropReason, reason_text
from transforms.core.stage import Stage, StageError, put_column


class TableDrops(DropReason):
    """Why a row of a reply's table (or the reply) makes no item."""

    NO_TABLE = "no_table", "the reply holds no table (no header naming question/option1/option2/correct)"
    EMPTY_FIELD = "empty_field", "a required cell is empty (empty_field:<column>)"
    PARTIAL_ROW = "partial_row", "fewer cells than the header (a row cut off)"
    TOO_MANY_FIELDS = "too_many_fields", "more cells than the header (an unquoted delimiter)"
    CSV_ERROR = "csv_error", "the reply's table is not readable CSV"

FIELDS = ("id", "category", "question", "option1", "option2", "correct", "reasoning",
          "question_en", "option1_en", "option2_en")
REQUIRED = ("question", "option1", "option2", "correct")
# Header spellings a model uses (matched after NFKC, lower-casing and removing spaces, _ and -).
ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "no", "番号", "#", "itemid"),
    "category": ("category", "カテゴリ", "カテゴリー", "分類", "domain"),
    "question": ("question", "質問", "問題", "goal", "prompt", "目的", "問い"),
    "option1": ("option1", "選択肢1", "sol1", "solution1", "解答1", "回答1", "choice1"),
    "option2": ("option2", "選択肢2", "sol2", "solution2", "解答2", "回答2", "choice2"),
    "correct": ("correct", "正解", "answer", "label", "正答"),
    "reasoning": ("reasoning", "理由", "説明", "explanation", "根拠", "rationale"),
    "question_en": ("questionen", "englishquestion", "question(english)", "質問英語", "質問(英語)", "goalgloss"),
    "option1_en": ("option1en", "englishoption1", "option1(english)", "選択肢1英語", "選択肢1(英語)", "sol1gloss"),
    "option2_en": ("option2en", "englishoption2", "option2(english)", "選択肢2英語", "選択肢2(英語)", "sol2gloss"),
}
_LOOKUP = {alias: field for field, names in ALIASES.items() for alias in names}
_FENCE = re.compile(r"^\s*(```|~~~)")
_ID = re.compile(r"\s*[A-Za-z#\-_]*\d+\s*")
_MD_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
ROW_SCHEMA = pa.schema([("reply_line", pa.int64())] + [(f, pa.string()) for f in FIELDS]
                       + [("drop_reason", pa.string())])


def _key(cell: str) -> str:
    text = unicodedata.normalize("NFKC", cell).strip().strip("*`\"'").lower()
    return re.sub(r"[\s_\-]", "", text)


def header_map(cells: list[str]) -> dict[int, str] | None:
    """Column position → field when `cells` is a header naming at least the required fields."""
    found = {i: _LOOKUP[_key(c)] for i, c in enumerate(cells) if _key(c) in _LOOKUP}
    return found if set(REQUIRED) <= set(found.values()) else None


def _unfence(text: str) -> list[list[tuple[int, str]]]:
    """The reply as blocks of (1-based line number, line): the inside of each code fence, then the
    whole reply without fence lines (for a table written without a fence). An unclosed fence (a
    reply cut off inside it) runs to the end."""
    numbered = list(enumerate(text.splitlines(), 1))
    blocks: list[list[tuple[int, str]]] = []
    inside: list[tuple[int, str]] | None = None
    for n, line in numbered:
        if _FENCE.match(line):
            if inside is None:
                inside = []
            else:
                blocks.append(inside)
                inside = None
        elif inside is not None:
            inside.append((n, line))
    if inside:
        blocks.append(inside)
    return blocks + [[(n, line) for n, line in numbered if not _FENCE.match(line)]]


def _markdown_cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.replace("\\|", "|").replace("<br>", "\n").strip() for c in re.split(r"(?<!\\)\|", body)]


def _delimiter(header_line: str) -> str:
    # "、" is never a delimiter: it is the comma inside Japanese sentences
    counts = {d: header_line.count(d) for d in (",", "，", "\t", ";")}
    return max(counts, key=lambda d: counts[d])


def _records(lines: list[tuple[int, str]], delimiter: str) -> list[tuple[int, list[str]]]:
    """CSV records with the reply line each starts on (quoted fields may span lines)."""
    text = "\n".join(line for _, line in lines)
    starts = [n for n, _ in lines]
    reader = csv.reader(io.StringIO(text), delimiter=delimiter, skipinitialspace=True)
    out = []
    try:
        for record in reader:
            line_idx = reader.line_num - 1 - sum(c.count("\n") for c in record)
            out.append((starts[min(max(line_idx, 0), len(starts) - 1)], record))
    except csv.Error as err:  # an unclosed quote at the very end of a cut-off reply, or a NUL byte
        out.append((starts[-1], [f"\x00csv_error:{err}"]))
    return out


def _clean(value: str) -> str:
    """Strip spaces and one pair of stray outer quotes ("..." or “...”; 「...」 is content)."""
    value = value.strip()
    if len(value) >= 2 and (value[0], value[-1]) in (('"', '"'), ("“", "”")):
        value = value[1:-1].strip()
    return value


def parse_table_reply(reply: str | None) -> pa.Table:
    """Rows of the table in `reply` (schema `ROW_SCHEMA`); bad rows carry a `drop_reason`.

    Reasons: `no_table` (no header naming question/option1/option2/correct: one row for the reply),
    `partial_row` (fewer cells than the header: a row cut off), `too_many_fields` (an unquoted
    delimiter inside a field), `empty_field:<name>` (a required cell is empty), `csv_error`.
    Blank lines, Markdown rules, repeated headers and prose lines (no delimiter; with an id column, a
    line whose first cell is not an id) are not rows; in a table without a code fence, a blank line
    after the first row ends the table. Without an id column, a prose line with a comma right under
    the table cannot be told from a cut-off row and comes out as `partial_row`.
    """
    rows: list[dict[str, Any]] = []
    found = _find_header(_unfence(reply or ""))
    if found is None:
        return pa.Table.from_pylist([{"reply_line": None, "drop_reason": reason_text(TableDrops.NO_TABLE)}],
                                    ROW_SCHEMA)
    lines, start, markdown, delimiter, mapping, width, fenced = found
    id_first = mapping.get(0) == "id"
    body = lines[start + 1:]
    if markdown:
        records = [(n, _markdown_cells(line)) for n, line in body if line.strip().startswith("|")]
    else:
        records = _records(body, delimiter)
    for line_no, cells in records:
        if not cells and rows and not (markdown or fenced):
            break  # a blank line ends a table written without a fence: what follows is prose
        if not cells or all(not c.strip() for c in cells) or (markdown and _MD_RULE.match("|".join(cells))):
            continue
        if header_map(cells):
            continue  # the model repeated its header
        if cells[0].startswith("\x00csv_error:"):
            rows.append({"reply_line": line_no, "drop_reason": reason_text(TableDrops.CSV_ERROR)})
            continue
        if len(cells) < width and not markdown and (len(cells) == 1 or id_first) and not _ID.fullmatch(cells[0]):
            continue  # prose after (or inside) the table: a cut-off row still starts with its id
        row: dict[str, Any] = {"reply_line": line_no}
        for pos, name in mapping.items():
            if pos < len(cells):
                row[name] = _clean(cells[pos]) or None
        if len(cells) < width:
            row["drop_reason"] = reason_text(TableDrops.PARTIAL_ROW)
        elif len(cells) > width and any(c.strip() for c in cells[width:]):
            row["drop_reason"] = reason_text(TableDrops.TOO_MANY_FIELDS)
        else:
            empty = [f for f in REQUIRED if not row.get(f)]
            row["drop_reason"] = reason_text((TableDrops.EMPTY_FIELD, empty[0])) if empty else None
        rows.append(row)
    return pa.Table.from_pylist(rows, ROW_SCHEMA)


def _find_header(blocks: list[list[tuple[int, str]]]) -> tuple[Any, ...] | None:
    """(lines, header index, markdown?, delimiter, column map, width, fenced?) of the first block with a
    header; the last block is the whole reply (a table written without a fence)."""
    for k, lines in enumerate(blocks):
        for i, (_, line) in enumerate(lines):
            markdown = line.strip().startswith("|")
            delimiter = _delimiter(line)
            cells = _markdown_cells(line) if markdown else next(csv.reader([line], delimiter=delimiter), [])
            mapping = header_map(cells)
            if mapping:
                return lines, i, markdown, delimiter, mapping, len(cells), k < len(blocks) - 1
    return None


def correct_to_label(correct: Any) -> int | None:
    """1 → 0, 2 → 1 (the item schema's label); anything else → None."""
    text = unicodedata.normalize("NFKC", str(correct)).strip() if correct is not None else ""
    return {"1": 0, "2": 1}.get(text)


def rows_to_items(rows: pa.Table, *, lang: str = "ja") -> pa.Table:
    """Parsed rows → item columns: goal/sol1/sol2/label, glosses from the English columns, and the
    model's own `gen_item_id`, `category`, `correct` (kept raw for the constraint filter), `reasoning`."""
    col = {f: rows.column(f) for f in FIELDS}
    labels = pa.array([correct_to_label(v) for v in col["correct"].to_pylist()], pa.int64())
    return pa.table({
        "lang": pa.array([lang] * rows.num_rows, pa.string()),
        "goal": col["question"], "sol1": col["option1"], "sol2": col["option2"], "label": labels,
        "correct": col["correct"], "category": col["category"], "reasoning": col["reasoning"],
        "goal_gloss": col["question_en"], "sol1_gloss": col["option1_en"], "sol2_gloss": col["option2_en"],
        "gen_item_id": col["id"], "reply_line": rows.column("reply_line"),
        "drop_reason": rows.column("drop_reason"),
    })


class ParseTableReply(ExpandStage[TableDrops]):
    """One LLM reply (a CSV table) → one child per table row; bad rows are children with a reason,
    and a reply with no table at all drops its parent with `no_table`."""

    name: ClassVar[str] = "parse_table"
    release_columns: ClassVar[tuple[str, ...]] = ("goal_gloss", "sol1_gloss", "sol2_gloss")
    writes: ClassVar[tuple[str, ...]] = ("goal", "sol1", "sol2", "label", "correct", "category")
    empty_reason: ClassVar[str] = TableDrops.NO_TABLE

    reply_column: str = Field("llm_text", description="Column holding the model's raw reply text (LLMGenerate's "
                              "text output writes `llm_text`).")
    lang: str = Field("ja", description="Language of the generated items.")

    def check_columns(self, schema: pa.Schema) -> None:
        super().check_columns(schema)
        if self.reply_column not in schema.names:
            raise StageError(f"stage '{self.name}' needs the reply column {self.reply_column!r}; the batch has "
                             f"{schema.names}")

    def expand(self, batch: pa.Table) -> pa.Table:
        parts = []
        for i, reply in enumerate(batch.column(self.reply_column).to_pylist()):
            rows = parse_table_reply(reply)
            if rows.num_rows == 1 and rows.column("drop_reason")[0].as_py() == TableDrops.NO_TABLE:
                continue  # no children: the parent is dropped with `no_table`
            items = rows_to_items(rows, lang=self.lang)
            parts.append(items.append_column("_parent", pa.array([i] * items.num_rows, pa.int64())))
        return pa.concat_tables(parts) if parts else pa.table({"_parent": pa.array([], pa.int64())})


# -- the paper's release columns ------------------------------------------------------------------------
RELEASE_COLUMNS = ("prompt", "solution0", "solution1", "label", "prompt_gloss", "solution0_gloss", "solution1_gloss",
                   "source", "orig_line_no", "is_translation")
TRANSLATION, LEXICAL_VARIATION, ORIGINAL = "piqa_translation", "piqa_lexical_variation", "piqa_original"
# How our rows name their part (the `source` column, or `part_column`) → the paper's `source` value.
PART_ALIASES = {TRANSLATION: TRANSLATION, "translation": TRANSLATION, LEXICAL_VARIATION: LEXICAL_VARIATION,
                "lexical_variation": LEXICAL_VARIATION, "lexical_variant": LEXICAL_VARIATION, ORIGINAL: ORIGINAL,
                "original": ORIGINAL, "direct_generation": ORIGINAL, "generated": ORIGINAL}


def release_columns(items: pa.Table, *, part_column: str = "source") -> pa.Table:
    """Our item schema → the J-PIQA appendix's columns, in its order.

    `source` is piqa_translation (translated from PIQA), piqa_lexical_variation (a translated item
    with Japanese lexical variants) or piqa_original (written in Japanese). `orig_line_no` is the
    PIQA line the item descends from (translations and their lexical variants), −1 for originals;
    `is_translation` is true for piqa_translation only. Raises ValueError naming the rows whose
    part is unknown or whose PIQA line is missing.
    """
    missing = [c for c in ("goal", "sol1", "sol2", "label", part_column) if c not in items.column_names]
    if missing:
        raise ValueError(f"release_columns needs column(s) {missing}; the table has {items.column_names}")
    n = items.num_rows
    ids = items.column("id").to_pylist() if "id" in items.column_names else list(range(n))
    parts = []
    for rid, raw in zip(ids, items.column(part_column).to_pylist(), strict=True):
        part = PART_ALIASES.get(str(raw).strip().lower()) if raw is not None else None
        if part is None:
            raise ValueError(f"row {rid!r}: {part_column}={raw!r} is not one of {sorted(set(PART_ALIASES))}")
        parts.append(part)
    lines = items.column("orig_line_no").to_pylist() if "orig_line_no" in items.column_names else [None] * n
    orig = []
    for rid, part, line in zip(ids, parts, lines, strict=True):
        if part != ORIGINAL and line is None:
            raise ValueError(f"row {rid!r} is a {part} but has no orig_line_no (the PIQA line it came from)")
        orig.append(-1 if part == ORIGINAL else int(line))

    def gloss(name: str) -> pa.ChunkedArray | pa.Array:
        return items.column(name) if name in items.column_names else pa.nulls(n, pa.string())

    return pa.table({
        "prompt": items.column("goal"), "solution0": items.column("sol1"), "solution1": items.column("sol2"),
        "label": items.column("label").cast(pa.int64()), "prompt_gloss": gloss("goal_gloss"),
        "solution0_gloss": gloss("sol1_gloss"), "solution1_gloss": gloss("sol2_gloss"),
        "source": pa.array(parts, pa.string()), "orig_line_no": pa.array(orig, pa.int64()),
        "is_translation": pa.array([p == TRANSLATION for p in parts], pa.bool_()),
    })



class CorrectFromLabel(Stage):
    """Writes the CSV convention's `correct` (1 or 2) from the item schema's `label` (0 or 1), for
    prompts that name the correct solution by number (the J-PIQA preference judge)."""

    name: ClassVar[str] = "correct_from_label"
    reads: ClassVar[tuple[str, ...]] = ("label",)
    writes: ClassVar[tuple[str, ...]] = ("correct",)

    def process(self, batch: pa.Table) -> pa.Table:
        values = [None if v not in (0, 1) else str(v + 1) for v in batch.column("label").to_pylist()]
        return put_column(batch, "correct", pa.array(values, pa.string()))
