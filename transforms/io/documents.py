"""Source documents for grounded generation: read, attach metadata, cut into chunks.

Input, any mix of:
* a folder (or files) of `.txt` / `.md`: one document per file; an optional front matter block
  (`---` / `key: value` lines / `---`) gives title, subject, grade (or level), licence, source;
* `.jsonl`: one document per line with `text` and the same metadata keys (`license` and `level`
  are accepted spellings), plus `id`, `url`, `kind`.
Metadata a document lacks comes from the config's defaults; a document with no licence at all is
dropped (`no_licence`) when `require_licence` is on, because every generated item must trace back
to text we may use.

Chunks follow the document's structure: a Markdown heading (`#`...) always starts a new chunk and is
recorded as the chunk's heading path ("Тепло › Теплопроводность"); paragraphs (blank-line
separated) are packed into chunks of at most `max_chars`; a longer paragraph is cut at sentence
ends, a longer sentence at a space. A chunk shorter than `min_chars` is merged into the one before
it in the same section when they fit together.

`DocumentSource` is a SourceStage: one row per chunk; unreadable records (bad JSON, no text) are
rows with a `drop_reason`, so the source's counts add up to what it saw. `AttachChunks` gives request
rows that name a chunk (`chunk × model` from a ProductSource) the chunk's text and metadata.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pydantic import Field

from transforms.core.creating import SourceStage
from transforms.core.drop_reasons import DropReason
from transforms.core.stage import Stage

SUFFIXES = (".txt", ".md", ".markdown", ".jsonl")
META_KEYS = {"title": "title", "subject": "subject", "grade": "grade", "level": "grade", "licence": "licence",
             "license": "licence", "source": "source", "url": "url", "kind": "kind", "id": "doc_id"}
CHUNK_SCHEMA = pa.schema([(n, pa.string()) for n in ("id", "doc_id")] + [("chunk_no", pa.int32()),
                         ("n_chunks", pa.int32())] + [(n, pa.string()) for n in (
                             "title", "heading", "subject", "grade", "licence", "source", "url", "kind", "path",
                             "text", "drop_reason")])
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


def split_long(text: str, max_chars: int) -> list[str]:
    """Pieces of at most `max_chars`: cut at sentence ends, then at spaces, then anywhere."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    return pieces


def _pack(units: list[str], max_chars: int, sep: str) -> list[str]:
    chunks: list[str] = []
    for unit in units:
        if chunks and len(chunks[-1]) + len(sep) + len(unit) <= max_chars:
            chunks[-1] += sep + unit
        else:
            chunks.append(unit)
    return chunks


def sections(text: str) -> list[tuple[str, list[str]]]:
    """(heading path, paragraphs) in document order; text before the first heading has path ""."""
    path: list[tuple[int, str]] = []
    out: list[tuple[str, list[str]]] = [("", [])]
    para: list[str] = []

    def end_paragraph() -> None:
        if para:
            out[-1][1].append(" ".join(s.strip() for s in para))
            para.clear()

    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            end_paragraph()
            level = len(heading.group(1))
            path = [(lv, t) for lv, t in path if lv < level] + [(level, heading.group(2).strip())]
            out.append((" › ".join(t for _, t in path), []))
        elif not line.strip():
            end_paragraph()
        else:
            para.append(line)
    end_paragraph()
    return [(h, ps) for h, ps in out if ps]


def chunk_text(text: str, *, max_chars: int = 1500, min_chars: int = 200) -> list[tuple[str, str]]:
    """(heading path, chunk) pairs; see the module docstring for the rules."""
    if max_chars < 1 or min_chars > max_chars:
        raise ValueError(f"need 1 <= min_chars <= max_chars, got min_chars={min_chars}, max_chars={max_chars}")
    chunks: list[tuple[str, str]] = []
    for heading, paragraphs in sections(text):
        units = [piece for p in paragraphs for piece in ([p] if len(p) <= max_chars else split_long(p, max_chars))]
        packed = _pack(units, max_chars, "\n\n")
        merged: list[str] = []
        for chunk in packed:
            if merged and len(chunk) < min_chars and len(merged[-1]) + 2 + len(chunk) <= max_chars:
                merged[-1] += "\n\n" + chunk
            else:
                merged.append(chunk)
        chunks += [(heading, c) for c in merged]
    return chunks


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """(metadata, body) of a text file with an optional `---` block of `key: value` lines on top."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            meta = {}
            for line in lines[1:end]:
                key, sep, value = line.partition(":")
                if sep:
                    meta[key.strip().lower()] = value.strip().strip("\"'")
            return meta, "\n".join(lines[end + 1:])
    return {}, text


class DocumentDrops(DropReason):
    BAD_JSON = "bad_json", "a document line that is not JSON"
    EMPTY_DOCUMENT = "empty_document", "the document has no text"
    NO_LICENCE = "no_licence", "the document names no licence (require_licence)"


class DocumentSource(SourceStage[DocumentDrops]):
    """Documents (txt/md folders or JSONL) → one row per chunk, with the document's metadata."""

    name: ClassVar[str] = "read_documents"
    writes: ClassVar[tuple[str, ...]] = tuple(CHUNK_SCHEMA.names)

    paths: list[str] = Field(..., min_length=1, description="Files or folders of .txt/.md/.jsonl documents.")
    max_chars: int = Field(1500, ge=100, description="Largest chunk, in characters.")
    min_chars: int = Field(200, ge=0, description="Smaller chunks merge into the previous one when they fit.")
    kinds: list[str] | None = Field(None, description="Read only documents of these kinds (JSONL `kind`); "
                                    "unset reads all. Others are not read, so they are not counted.")
    subject: str | None = Field(None, description="Subject for documents that do not name one.")
    grade: str | None = Field(None, description="Grade or level for documents that do not name one.")
    licence: str | None = Field(None, description="Licence for documents that do not name one.")
    source: str | None = Field(None, description="Source name for documents that do not name one.")
    require_licence: bool = Field(True, description="Drop documents without a licence (`no_licence`).")

    def files(self) -> list[Path]:
        found: list[Path] = []
        for raw in self.paths:
            p = Path(raw)
            if p.is_dir():
                found += sorted(f for f in p.rglob("*") if f.suffix.lower() in SUFFIXES and f.is_file()
                                and not f.name.startswith((".", "_")))
            elif p.is_file():
                found.append(p)
            else:
                raise FileNotFoundError(f"document input not found: {raw}")
        if not found:
            raise FileNotFoundError(f"no .txt, .md or .jsonl documents under {self.paths}")
        return found

    def fingerprints(self) -> list[dict[str, Any]]:
        from transforms.core.manifest import fingerprint_file

        return [fingerprint_file(f) for f in self.files()]

    def documents(self) -> list[dict[str, Any]]:
        """Every document record seen, with `_error` set on the unreadable ones."""
        docs: list[dict[str, Any]] = []
        for f in self.files():
            if f.suffix.lower() == ".jsonl":
                for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                        if not isinstance(record, dict):
                            raise ValueError("not an object")
                    except ValueError:
                        docs.append({"doc_id": f"{f.stem}:{n}", "path": f"{f}:{n}", "_error": DocumentDrops.BAD_JSON})
                        continue
                    docs.append(self._document(record, f"{f.stem}:{n}", f"{f}:{n}"))
            else:
                meta, body = front_matter(f.read_text(encoding="utf-8"))
                docs.append(self._document({**meta, "text": body}, f.stem, str(f)))
        if self.kinds is not None:
            docs = [d for d in docs if d.get("_error") or d.get("kind") in self.kinds]
        return docs

    def _document(self, record: dict[str, Any], default_id: str, path: str) -> dict[str, Any]:
        doc: dict[str, Any] = {"doc_id": default_id, "path": path, "kind": "document"}
        for key, value in record.items():
            if key.lower() in META_KEYS and value not in (None, ""):
                doc[META_KEYS[key.lower()]] = str(value)
        for key in ("subject", "grade", "licence", "source"):
            doc.setdefault(key, getattr(self, key))
        text = record.get("text")
        doc["text"] = text if isinstance(text, str) else ""
        if not doc.get("title"):
            first = next((h for h, _ in sections(doc["text"]) if h), None)
            doc["title"] = first.split(" › ")[0] if first else default_id
        if not doc["text"].strip():
            doc["_error"] = DocumentDrops.EMPTY_DOCUMENT
        elif self.require_licence and not doc.get("licence"):
            doc["_error"] = DocumentDrops.NO_LICENCE
        return doc

    def rows(self) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for doc in self.documents():
            meta = {k: doc.get(k) for k in ("doc_id", "title", "subject", "grade", "licence", "source", "url",
                                             "kind", "path")}
            if doc.get("_error"):
                rows.append({**meta, "id": f"{doc['doc_id']}#-", "chunk_no": None, "n_chunks": 0,
                             "drop_reason": doc["_error"]})
                continue
            chunks = chunk_text(doc["text"], max_chars=self.max_chars, min_chars=self.min_chars)
            rows += [{**meta, "id": f"{doc['doc_id']}#{i:03d}", "chunk_no": i, "n_chunks": len(chunks),
                      "heading": heading, "text": chunk, "drop_reason": None}
                     for i, (heading, chunk) in enumerate(chunks)]
        return pa.Table.from_pylist(rows, CHUNK_SCHEMA)


class AttachDrops(DropReason):
    UNKNOWN_CHUNK = "unknown_chunk", "the chunk id is not in the documents"


class AttachChunks(Stage[AttachDrops]):
    """Request rows that name a chunk (`chunk_id`, e.g. from a ProductSource of chunk × model) get the
    chunk's text and its document's metadata; an id the documents do not have is `unknown_chunk`."""

    name: ClassVar[str] = "attach_chunks"
    release_columns: ClassVar[tuple[str, ...]] = ("source_document", "grade")
    reads: ClassVar[tuple[str, ...]] = ("chunk_id",)
    writes: ClassVar[tuple[str, ...]] = ("text", "title", "heading", "subject", "grade", "licence",
                                         "source_document", "doc_source", "kind")

    documents: DocumentSource = Field(..., description="The documents the chunk ids come from.")

    def process(self, batch: pa.Table) -> pa.Table:
        from transforms.core.stage import put_column

        chunks = {r["id"]: r for r in self.documents.rows().to_pylist() if r["drop_reason"] is None}
        wanted = [chunks.get(str(c)) for c in batch.column("chunk_id").to_pylist()]
        out = batch
        for col in self.writes:
            key = {"source_document": "doc_id", "doc_source": "source"}.get(col, col)
            out = put_column(out, col, pa.array([w.get(key) if w else None for w in wanted], pa.string()))
        return self.drop(out, [None if w else AttachDrops.UNKNOWN_CHUNK for w in wanted])
