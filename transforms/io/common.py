"""What every crawl reader shares: the column mapping, the output schema, and the mapping of a
batch of raw input columns to the common schema (vectorised, so readers stay columnar).

A record that cannot be used is never an exception and never skipped: it becomes a row with a
`drop_reason` (and a `drop_detail` saying what was wrong), so the read stage's rows add up to the
records seen.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason, reason_array, reason_text

DROP_DETAIL = "drop_detail"
OPTIONAL = ("url", "title", "body")

# The read stage's output: the common schema plus why a record was rejected while reading.
class CrawlDrops(DropReason):
    """Why a crawled record becomes no row to work on: the read stage's reasons (the readers give them)."""

    NULL_TEXT = "null_text", "the record's text is null"
    INVALID_TEXT_TYPE = "invalid_text_type", "the record's text is not a string"
    OVERSIZED_RECORD = "oversized_record", "the record is larger than `max_record_bytes`"
    MISSING_TEXT = "missing_text", "the record has no text field"
    MALFORMED_JSON = "malformed_json", "a line that is not JSON"
    MALFORMED_CSV_ROW = "malformed_csv_row", "a CSV row that cannot be read"
    BLANK_LINE = "blank_line", "an empty line"
    INVALID_UTF8 = "invalid_utf8", "bytes that are not UTF-8"


CRAWL_WITH_REASON = C.CRAWL_SCHEMA.append(pa.field(C.DROP_REASON, pa.string())).append(
    pa.field(DROP_DETAIL, pa.string()))


class ColumnMappingError(ValueError):
    """The column mapping names input columns that do not exist."""


class InputFormatError(ValueError):
    """A file is not in the format it claims (by extension or input.format)."""


class RefusedInputError(ValueError):
    """A human-authored file is refused whole (a line cut in the middle ...): nothing is read from it, and the
    command exits 2 like any other refused input."""

    exit_code = 2


class EmptyInputError(ValueError):
    """There is nothing to read."""


class ColumnMapping(BaseModel):
    """Which input field fills each common-schema column."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, description="Input id field; unset derives '<file>@<offset>' or '<file>#<row>'.")
    text: str = Field("text", description="Field holding the question text.")
    source: str | None = Field(None, description="Field naming the source; unset uses the file name.")
    url: str | None = Field(None, description="Field holding the page URL.")
    title: str | None = Field(None, description="Field holding the page or question title.")
    body: str | None = Field(None, description="Field holding the question body, when apart from the title.")

    def fields(self) -> dict[str, str]:
        """Common column → input column, for the columns that are mapped."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def check_against(self, available: list[str], where: str) -> None:
        missing = {k: v for k, v in self.fields().items() if v not in available}
        if missing:
            raise mapping_error(f"{where} has no column(s)", missing, f"columns available: {available}")


def mapping_error(what: str, missing: dict[str, str], seen: str) -> ColumnMappingError:
    """One wording for every reader: what is missing, the mapping that asked for it, what is there."""
    wanted = ", ".join(f"{k}={v!r}" for k, v in missing.items())
    return ColumnMappingError(f"{what} {sorted(set(missing.values()))} (column mapping {wanted}); {seen}. "
                              f"Fix input.columns in the job config (e.g. --set input.columns.text=<name>).")


def _as_string(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_string(values.type):
        return values
    if pa.types.is_large_string(values.type) or pa.types.is_string_view(values.type):
        return values.cast(pa.string())
    if pa.types.is_nested(values.type):
        # Lists or structs in a text column are not text; callers reject them by type.
        return pa.nulls(len(values), pa.string())
    return values.cast(pa.string())


def to_common(raw: pa.Table, mapping: ColumnMapping, fallback_ids: pa.Array, source_name: str,
              max_bytes: int, reasons: pa.Array | None = None, details: pa.Array | None = None) -> pa.Table:
    """Map `raw` (input column names) to CRAWL_WITH_REASON, marking unusable records.

    `reasons`/`details` carry rejections the reader already decided (bad UTF-8, bad rows); the
    first reason on a row wins.
    """
    n = raw.num_rows
    null = pa.nulls(n, pa.string())

    def column(common: str) -> Any:
        field = getattr(mapping, common)
        return null if field is None else _as_string(raw.column(field))

    text_type = raw.column(mapping.text).type
    text = column(C.TEXT)
    ids = pc.coalesce(column(C.ID), fallback_ids) if mapping.id else fallback_ids
    source = pc.coalesce(column(C.SOURCE), pa.scalar(source_name))
    null_reason = pa.scalar(reason_text(CrawlDrops.INVALID_TEXT_TYPE if pa.types.is_nested(text_type)
                                        else CrawlDrops.NULL_TEXT))
    no_text = pc.if_else(pc.is_null(text), null_reason, pa.scalar(None, pa.string()))
    too_big = pc.greater(pc.fill_null(pc.binary_length(text), 0), max_bytes)
    oversized = pc.if_else(too_big, pa.scalar(reason_text(CrawlDrops.OVERSIZED_RECORD)), pa.scalar(None, pa.string()))
    size_detail = pc.if_else(too_big, pc.binary_join_element_wise(
        pc.cast(pc.binary_length(text), pa.string()), pa.scalar(f" bytes > max_record_bytes={max_bytes}"), ""),
        pa.scalar(None, pa.string()))
    reason = pc.coalesce(reasons if reasons is not None else null, no_text, oversized)
    detail = pc.coalesce(details if details is not None else null, size_detail)
    arrays = [ids, text, source, column("url"), column("title"), column("body"), reason, detail]
    return pa.Table.from_arrays([pa.chunked_array([a]) if isinstance(a, pa.Array) else a for a in arrays],
                                schema=CRAWL_WITH_REASON)


def bad_records(ids: list[str], source_name: str, reasons: list[CrawlDrops], details: list[str]) -> pa.Table:
    """Rows for records that could not be parsed at all."""
    n = len(ids)
    null = pa.nulls(n, pa.string())
    return pa.Table.from_arrays(
        [pa.array(ids, pa.string()), null, pa.array([source_name] * n, pa.string()), null, null, null,
         reason_array(reasons), pa.array(details, pa.string())], schema=CRAWL_WITH_REASON)


def decode_utf8(raw: pa.Table) -> tuple[pa.Table, pa.Array, pa.Array]:
    """Binary or string columns → valid UTF-8 strings; a row with invalid UTF-8 in any column is
    marked `invalid_utf8` (its bad values become null) instead of failing the batch.

    CSV columns are read as bytes for this; Parquet strings are *not* validated by Arrow on read,
    so a file written by a careless tool can carry bytes that would crash a later stage."""
    n = raw.num_rows
    bad = [False] * n
    arrays = []
    for name in raw.column_names:
        col = raw.column(name)
        if pa.types.is_large_string(col.type) or pa.types.is_string_view(col.type):
            col = col.cast(pa.string())
        if not (pa.types.is_binary(col.type) or pa.types.is_string(col.type)):
            arrays.append(col)
            continue
        try:
            strings = col.cast(pa.string()) if pa.types.is_binary(col.type) else col
            strings.validate(full=True)
            arrays.append(strings)
            continue
        except pa.ArrowInvalid:
            pass
        # Slow path, only for a batch that has bad bytes: find the rows, null their values.
        values: list[str | None] = []
        as_bytes = col if pa.types.is_binary(col.type) else pa.chunked_array(
            [c.view(pa.binary()) for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col])])
        for i, value in enumerate(as_bytes.to_pylist()):
            try:
                values.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                values.append(None)
                bad[i] = True
        arrays.append(pa.chunked_array([pa.array(values, pa.string())]))
    reasons = reason_array([CrawlDrops.INVALID_UTF8 if b else None for b in bad])
    details = pa.array(["invalid UTF-8 in a mapped column" if b else None for b in bad], pa.string())
    return pa.Table.from_arrays(arrays, names=raw.column_names), reasons, details
