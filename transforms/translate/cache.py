"""The per-segment translation cache: a segment is translated once per (backend, model, pair).

The key is sha256 of backend, model identity (model plus anything that changes the output: the
prompt id@version, decoding settings), source and target language and the segment text, so the
same sentence in two rows, in a re-run or in a resumed run is never sent to the model again. With
a folder, new entries are appended as Parquet chunks (transforms/core/rowcache.py: written under a
hidden name and renamed, so a killed worker leaves no half chunk, and Ray actors writing at once
never collide); every worker loads the folder when it starts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa

from transforms.core import rowcache

SCHEMA = pa.schema([("key", pa.string()), ("translation", pa.string())])


def segment_key(backend: str, model: str, src: str, tgt: str, text: str) -> str:
    return hashlib.sha256("\x1f".join((backend, model, src, tgt, text)).encode("utf-8")).hexdigest()


class SegmentCache:
    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder) if folder else None
        self._entries: dict[str, str] = {}
        self._pending: dict[str, str] = {}

    def load(self) -> int:
        """Read every chunk in the folder; returns the number of entries known."""
        if self.folder is not None and self.folder.exists():
            table = rowcache.load(self.folder)
            if table.num_rows:
                self._entries.update(zip(table.column("key").to_pylist(),
                                         table.column("translation").to_pylist(), strict=True))
        return len(self._entries)

    def get(self, key: str) -> str | None:
        return self._entries.get(key)

    def put(self, key: str, translation: str) -> None:
        if key not in self._entries:
            self._entries[key] = translation
            self._pending[key] = translation

    def flush(self) -> None:
        """Append the entries added since the last flush to the folder (a no-op without one)."""
        if self.folder is not None and self._pending:
            rowcache.append(self.folder, pa.table({"key": list(self._pending), "translation":
                                                   list(self._pending.values())}, schema=SCHEMA))
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._entries)
