"""Trip counts of loops: ``while`` (from its condition), ``scf.for`` (from constant bounds), and the loops and
launches of other dialects (``affine.for``, ``affine.parallel``, ``scf.parallel``, ``scf.forall``: constant
bounds; ``gpu.launch``: constant grid and block sizes).

A count is returned only where it is proven: an induction variable with a constant start and step,
compared with a constant, whose values never leave the range of its integer type before the loop ends
(an ``i8`` counter that would wrap is not counted, it is unknown). Otherwise None.
"""
from __future__ import annotations

from jaxlib.mlir import ir


def short_name(op_name: str) -> str:
    return op_name.split(".", 1)[1] if "." in op_name else op_name


def _int_constant(v: ir.Value) -> int | None:
    """The integer of a scalar (or splat) constant, looking through converts; None where not constant."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    op = owner.operation
    name = short_name(op.name)
    if name == "convert" or name == "reshape" or name == "broadcast_in_dim":
        return _int_constant(op.operands[0])
    if name != "constant" or "value" not in op.attributes:
        return None
    attr = op.attributes["value"]
    try:
        dense = ir.DenseIntElementsAttr(attr)
    except (ValueError, TypeError):
        return None
    if dense.is_splat:
        return int(dense.get_splat_value().value)
    vals = list(dense)
    if len(vals) == 1:
        return int(vals[0])
    return None


def _through_converts(v: ir.Value) -> ir.Value:
    while isinstance(v.owner, (ir.Operation, ir.OpView)) and short_name(v.owner.operation.name) == "convert":
        v = v.owner.operation.operands[0]
    return v


def _comparison(op: ir.Operation) -> str | None:
    if "comparison_direction" not in op.attributes:
        return None
    return comparison_direction(op.attributes["comparison_direction"])


def comparison_direction(attr) -> str | None:
    """``LT``, ``GE``, ... of a StableHLO or MHLO comparison direction attribute; None for anything else."""
    from ..ir.bindings import mhlo, stablehlo

    for cls in (stablehlo.ComparisonDirectionAttr, mhlo.ComparisonDirectionAttr):
        try:
            return cls(attr).value
        except (ValueError, TypeError):
            continue
    return None


_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def trip_count(while_op: ir.Operation) -> int | None:
    """Iterations of ``while`` when its condition compares an induction variable with a constant.

    The induction variable is a loop-carried value with a constant initial value that the body changes
    by a constant step (``add``/``subtract``). Returns None where that cannot be proven.
    """
    cond_block = while_op.regions[0].blocks[0]
    body_block = while_op.regions[1].blocks[0]
    cmp = _condition_compare(cond_block)
    if cmp is None:
        return None
    direction = _comparison(cmp)
    if direction is None:
        return None
    if "compare_type" in cmp.attributes and "UNSIGNED" in str(cmp.attributes["compare_type"]):
        return None  # wrap-around semantics: not modelled
    body_ret = [o.operation for o in body_block.operations][-1]
    found = _induction_bound(while_op, cmp, direction, cond_block, body_block, body_ret)
    if found is None:
        return None
    arg_index, bound, direction = found
    init = _int_constant(while_op.operands[arg_index])
    step = _step(body_ret.operands[arg_index], body_block, arg_index)
    if init is None or step is None:
        return None
    n = _iterations(init, bound, step, direction)
    if n is None or not _in_range(init, step, n, while_op.operands[arg_index].type):
        return None  # the counter would wrap around its integer type before the loop ends
    return n


def _condition_compare(cond_block) -> ir.Operation | None:
    """The ``compare`` whose result the condition returns, or None."""
    cond_ops = [o.operation for o in cond_block.operations]
    if not cond_ops or len(cond_ops[-1].operands) != 1:
        return None
    cmp_val = cond_ops[-1].operands[0]
    if not isinstance(cmp_val.owner, (ir.Operation, ir.OpView)):
        return None
    cmp = cmp_val.owner.operation
    return cmp if short_name(cmp.name) == "compare" else None


def _induction_bound(while_op, cmp, direction: str, cond_block, body_block, body_ret):
    """``(loop argument, constant bound, direction)`` with the loop argument on the left of the comparison,
    or None: one side must be a loop argument, the other a constant or a loop-invariant constant."""
    def loop_invariant_constant(v: ir.Value) -> int | None:
        """A constant, or a loop-carried value that starts constant and the body passes on unchanged."""
        c = _int_constant(v)
        if c is not None or not (isinstance(v.owner, ir.Block) and v.owner == cond_block):
            return c
        j = ir.BlockArgument(v).arg_number
        passed = body_ret.operands[j]
        if not (isinstance(passed.owner, ir.Block) and passed.owner == body_block
                and ir.BlockArgument(passed).arg_number == j):
            return None
        return _int_constant(while_op.operands[j])

    lhs, rhs = _through_converts(cmp.operands[0]), _through_converts(cmp.operands[1])
    for a, b, d in ((lhs, rhs, direction), (rhs, lhs, _FLIP[direction])):
        if isinstance(a.owner, ir.Block) and a.owner == cond_block:
            c = loop_invariant_constant(b)
            if c is not None:
                return ir.BlockArgument(a).arg_number, c, d
    return None


def _step(nxt: ir.Value, body_block, arg_index: int) -> int | None:
    """The constant the body adds to loop argument ``arg_index`` (negative for a subtract), None if not one."""
    if not isinstance(nxt.owner, (ir.Operation, ir.OpView)):
        return None
    upd = nxt.owner.operation
    kind = short_name(upd.name)
    if kind not in ("add", "subtract"):
        return None
    a, b = upd.operands[0], upd.operands[1]

    def is_iv(v):
        return isinstance(v.owner, ir.Block) and v.owner == body_block and ir.BlockArgument(v).arg_number == arg_index
    step = None
    if is_iv(a):
        step = _int_constant(b)
    elif is_iv(b) and kind == "add":
        step = _int_constant(a)
    if step is None or step == 0:
        return None
    return -step if kind == "subtract" else step


def _in_range(init: int, step: int, n: int, t: ir.Type) -> bool:
    """Whether every value of the counter, up to its exit value init + n x step, fits its signed type."""
    try:
        try:
            elem = ir.ShapedType(t).element_type
        except (ValueError, TypeError):
            elem = t
        width = ir.IntegerType(elem).width
    except (ValueError, TypeError):
        return True  # index and other types: no fixed width to wrap
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    last = init + n * step
    return lo <= min(init, last) and max(init, last) <= hi


def for_trip_count(op: ir.Operation) -> int | None:
    """Iterations of ``scf.for %i = %lb to %ub step %s`` with constant bounds (``arith.constant``); else None."""
    bounds = [_arith_constant(op.operands[i]) for i in range(3)]
    if any(b is None for b in bounds):
        return None
    lb, ub, step = bounds
    if step <= 0:
        return None
    return max(0, -((lb - ub) // step))


def _arith_constant(v: ir.Value) -> int | None:
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    op = owner.operation
    if op.name == "arith.index_cast" or op.name == "arith.extsi":
        return _arith_constant(op.operands[0])
    if op.name != "arith.constant" or "value" not in op.attributes:
        return _int_constant(v)
    try:
        return ir.IntegerAttr(op.attributes["value"]).value
    except (ValueError, TypeError):
        return None


def _iterations(init: int, bound: int, step: int, direction: str) -> int | None:
    if direction == "LT" and step > 0:
        return max(0, -((init - bound) // step))
    if direction == "LE" and step > 0:
        return max(0, (bound - init) // step + 1)
    if direction == "GT" and step < 0:
        return max(0, -((bound - init) // -step))
    if direction == "GE" and step < 0:
        return max(0, (init - bound) // -step + 1)
    if direction == "NE" and (bound - init) % step == 0 and (bound - init) // step >= 0:
        return (bound - init) // step
    return None


def index_constant(v: ir.Value) -> int | None:
    """The integer of an ``arith.constant`` (through ``index_cast`` / ``extsi``) or of a StableHLO constant."""
    return _arith_constant(v)


_DYNAMIC = -(1 << 63)  # MLIR's marker of a dynamic entry in a static array


def _ceil_trips(lo: int, hi: int, step: int) -> int | None:
    if step <= 0:
        return None
    return max(0, -((lo - hi) // step))


def _map_constants(attr: ir.Attribute) -> list[int] | None:
    """The results of an affine map without inputs, all constants; None otherwise."""
    amap = ir.AffineMapAttr(attr).value
    if amap.n_dims or amap.n_symbols:
        return None
    out = []
    for e in amap.results:
        try:
            out.append(ir.AffineConstantExpr(e).value)
        except (ValueError, TypeError):  # not a constant expression
            return None
    return out


def affine_for_trips(op: ir.Operation) -> int | None:
    """``affine.for``: constant bound maps (lower: the max of its results, upper: the min)."""
    try:
        lo, hi = _map_constants(op.attributes["lowerBoundMap"]), _map_constants(op.attributes["upperBoundMap"])
        step = ir.IntegerAttr(op.attributes["step"]).value
    except (KeyError, ValueError, TypeError):
        return None
    if not lo or not hi:
        return None
    return _ceil_trips(max(lo), min(hi), step)


def _groups(values: list[int], attr: ir.Attribute, pick) -> list[int]:
    sizes = [int(x) for x in ir.DenseIntElementsAttr(attr)]
    out, i = [], 0
    for n in sizes:
        out.append(pick(values[i:i + n]))
        i += n
    return out


def affine_parallel_trips(op: ir.Operation) -> int | None:
    """``affine.parallel``: the product over its dimensions of each one's trips (constant bound maps)."""
    try:
        lo = _map_constants(op.attributes["lowerBoundsMap"])
        hi = _map_constants(op.attributes["upperBoundsMap"])
        if lo is None or hi is None:
            return None
        lo = _groups(lo, op.attributes["lowerBoundsGroups"], max)
        hi = _groups(hi, op.attributes["upperBoundsGroups"], min)
        steps = [ir.IntegerAttr(s).value for s in ir.ArrayAttr(op.attributes["steps"])]
    except (KeyError, ValueError, TypeError):
        return None
    return _product([_ceil_trips(a, b, s) for a, b, s in zip(lo, hi, steps)]) if len(lo) == len(hi) == len(steps) \
        else None


def _product(trips: list) -> int | None:
    n = 1
    for t in trips:
        if t is None:
            return None
        n *= t
    return n


def scf_parallel_trips(op: ir.Operation) -> int | None:
    """``scf.parallel (ivs) = (lbs) to (ubs) step (steps)``: constant bounds."""
    blocks = op.regions[0].blocks
    n = len(blocks[0].arguments) if len(blocks) else 0
    if not n or len(op.operands) < 3 * n:
        return None
    vals = [index_constant(op.operands[i]) for i in range(3 * n)]
    return _product([_ceil_trips(vals[i], vals[n + i], vals[2 * n + i]) if None not in (vals[i], vals[n + i],
                     vals[2 * n + i]) else None for i in range(n)])


def scf_forall_trips(op: ir.Operation) -> int | None:
    """``scf.forall``: static bounds, or dynamic ones that are ``arith.constant``."""
    try:
        arrays = [list(ir.DenseI64ArrayAttr(op.attributes[a]))
                  for a in ("staticLowerBound", "staticUpperBound", "staticStep")]
    except (KeyError, ValueError, TypeError):
        return None
    operands, k = op.operands, 0
    resolved = []
    for arr in arrays:
        vals = []
        for v in arr:
            if v == _DYNAMIC:
                if k >= len(operands):
                    return None
                v = index_constant(operands[k])
                k += 1
            vals.append(v)
        resolved.append(vals)
    lo, hi, step = resolved
    return _product([None if None in (a, b, s) else _ceil_trips(a, b, s) for a, b, s in zip(lo, hi, step)])


def gpu_launch_count(op: ir.Operation) -> int | None:
    """``gpu.launch``: grid x block sizes (threads), all constants; its operands follow the async
    dependencies (the first segment of ``operandSegmentSizes``)."""
    try:
        segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    except (KeyError, ValueError, TypeError):
        return None
    start = segments[0] if segments else 0
    if len(segments) < 7 or any(s != 1 for s in segments[1:7]) or len(op.operands) < start + 6:
        return None
    return _product([index_constant(op.operands[start + i]) for i in range(6)])
