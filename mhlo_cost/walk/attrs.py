"""Integer attributes as the rules read them, whichever form a dialect writes them in (StableHLO's dense arrays,
MHLO's dense elements, a list where a test builds the attributes by hand)."""
from __future__ import annotations

from jaxlib.mlir import ir

from ..ir.types import isa


def int_list(attrs, name: str, default: list[int] | None = None) -> list[int] | None:
    """An integer array attribute of ``attrs`` (an op's attributes, or a mapping) as a list, whether
    DenseI64ArrayAttr (StableHLO), dense<> (MHLO), or a list already."""
    if name not in attrs:
        return default
    attr = attrs[name]
    if isinstance(attr, (list, tuple)):
        return list(attr)
    if isa(attr, ir.DenseI64ArrayAttr):
        return list(ir.DenseI64ArrayAttr(attr))
    if isa(attr, ir.DenseIntElementsAttr):
        return [int(x) for x in ir.DenseIntElementsAttr(attr)]
    if isa(attr, ir.DenseBoolArrayAttr):
        return [int(x) for x in ir.DenseBoolArrayAttr(attr)]
    if isa(attr, ir.DenseElementsAttr):  # dense<[true, false]> : tensor<2xi1>
        return [int(bool(x)) for x in ir.DenseElementsAttr(attr)]
    if isa(attr, ir.ArrayAttr):
        return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attr)]
    raise ValueError(f"attribute {name} = {attr} is not an integer array")


def int_attr(attrs, name: str, default: int) -> int:
    """An integer attribute of ``attrs`` (an op's attributes, or a mapping)."""
    if name not in attrs:
        return default
    return ir.IntegerAttr(attrs[name]).value
