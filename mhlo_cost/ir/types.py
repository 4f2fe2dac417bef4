"""Tensor types of the IR as Python facts: shape, element type, element count and exact byte size."""
from __future__ import annotations

from functools import reduce
from operator import mul

from jaxlib.mlir import ir

from .tensorinfo import TensorInfo


def isa(obj, cls) -> bool:
    """Whether an MLIR type or attribute is of the binding class ``cls``."""
    return isinstance(obj.maybe_downcast(), cls)


def element_bits(et: ir.Type) -> int:
    """Bits of storage of one element: the one width every byte count read from the IR comes from (each
    :class:`TensorInfo`'s ``nbytes``). An i1 takes a byte, as XLA stores a PRED: ``ByteWidth(PRED)`` is 1 in XLA's
    ``xla/primitive_util.h`` (its ``BitWidth`` of 1 rounded up to a byte), and its elemental IR emitter holds a
    PRED as an i8 with the truth value in the bottom bit; sub-byte packing is for the 2- and 4-bit types only
    (tests/test_pred_bytes.py holds the bytes against XLA's cost and memory analyses)."""
    if isa(et, ir.ComplexType):
        return 2 * element_bits(ir.ComplexType(et).element_type)
    if isa(et, ir.IntegerType):
        w = ir.IntegerType(et).width
        return 8 if w == 1 else w
    if isa(et, ir.IndexType):
        return 64
    try:
        return ir.FloatType(et).width
    except (ValueError, TypeError):
        pass
    s = str(et)
    if "quant.uniform" in s:  # !quant.uniform<i8:f32, ...>: stored as its storage type
        storage = s.split("<", 1)[1].split(":", 1)[0]
        if storage.lstrip("iu").isdigit():
            return int(storage.lstrip("iu"))
    raise ValueError(f"element type {s} has no known size")


def _nbytes(nelems: int, bits: int) -> int:
    return (nelems * bits + 7) // 8  # sub-byte types (i4, f4E2M1FN) are packed


class TypeCache:
    """Memoises :func:`_tensor_info` for one MLIR context (types are uniqued, so their hash is identity)."""

    def __init__(self):
        self._map: dict[int, TensorInfo] = {}
        self.known = self._map.get  # hash(type) -> TensorInfo or None, for hot loops

    def __call__(self, t: ir.Type) -> TensorInfo:
        h = hash(t)
        hit = self._map.get(h)
        if hit is None:
            hit = self._map[h] = _tensor_info(t)
        return hit


def _tensor_info(t: ir.Type) -> TensorInfo:
    s = str(t)
    if isa(t, ir.RankedTensorType):
        rt = ir.RankedTensorType(t)
        if not rt.has_static_shape:
            raise ValueError(f"dynamic dimensions in {s} are not supported: lower with static shapes")
        shape = tuple(rt.shape)
        n = reduce(mul, shape, 1)
        et = rt.element_type
        return TensorInfo.make(shape, str(et), n, _nbytes(n, element_bits(et)))
    if isa(t, ir.UnrankedTensorType):
        raise ValueError(f"unranked tensor {s} is not supported: lower with static shapes")
    if isa(t, ir.TupleType):
        raise ValueError(f"tuple type {s} is not supported: flatten tuples before analysis")
    if "token" in s:
        return TensorInfo.make((), "token", 0, 0)
    if isa(t, ir.IntegerType) or isa(t, ir.IndexType) or isa(t, ir.FloatType):
        return TensorInfo.make((), s, 1, _nbytes(1, element_bits(t)))
    raise ValueError(f"type {s} is not a static tensor")
