"""Draw the annotation sample: N general + M cultural rows with a fixed seed (the paper: 600 + 158).

Every row gets a random key from (seed, id), so the draw does not depend on row order or on how
Ray split the blocks. Rows not drawn stay in the lake under rejected/ with reason `not_sampled`;
a group smaller than asked for is taken whole and the shortfall is logged and written to the
report (`sampling.json` under `output_dir`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from transforms.core import columns as C
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import GlobalStage
from transforms.llm.distil_fit import sample_keys

log = logging.getLogger("piqaforge.sampling")



class SampleDrops(DropReason):
    NOT_SAMPLED = "not_sampled", "not drawn into the general or cultural sample"


class SampleGeneralAndCultural(GlobalStage[SampleDrops]):
    name: ClassVar[str] = "sample"
    reads: ClassVar[tuple[str, ...]] = (C.ID, "is_cultural")
    writes: ClassVar[tuple[str, ...]] = ("sample_group",)

    n_general: int = Field(600, ge=0, description="Rows drawn from the non-cultural questions.")
    n_cultural: int = Field(158, ge=0, description="Rows drawn from the culturally tagged questions.")
    seed: int = Field(0, description="Draw seed.")
    output_dir: str | None = Field(None, description="Where sampling.json goes (runs/<run_id>/).")

    _report: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def report(self) -> dict[str, Any]:
        return self._report

    def process_table(self, table: pa.Table) -> pa.Table:
        ids = [str(i) for i in table.column(C.ID).to_pylist()]
        keys = sample_keys(ids, self.seed)
        cultural = np.asarray(pc.fill_null(table.column("is_cultural"), False).to_pylist(), dtype=bool)
        group: list[str | None] = [None] * len(ids)
        report: dict[str, Any] = {"seed": self.seed, "rows": len(ids)}
        for name, mask, wanted in (("general", ~cultural, self.n_general), ("cultural", cultural, self.n_cultural)):
            pool = np.flatnonzero(mask)
            chosen = pool[np.argsort(keys[pool], kind="stable")[:wanted]]
            for i in chosen:
                group[i] = name
            report[name] = {"available": len(pool), "wanted": wanted, "drawn": len(chosen),
                            "shortfall": max(0, wanted - len(pool))}
            if len(pool) < wanted:
                log.warning("sample: only %d %s rows for %d wanted; all taken", len(pool), name, wanted)
        self._report = report
        if self.output_dir:
            Path(self.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(self.output_dir) / "sampling.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
        values = pa.array(group, pa.string())
        out = table.set_column(table.schema.get_field_index("sample_group"), "sample_group", values) \
            if "sample_group" in table.schema.names else table.append_column("sample_group", values)
        return self.drop_where(out, pc.is_null(values), SampleDrops.NOT_SAMPLED)
