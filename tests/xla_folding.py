"""What XLA's ``Lowered.cost_analysis()`` counts differently from mhlo-cost, measured on a StableHLO module.

An independent reading of the module (jaxlib's MLIR bindings only, no mhlo-cost code), for the test that
compares a whole training step with XLA. The conventions, found by comparing single-op programs:

* XLA's ``flops`` leaves transcendentals out (they are only in ``transcendentals``); mhlo-cost counts
  each as one vector FLOP and one transcendental.
* XLA counts ``convert`` as one FLOP per element; mhlo-cost as data movement (0 FLOPs).
* The conversion of StableHLO to HLO folds ops whose operands are all constants, and identities
  (``x + 0``, ``x - 0``, ``x * 1``, ``x / 1`` with a splat constant) before XLA counts; mhlo-cost counts
  the program as written.

So ``xla_flops == gemm + conv + vector - transcendentals + convert_elems - folded_elems - identity_elems``.
"""
from __future__ import annotations

import math

from jaxlib.mlir import ir

_THROUGH = ("stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.reshape")
_ZERO_UNIT = {"stablehlo.add": 0.0, "stablehlo.subtract": 0.0, "stablehlo.multiply": 1.0, "stablehlo.divide": 1.0}


def _elems(t) -> int:
    return math.prod(ir.RankedTensorType(t).shape)


def _splat(v):
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    op = owner.operation
    if op.name in _THROUGH:
        return _splat(op.operands[0])
    if op.name != "stablehlo.constant":
        return None
    attr = ir.DenseElementsAttr(op.attributes["value"])
    if not attr.is_splat:
        return None
    try:
        return float(ir.FloatAttr(attr.get_splat_value()).value)
    except (ValueError, TypeError):
        return None


def xla_differences(text: str) -> dict:
    """``convert``, ``folded`` and ``identity`` element counts of the module (every function once)."""
    from mhlo_cost.ir.loader import make_context

    out = {"convert": 0, "folded": 0, "identity": 0}
    constant: set = set()

    def visit(block):
        for op in block.operations:
            op = op.operation
            for region in op.regions:
                for b in region.blocks:
                    visit(b)
            name = op.name
            if name.endswith(".return"):
                continue
            if name == "stablehlo.convert":
                out["convert"] += _elems(op.results[0].type)
            operands = list(op.operands)
            if name == "stablehlo.constant" or (operands and all(hash(v) in constant for v in operands)):
                constant.update(hash(r) for r in op.results)
                if name != "stablehlo.constant" and name not in _THROUGH:
                    out["folded"] += _elems(op.results[0].type)
                continue
            unit = _ZERO_UNIT.get(name)
            if unit is not None and len(operands) == 2:
                rhs = _splat(operands[1])
                lhs = _splat(operands[0]) if name in ("stablehlo.add", "stablehlo.multiply") else None
                if rhs == unit or lhs == unit:
                    out["identity"] += _elems(op.results[0].type)

    with make_context():
        module = ir.Module.parse(text)
        for fn in module.body.operations:
            for b in fn.operation.regions[0].blocks:
                visit(b)
    return out
