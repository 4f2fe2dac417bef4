"""``TensorInfo``: a tensor type of the IR as Python facts (shape, element type, elements, exact bytes).

Standard library only: the rows the walk hands back (from the reader's child process) carry these, and the
process that reads them imports no jaxlib. :mod:`mhlo_cost.ir.types` makes them from MLIR types.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # MLIR's element type spelling: bf16, f32, i1, f8E4M3FN, complex<f32>, token
    nelems: int
    nbytes: int
    shape_str: str = ""  # "2x3x5"
    pretty: str = ""  # "bf16[2,3,5]"

    @classmethod
    def make(cls, shape: tuple[int, ...], dtype: str, nelems: int, nbytes: int) -> "TensorInfo":
        return cls(shape, dtype, nelems, nbytes, "x".join(map(str, shape)), f"{dtype}[{','.join(map(str, shape))}]")
