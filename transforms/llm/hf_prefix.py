"""The rows' shared-prefix KV cache, handed to every batch of row suffixes (transforms/llm/hf.py).

Only torch and transformers are used, and only through the objects handed in (the prefix's
`DynamicCache`), so this module imports neither.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any


class SharedPrefixKV:
    """Serves the KV cache of the prompts' common prefix (P tokens) to each batch of B row suffixes.

    Fast path, when every layer of the prefix cache is a plain `DynamicLayer` (Qwen3, Llama...): per
    batch size, one buffer per layer of (B, kv heads, P + widest suffix of that size, head dim), into
    which the prefix is written once. A batch's suffix keys and values are written in place after the
    prefix and attention reads a view of prefix + suffix; the next batch of that size rewinds the layers
    to the prefix (a crop: nothing moves). A buffer is dropped after the last batch of its size. Per
    batch and layer this copies the B×S suffix tokens' keys and values (they must land somewhere), where
    the copy path copies P (deepcopy) + B×P (`batch_repeat_interleave`) + B×(P+S) (`DynamicLayer.update`
    concatenates the suffix onto the prefix with `torch.cat`). The values attention sees are the same.

    Copy path, for any other layer and when `reuse` is off: a deep copy of the prefix cache repeated
    along the batch, per batch. Gemma 3's `DynamicSlidingWindowLayer` needs it: its `update` keeps only
    the last `sliding_window - 1` tokens, and its `crop` refuses to rewind once the window is full.
    """

    def __init__(self, cache: Any, prefix_len: int, batch_shapes: list[tuple[int, int]], reuse: bool = True):
        """`cache`: the prefix's cache (batch 1); `batch_shapes`: (rows, suffix width) of every batch
        that will ask, in order."""
        self.cache = cache
        self.prefix_len = prefix_len
        self.reuses = reuse and _plain_layers(cache, prefix_len)
        self._widest: dict[int, int] = {}
        for size, width in batch_shapes:
            self._widest[size] = max(width, self._widest.get(size, 0))
        self._left = Counter(size for size, _ in batch_shapes)
        self._expanded: dict[int, Any] = {}

    def for_batch(self, size: int, width: int) -> Any:
        """A cache holding the prefix `size` times, for one forward pass over suffixes of `width` tokens."""
        if not self.reuses:
            cache = copy.deepcopy(self.cache)
            cache.batch_repeat_interleave(size)
            return cache
        if width > self._widest.get(size, 0) or self._left[size] <= 0:
            raise ValueError(f"a batch of {size} x {width} tokens was not announced: {self._widest}")
        cache = self._expanded.get(size)
        if cache is None:
            cache = self._expanded[size] = self._expand(size, self._widest[size])
        else:
            for layer in cache.layers:
                layer.rewind()
        self._left[size] -= 1
        if not self._left[size]:  # its last batch: the caller holds it for the forward pass only
            del self._expanded[size]
        return cache

    def _expand(self, size: int, width: int) -> Any:
        layers = []
        for layer in self.cache.layers:
            bufs = []
            for states in (layer.keys, layer.values):
                heads, _, dim = states.shape[1:]
                buf = states.new_empty((size, heads, self.prefix_len + width, dim))
                buf[:, :, :self.prefix_len].copy_(states)  # broadcast along the batch: the one expansion
                bufs.append(buf)
            layers.append(_suffix_layer_class()(bufs[0], bufs[1], self.prefix_len))
        cache = copy.copy(self.cache)  # the same Cache class and settings, new layers
        cache.layers = layers
        return cache


def _plain_layers(cache: Any, prefix_len: int) -> bool:
    from transformers.cache_utils import DynamicLayer

    layers: list[Any] = list(getattr(cache, "layers", None) or [])
    return bool(layers) and all(
        type(layer) is DynamicLayer and layer.keys is not None and layer.values is not None
        and layer.keys.shape[0] == 1 and layer.keys.shape[-2] == layer.values.shape[-2] == prefix_len
        for layer in layers)


_SUFFIX_LAYER: Any = None


def _suffix_layer_class() -> Any:
    """`DynamicLayer` over preallocated buffers (defined on first use: transformers is imported lazily)."""
    global _SUFFIX_LAYER
    if _SUFFIX_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        class SuffixBufferLayer(DynamicLayer):  # type: ignore[misc, valid-type]
            """Keys and values of (batch, heads, prefix + max suffix, dim) buffers, prefix filled: `update`
            writes the new tokens after the current end in place and returns views of what is filled;
            `rewind` goes back to the prefix. Length, mask sizes and the rest come from `DynamicLayer`,
            which reads them off the views."""

            def __init__(self, keys: Any, values: Any, prefix_len: int):
                super().__init__()
                self.buffers = (keys, values)
                self.prefix_len = prefix_len
                self.device = keys.device
                self.is_initialized = True
                self.rewind()

            def rewind(self) -> None:
                self.end = self.prefix_len
                self.keys, self.values = (b[:, :, :self.end] for b in self.buffers)

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
                start, end = self.end, self.end + key_states.shape[-2]
                if end > self.buffers[0].shape[-2] or key_states.shape[0] != self.buffers[0].shape[0]:
                    raise ValueError(f"{tuple(key_states.shape)} does not fit the buffer {tuple(self.buffers[0].shape)} "
                                     f"after {start} tokens")
                for buf, new in zip(self.buffers, (key_states, value_states), strict=True):
                    buf[:, :, start:end].copy_(new)
                self.end = end
                self.keys, self.values = (b[:, :, :end] for b in self.buffers)
                return self.keys, self.values

        _SUFFIX_LAYER = SuffixBufferLayer
    return _SUFFIX_LAYER
