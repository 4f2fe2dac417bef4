"""``Argument``: an entry function argument of a training step, as the walk reads it (standard library only)."""
from __future__ import annotations

from dataclasses import dataclass

from ..tensorinfo import TensorInfo


@dataclass(frozen=True)
class Argument:
    key: str  # the data flow's name for it: "arg<id>"
    index: int
    name: str  # its location name (JAX: the pytree path, "params['layers'][0]['w']"), "" where none
    donated: bool  # aliased to an output (tf.aliasing_output) or a buffer donor
    type: TensorInfo
