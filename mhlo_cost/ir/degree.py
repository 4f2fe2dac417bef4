"""A degree bound of a program's counts in one shape symbol, read off two lowerings of it.

Two modules of the same program at points that differ in one symbol only (``s`` and ``s + 1``, say) have the
same ops in the same order, and the dimensions that differ between their tensor types are the ones that grow
with the symbol. Every count rule of the walk is, per op, a product of at most one tensor's size and, for a
contraction, the sizes of the dimensions it contracts (a dot's FLOPs: 2 x result elements x contracted size;
a convolution's: result elements x the kernel's window and input features), so an op's counts are of degree
at most (dimensions that change in its largest-changing tensor) + (changing contracted dimensions, for
``dot_general``, ``dot``, ``convolution``: those of the right-hand operand for a convolution). The largest over
the program is the bound :func:`degree_bound` returns. It assumes each dimension is of degree <= 1 in the
symbol (``b*s`` is; ``s*s`` is not) and that loop trip counts do not grow with it: a fit on the bound is
therefore checked on points it did not use, never trusted alone. The op graphs differing (another op count or
order) is :class:`GraphChanged`.
"""
from __future__ import annotations


class GraphChanged(ValueError):
    """The two modules' op graphs differ: no one polynomial per count exists over those points."""


def all_ops(module) -> list:
    """Every op of ``module`` in program order (nested regions included)."""
    out = []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    out.append(inner)
                    visit(inner)

    visit(module.operation)
    return out


def _shape(t) -> tuple | None:
    from jaxlib.mlir import ir

    try:
        r = ir.RankedTensorType(t)
    except ValueError:
        return None
    return tuple(r.get_dim_size(d) if not r.is_dynamic_dim(d) else None for d in range(r.rank))


def _changed(a, b) -> list[int]:
    """The dimensions (indices) in which types ``a`` and ``b`` differ; GraphChanged for a different rank."""
    sa, sb = _shape(a), _shape(b)
    if sa is None or sb is None:
        return []
    if len(sa) != len(sb):
        raise GraphChanged(f"a tensor's rank changes with the shape ({a} vs {b})")
    return [d for d, (x, y) in enumerate(zip(sa, sb)) if x != y]


def _contracted(op, changed_lhs: list[int], changed_rhs: list[int]) -> int:
    """How many contracted dimensions of a contraction change."""
    name = op.name.split(".", 1)[-1]
    if name == "convolution":
        return len(changed_rhs)
    if name == "dot":
        return int(bool(changed_lhs) and changed_lhs[-1] == len(_shape(op.operands[0].type) or ()) - 1)
    try:
        from jaxlib.mlir.dialects import stablehlo

        dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"]).lhs_contracting_dimensions
    except Exception:  # noqa: BLE001 (an mhlo attribute, or none: count every changing operand dimension)
        return len(changed_lhs)
    return len(set(dims) & set(changed_lhs))


CONTRACTIONS = ("dot_general", "dot", "convolution")


def op_degree(a, b) -> int:
    """The bound for one op ``a`` whose twin in the other module is ``b``."""
    if a.name != b.name or len(a.operands) != len(b.operands) or len(a.results) != len(b.results):
        raise GraphChanged(f"the op graph changes with the shape ({a.name} where the other point has {b.name})")
    operands = [_changed(x.type, y.type) for x, y in zip(a.operands, b.operands)]
    results = [_changed(x.type, y.type) for x, y in zip(a.results, b.results)]
    widest = max((len(c) for c in operands + results), default=0)
    if a.name.split(".", 1)[-1] in CONTRACTIONS and len(operands) >= 2:
        return max(len(c) for c in results) + _contracted(a, operands[0], operands[1]) if results else widest
    return widest


def degree_bound(module_a, module_b) -> int:
    """The degree bound, in the one symbol the two points differ in, of every count of the program."""
    ops_a, ops_b = all_ops(module_a), all_ops(module_b)
    if len(ops_a) != len(ops_b):
        raise GraphChanged(f"the op graph changes with the shape ({len(ops_a)} ops at one point, {len(ops_b)} at "
                           "the other)")
    return max((op_degree(a, b) for a, b in zip(ops_a, ops_b)), default=0)
