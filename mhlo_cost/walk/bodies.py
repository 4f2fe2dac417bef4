"""What a rule reads of an op's region: the FLOPs and transcendentals of one application of a reducer, comparator
or update body (calls followed), and the ops in it that no rule knows (the row is then ``unknown``: a lower bound,
never a silent zero). CHLO ops count as the StableHLO op they stand for."""
from __future__ import annotations

from jaxlib.mlir import ir

from .opsets import DATA_MOVEMENT, ELEMENTWISE, TRANSCENDENTAL
from .optable import shared_short_name


#: CHLO ops whose names differ from the StableHLO op they compute.
CHLO_EQUIVALENTS = {
    "square": "multiply",
    "mulhi": "multiply",  # the high half of a full product: one multiply per element
    **{f"broadcast_{n}": n for n in (
        "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and",
        "or", "xor", "compare", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical",
        "next_after", "polygamma", "zeta", "complex")},
}


#: Ops of other dialects that a reducer / comparator body may hold, by the name of the rule they follow.
_OTHER_DIALECT_BODY_OPS = {"func.call": "call", "func.return": "return"}


def body_flops(region: ir.Region, functions: dict | None = None, unknown: list | None = None,
               depth: int = 0) -> tuple[int, int]:
    """(FLOPs, transcendentals) of one application of a reducer / comparator / update body.

    A ``func.call`` in the body counts its callee's ops (``functions``: name -> func.func); an op with no
    rule there (a ``custom_call``, an unknown op, a call that cannot be followed) is named in ``unknown``.
    """
    flops = trans = 0
    for block in region.blocks:
        for op in block.operations:
            op = op.operation
            name = shared_short_name(op.name)  # None for other dialects: their ops have no rule here
            name = _OTHER_DIALECT_BODY_OPS.get(op.name, "") if name is None else CHLO_EQUIVALENTS.get(name, name)
            if name in TRANSCENDENTAL:
                flops += 1
                trans += 1
            elif name in ELEMENTWISE:
                flops += 1
            elif name == "call" and functions is not None and depth < 64:
                callee = functions.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                if callee is None or not len(callee.regions[0].blocks):
                    _note(unknown, op.name)
                    continue
                f, t = body_flops(callee.regions[0], functions, unknown, depth + 1)
                flops, trans = flops + f, trans + t
            elif not name or name not in DATA_MOVEMENT and name != "return":
                _note(unknown, op.name)
    return flops, trans


def _note(unknown: list | None, name: str) -> None:
    if unknown is not None and name not in unknown:
        unknown.append(name)


def body_summary(region: ir.Region, functions: dict) -> tuple[int, int, tuple[str, ...]]:
    """(FLOPs, transcendentals, ops without a rule) of one application of ``region`` (:func:`body_flops`, calls
    followed): what a rule reads of a reducer / comparator / update body (``OpContext.bodies``)."""
    unknown: list = []
    f, t = body_flops(region, functions, unknown)
    return f, t, tuple(unknown)
