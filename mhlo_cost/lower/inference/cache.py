"""The KV cache a decoder really holds: one entry per layer, with the shapes of its key and value buffers.

The layout is read from the framework (transformers' ``StaticCache`` after a forward on the ``meta`` device,
or the bundled GPT's own cache), never from a formula: grouped-query attention holds ``kv_heads`` heads,
a sliding-window layer ``min(window, context)`` positions, multi-head latent attention (DeepSeek-V2/V3)
its compressed latent and rotary key (one "head" of ``kv_lora_rank`` and one of ``qk_rope_head_dim``).
All byte counts are exact ints; :meth:`CacheLayout.at` gives the layout at another batch or context.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class LayerCache:
    """One layer's cache: key and value shapes ``(batch, heads, length, dim)`` and the element size."""

    key: tuple
    value: tuple
    itemsize: int
    window: int | None = None  # a sliding-window layer: it never holds more than this many positions
    scale_bytes: int = 0  # a quantised cache's scales (kv-fp8: a float32 scale for K and one for V), fixed

    @property
    def nbytes(self) -> int:
        elems = int(np.prod(self.key, dtype=object)) + int(np.prod(self.value, dtype=object))
        return elems * self.itemsize + self.scale_bytes

    def at(self, batch: int, context: int) -> "LayerCache":
        length = context if self.window is None else min(self.window, context)
        k, v = self.key, self.value
        return replace(self, key=(batch, k[1], length, k[3]), value=(batch, v[1], length, v[3]))



@dataclass(frozen=True)
class CacheLayout:
    """The cache of a model at a batch and a context: per layer, and in total."""

    layers: tuple
    batch: int
    context: int
    dtype: str

    @property
    def per_layer_bytes(self) -> list:
        return [layer.nbytes for layer in self.layers]

    @property
    def nbytes(self) -> int:
        return sum(self.per_layer_bytes)

    def at(self, batch: int | None = None, context: int | None = None) -> "CacheLayout":
        b = self.batch if batch is None else batch
        c = self.context if context is None else context
        return CacheLayout(tuple(layer.at(b, c) for layer in self.layers), b, c, self.dtype)

    @property
    def bounded(self) -> bool:
        """Every layer has a sliding window: the cache stops growing with the context."""
        return all(layer.window is not None for layer in self.layers)

    def describe(self) -> str:
        kinds = sorted({(layer.key[1:2] + layer.key[3:], layer.value[1:2] + layer.value[3:], layer.window)
                        for layer in self.layers}, key=repr)
        parts = []
        for (kh, kd), (vh, vd), w in kinds:
            text = f"K {kh}x{kd} V {vh}x{vd}"
            parts.append(text + (f" window {w}" if w is not None else ""))
        return f"{len(self.layers)} layers ({'; '.join(parts)} per position), {self.dtype}"

    def shapes(self) -> list:
        """``[(key shape, value shape), ...]`` per layer, as the decode program takes them."""
        return [(layer.key, layer.value) for layer in self.layers]
