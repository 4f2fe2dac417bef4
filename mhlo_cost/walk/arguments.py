"""The entry function's arguments as the walk reads them: :class:`Argument` (recorded where
:attr:`mhlo_cost.walk.options.AnalysisOptions.arguments` asks)."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.tensorinfo import TensorInfo
from .recorder import Recorder


@dataclass(frozen=True)
class Argument:
    key: str  # the data flow's name for it: "arg<id>"
    index: int
    name: str  # its location name (JAX: the pytree path, "params['layers'][0]['w']"), "" where none
    donated: bool  # aliased to an output (tf.aliasing_output) or a buffer donor
    type: TensorInfo


def entry_arguments(fn, tinfo) -> list[Argument]:
    """The arguments of the function ``fn``, ``tinfo(type)`` giving each one's :class:`TensorInfo`; donated:
    ``jax.buffer_donor`` or ``tf.aliasing_output`` among its attributes."""
    from jaxlib.mlir import ir

    from .locations import location_info

    attrs = []
    if "arg_attrs" in fn.attributes:
        attrs = [ir.DictAttr(a) for a in ir.ArrayAttr(fn.attributes["arg_attrs"])]
    out = []
    for i, a in enumerate(fn.regions[0].blocks[0].arguments):
        d = attrs[i] if i < len(attrs) else None
        donated = d is not None and ("tf.aliasing_output" in d or "jax.buffer_donor" in d)
        out.append(Argument(f"arg{hash(a)}", i, location_info(a.location).name, donated, tinfo(a.type)))
    return out


class ArgumentsRecorder(Recorder, record="arguments", fields=("arguments",)):
    """The entry function's arguments (``Analysis.arguments``), read as the walk starts."""

    def __init__(self):
        self.arguments: list[Argument] | None = None

    def started(self, walk) -> None:
        self.arguments = entry_arguments(walk.functions[walk.entry], walk.tinfo)

    def record(self) -> list[Argument] | None:
        return self.arguments
