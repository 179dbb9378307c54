"""Sentence embeddings behind one interface; heavy imports happen in `Embedder.setup()`."""

from transforms.embed.base import Embedder, EmbedderConfig, build_embedder

__all__ = ["Embedder", "EmbedderConfig", "build_embedder"]
