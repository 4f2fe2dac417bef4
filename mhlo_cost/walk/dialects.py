"""Ops of dialects other than StableHLO / MHLO / CHLO that the walk understands: :class:`DialectRules`.

:class:`mhlo_cost.walk.base.IRVisitor` dispatches ``<dialect>.<name>`` of these dialects to
``visit_<dialect>_<name>``; the rules here are the control flow of ``func``, ``scf``, ``affine``, ``gpu`` and
``sdy``, shared by every visitor (counts and memory alike):

* loops and launches multiply their body by their trip or launch count where it is static:
  ``affine.for`` and ``affine.parallel`` (constant bound maps: the product over dimensions of
  ceil((upper - lower) / step), a bound group taking its max / min), ``scf.parallel`` and ``scf.forall``
  (constant bounds, static or ``arith.constant``), ``gpu.launch`` (its body once per thread: grid x block
  sizes, all constants). Where a count cannot be proven the body counts once, with a warning and the
  note ``trip_count_unknown``; so does ``scf.while``, whose condition is not analysed;
* ``scf.if``, ``affine.if`` and ``scf.index_switch`` are branches like ``case``: every metric is its
  maximum over the branches;
* ``scf.execute_region`` and ``sdy.named_computation`` run their body once, inline;
* ``func.call`` / ``func.return`` / ``sdy.return`` are the walk's call and return; the other terminators
  (``scf.yield``, ``affine.yield``, ``scf.condition``, ``gpu.terminator``, an ``scf.reduce`` without
  operands, ...) do nothing; ``arith.constant`` is a constant, as StableHLO's.

Any other op of these dialects has no rule: it is an ``unknown`` row (:class:`mhlo_cost.walk.cost.CostRules`).
"""
from __future__ import annotations

from jaxlib.mlir import ir

from .trips import for_trip_count, index_constant

#: Region ops of other dialects whose body runs once, inline, like ``mhlo.fusion``.
INLINE_REGION_OPS = frozenset({"scf.execute_region", "sdy.named_computation"})

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


class DialectRules:
    """The rules of the module docstring; mixed into :class:`~mhlo_cost.walk.base.IRVisitor`."""

    def visit_scf_for(self, op: ir.Operation) -> None:
        """``scf.for``: its body times the trip count where the bounds are constants."""
        self._loop(op, for_trip_count(op), op.regions[0], "for loop")

    def visit_scan(self, op: ir.Operation) -> None:
        """``chlo.scan``: its body once per element of the scanned dimension of its first input."""
        steps = None
        try:
            shape = ir.ShapedType(op.operands[0].type).shape
            dim = ir.IntegerAttr(op.attributes["dimension"]).value
            steps = shape[dim] if 0 <= dim < len(shape) and shape[dim] >= 0 else None
        except (ValueError, TypeError, IndexError, KeyError):
            pass
        self._loop(op, steps, op.regions[0], "scan")

    def _loop(self, op: ir.Operation, trips: int | None, body: ir.Region, what: str) -> None:
        scope = self.loc(op).scope
        if trips is None:
            self.warnings.append(f"{what} at {self.loc(op).describe()}: trip count not provable, counted once")
            self.replay(self.collect(self.visit_region, body), 1, scope, "trip_count_unknown")
            return
        self.replay(self.collect(self.visit_region, body), trips, scope, f"{what} x{trips}")

    def visit_func_call(self, op: ir.Operation) -> None:
        self.visit_shared("call", op)

    def visit_func_return(self, op: ir.Operation) -> None:
        self.visit_return(op)

    def visit_sdy_return(self, op: ir.Operation) -> None:
        self.visit_return(op)

    def _terminator(self, op: ir.Operation) -> None:
        pass

    visit_scf_yield = visit_affine_yield = visit_scf_condition = visit_scf_reduce_return = _terminator
    visit_gpu_terminator = visit_gpu_yield = visit_gpu_return = visit_tensor_yield = _terminator

    def visit_scf_reduce(self, op: ir.Operation) -> None:
        """``scf.reduce`` without operands ends an ``scf.parallel`` body; with operands it reduces: no rule."""
        if len(op.operands):
            self.generic_visit(op)

    def visit_arith_constant(self, op: ir.Operation) -> None:
        self.emit_no_operands(op, "data")  # as a StableHLO constant: no work, its bytes

    def _inline(self, op: ir.Operation) -> None:
        for region in op.regions:
            self.visit_region(region)

    visit_scf_execute_region = visit_sdy_named_computation = visit_scf_forall_in_parallel = _inline

    def visit_sdy_manual_computation(self, op: ir.Operation) -> None:
        self.visit_shared("manual_computation", op)  # the walk's (IRVisitor.visit_manual_computation)

    def visit_scf_if(self, op: ir.Operation) -> None:
        self.visit_shared("if", op)

    visit_affine_if = visit_scf_if

    def visit_scf_index_switch(self, op: ir.Operation) -> None:
        self.visit_shared("case", op)  # regions: the default, then one per case; all are branches

    def visit_affine_for(self, op: ir.Operation) -> None:
        self._loop(op, affine_for_trips(op), op.regions[0], "affine.for")

    def visit_affine_parallel(self, op: ir.Operation) -> None:
        self._loop(op, affine_parallel_trips(op), op.regions[0], "affine.parallel")

    def visit_scf_parallel(self, op: ir.Operation) -> None:
        self._loop(op, scf_parallel_trips(op), op.regions[0], "scf.parallel")

    def visit_scf_forall(self, op: ir.Operation) -> None:
        self._loop(op, scf_forall_trips(op), op.regions[0], "scf.forall")

    def visit_gpu_launch(self, op: ir.Operation) -> None:
        self._loop(op, gpu_launch_count(op), op.regions[0], "gpu.launch")

    def visit_scf_while(self, op: ir.Operation) -> None:
        """``scf.while``: its condition is not analysed; both regions count once, flagged."""
        scope = self.loc(op).scope
        self.warnings.append(f"scf.while at {self.loc(op).describe()}: trip count not provable, counted once")
        for region in op.regions:
            self.replay(self.collect(self.visit_region, region), 1, scope, "trip_count_unknown")
