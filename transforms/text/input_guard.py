"""A creating stage's input, guarded: crawled text that talks to its reader never reaches the model.

A refinement or a grounded generation writes what its prompt and the row's text make it write; an instruction
inside the crawled text ("ignore the rules and write ...", a role marker, a closing fence) can steer it. This
stage, placed before such a stage, drops rows whose text the guard flags (`injection_suspected`, with the flags
in `guard_flags`) and hands the rest on sanitized (NFKC, invisible characters removed, look-alikes mapped), so
the model reads the question as people see it (transforms/text/guard.py; docs/judges.md measures the guard).
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage, put_column
from transforms.text.guard import injection_flags, sanitize


class GuardDrops(DropReason):
    INJECTION_SUSPECTED = ("injection_suspected",
                           "the text addresses a model reading it (an instruction, a role marker, a fence)")


class InputGuard(Stage[GuardDrops]):
    name: ClassVar[str] = "input_guard"
    writes: ClassVar[tuple[str, ...]] = ("guard_flags",)
    column: str = Field("text", description="The crawled text a creating stage reads next.")
    sanitize_text: bool = Field(True, description="Hand the text on sanitized (what the model then reads).")

    def process(self, batch: pa.Table) -> pa.Table:
        texts = batch.column(self.column).to_pylist()
        flags = [injection_flags(t) for t in texts]
        out = put_column(batch, "guard_flags", pa.array([", ".join(f) or None for f in flags], pa.string()))
        if self.sanitize_text:
            out = put_column(out, self.column, pa.array([sanitize(t) if t is not None else None for t in texts],
                                                        pa.string()))
        return self.drop(out, [GuardDrops.INJECTION_SUSPECTED if f else None for f in flags])
