"""Russian PIQA: the requests of one generation arm, and the figures its card shows.

An arm asks about a seeded draw of document chunks (grounded arms: chunks whose subject is one of
`subjects`; the no-source arm: topic seeds). `ChunkRequests` is that draw as a source: one request row
per drawn chunk, keyed by (chunk, arm) so two arms' items never share an id; `attach_chunks` then
brings the chunk's text and its document's metadata.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pyarrow as pa
import xxhash
from pydantic import Field

from transforms.core import columns as C
from transforms.core.creating import SourceStage
from transforms.io.documents import DocumentSource


class ChunkRequests(SourceStage):
    name: ClassVar[str] = "chunk_requests"
    documents: DocumentSource = Field(..., description="The documents (their `kinds` pick document or topic_seeds).")
    subjects: list[str] | None = Field(None, description="Draw only chunks of these subjects; null: any.")
    n: int = Field(1, ge=1, description="Chunks drawn.")
    seed: int = Field(0, description="Seed of the draw.")
    constants: dict[str, Any] = Field(default_factory=dict, description="Columns with one value on every row "
                                      "(the arm's name, items per request).")

    def rows(self) -> pa.Table:
        rows = [r for r in self.documents.rows().to_pylist() if r["drop_reason"] is None
                and (self.subjects is None or r["subject"] in self.subjects)]
        if not rows:
            raise ValueError(f"no chunks with subjects {self.subjects} in {self.documents.paths}")
        rows.sort(key=lambda r: xxhash.xxh3_64_intdigest(f"{self.seed}\x1f{r['id']}".encode()))
        arm = str(self.constants)
        return pa.Table.from_pylist([{C.ID: xxhash.xxh3_64_hexdigest(f"{r['id']}\x1f{arm}".encode()),
                                      "chunk_id": r["id"], **self.constants} for r in rows[:self.n]])

    def fingerprints(self) -> list[dict[str, Any]]:
        return self.documents.fingerprints()


def checks_figures(manifest: Any, lake: Any) -> dict[str, Any]:
    """The checked items' length share, repeated openings per arm and contrast types (a run report)."""
    from pathlib import Path

    from transforms.core.lake import read_table
    from transforms.recipes.ru_piqa.contrast import length_share, repeated_openings

    table = read_table(Path(manifest.outputs["curated"]))
    if not table.num_rows:
        return {"items": 0}
    types = Counter(str(v) for v in table.column("contrast_type").to_pylist()) \
        if "contrast_type" in table.column_names else {}
    return {"length": length_share(table), "openings": repeated_openings(table, by="model"),
            "contrast_types": dict(types)}


def provenance_card(table: pa.Table, runs: dict[str, Any]) -> str:
    """The card's provenance tables: items per source, document, grade and model (arm)."""
    from transforms.piqa.provenance import provenance_markdown, provenance_tables

    return provenance_markdown(provenance_tables(table), title="Items by provenance")
