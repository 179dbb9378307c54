"""`LLMTransform`, the row-wise LLM stage: the same rows, plus the output columns of one reply per row
(refinement, classification...). Its sibling `LLMGenerate` (transforms/llm/generate.py) fans out."""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
from pydantic import model_validator

from transforms.core import columns as C
from transforms.core.stage import put_column
from transforms.llm.base import LLMEngine
from transforms.llm.call import LLMCall, LLMDrops, provenance_fields
from transforms.llm.output import JsonOutput
from transforms.llm.stage import LLMStage


class LLMTransform(LLMStage[LLMDrops], LLMCall):
    """Row-wise: the same rows, plus the output columns; a row whose reply is invalid is dropped
    (`invalid_output`) with the raw reply in `raw_column`. One reply per row (n = 1)."""

    name: ClassVar[str] = "llm_transform"
    reads: ClassVar[tuple[str, ...]] = (C.ID,)

    @model_validator(mode="after")
    def _one_reply(self) -> LLMTransform:
        if self.params.n != 1:
            raise ValueError("LLMTransform makes one reply per row (params.n = 1); use LLMGenerate for samples")
        if isinstance(self.output, JsonOutput) and self.output.items:
            raise ValueError("LLMTransform writes one object per row; a list of items needs LLMGenerate")
        return self

    def setup(self) -> None:
        # The prompt fails fast; the engine loads at the first question the cache cannot answer, so a
        # resumed run whose answers are all cached never loads the model.
        self.load_call_prompt(self)

    def use_engine(self, engine: LLMEngine) -> LLMTransform:
        self.attach_engine("main", engine)
        return self

    def process_empty(self, batch: pa.Table) -> pa.Table:
        for f in [*self.output_fields(), *provenance_fields()]:
            batch = put_column(batch, f.name, pa.array([], f.type))
        return batch

    def process(self, batch: pa.Table) -> pa.Table:
        ids = [str(x) for x in batch.column(C.ID).to_pylist()]
        replies = [row[0] for row in self.replies(self, "main", self.row_variables(self, batch), ids)]
        prompt = self.load_call_prompt(self)
        out = batch
        if isinstance(self.output, JsonOutput):
            for name, values in self.output.columns([r.value[0] if r.ok else None for r in replies]).items():
                out = put_column(out, name, values)
        else:
            out = put_column(out, self.output.column, pa.array([r.value for r in replies], pa.string()))
        out = put_column(out, self.raw_column, pa.array([None if r.ok else r.text for r in replies], pa.string()))
        for name, value in self.provenance(prompt).items():
            out = put_column(out, name, pa.array([value] * batch.num_rows, pa.string()))
        return self.drop(out, [r.drop_reason for r in replies])
