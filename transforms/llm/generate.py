"""`LLMGenerate`: an expand stage whose children are what an LLM wrote for each input row.

Each row is asked once with `params.n` samples; every valid reply becomes one child (text, choice or
one JSON object), or, with a `json` output of `items`, every valid item of a reply's list does.
Children are ordered by sample, then item, so their ids (parent id, stage, ordinal) are the same on
every run; each child carries `_sample` and the provenance columns, its seed in `_gen_params`.

A parent whose replies yield no valid item at all is dropped as `generation_failed`, the raw replies
in `raw_column` (one reply as is, several as a JSON list), so they land in rejected/. When a parent
has good items, its invalid replies and items become children dropped as `invalid_output`, each
with its raw text: every answer is accounted for.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import PrivateAttr

from transforms.core import columns as C
from transforms.core.creating import ExpandStage
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import put_column
from transforms.llm.base import LLMEngine
from transforms.llm.call import INVALID, LLMCall, Reply, provenance_fields
from transforms.llm.output import JsonOutput
from transforms.llm.stage import LLMStage

SAMPLE = "_sample"


class GenerateDrops(DropReason):
    GENERATION_FAILED = ("generation_failed",
                         "no reply to the row gave a valid item (the raw replies are kept in `raw_column`)")
    INVALID_OUTPUT = (INVALID.value,
                      "a child of a row with good items: one invalid reply or item, its raw text in `raw_column`")


class LLMGenerate(LLMStage[GenerateDrops], ExpandStage[GenerateDrops], LLMCall):
    name: ClassVar[str] = "llm_generate"
    reads: ClassVar[tuple[str, ...]] = (C.ID,)
    empty_reason: ClassVar[str] = GenerateDrops.GENERATION_FAILED

    _pending: list[list[Reply]] | None = PrivateAttr(None)

    def setup(self) -> None:
        # The prompt fails fast; the engine loads at the first question the cache cannot answer, so a
        # resumed run whose answers are all cached never loads the model.
        self.load_call_prompt(self)

    def use_engine(self, engine: LLMEngine) -> LLMGenerate:
        self.attach_engine("main", engine)
        return self

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        self.check_columns(batch.schema)
        self.ensure_setup()
        if batch.num_rows == 0:
            return super().__call__(batch)
        ids = [str(x) for x in batch.column(C.ID).to_pylist()]
        replies = self.replies(self, "main", self.row_variables(self, batch), ids)
        # The raw replies ride on the parents: a parent dropped as generation_failed keeps them.
        raw = [None if any(self._items(r)[0] for r in row) else _raw(row) for row in replies]
        self._pending = replies
        try:
            return super().__call__(put_column(batch, self.raw_column, pa.array(raw, pa.string())))
        finally:
            self._pending = None

    def expand(self, batch: pa.Table) -> pa.Table:
        assert self._pending is not None, "LLMGenerate.expand runs inside __call__"
        prompt = self.load_call_prompt(self)
        parent: list[int] = []
        sample: list[int] = []
        values: list[Any] = []
        raw: list[str | None] = []
        reasons: list[GenerateDrops | None] = []
        for i, row in enumerate(self._pending):
            per_reply = [self._items(r) for r in row]
            if not any(good for good, _ in per_reply):
                continue  # no child: the parent is dropped as generation_failed
            for reply, (good, bad) in zip(row, per_reply, strict=True):
                for kind, item in [*(("ok", g) for g in good), *(("bad", b) for b in bad)]:
                    parent.append(i)
                    sample.append(reply.sample)
                    values.append(item if kind == "ok" else None)
                    raw.append(None if kind == "ok" else item)
                    reasons.append(None if kind == "ok" else GenerateDrops.INVALID_OUTPUT)
        cols: dict[str, pa.Array] = {"_parent": pa.array(parent, pa.int64()), SAMPLE: pa.array(sample, pa.int32())}
        if isinstance(self.output, JsonOutput):
            cols.update(self.output.columns(values))
        else:
            cols[self.output.column] = pa.array(values, pa.string())
        cols[self.raw_column] = pa.array(raw, pa.string())
        prov = [self.provenance(prompt, k) for k in sample]
        for f in provenance_fields():
            cols[f.name] = pa.array([p[f.name] for p in prov], pa.string())
        return self.drop(pa.table(cols), reasons)

    def _items(self, reply: Reply) -> tuple[list[Any], list[str]]:
        """(valid values, raw text of invalid ones) of one reply."""
        if not reply.ok:
            return [], [reply.text or ""]
        if isinstance(self.output, JsonOutput):
            good = [o for o in reply.value if "_invalid" not in o]
            return good, [o["_raw"] for o in reply.value if "_invalid" in o]
        return [reply.value], []


def _raw(row: list[Reply]) -> str:
    texts = [r.text or "" for r in row]
    return texts[0] if len(texts) == 1 else json.dumps(texts, ensure_ascii=False)

