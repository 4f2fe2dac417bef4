"""The walk's control flow: :class:`ControlFlow`, mixed into :class:`mhlo_cost.walk.base.IRVisitor`. Control flow
is the walk's alone (no rule table holds it), so that every metric and every recorder sees it the same way:

* ``func.call`` walks its callee; a callee's rows are built once and replayed at every call site, with
  the call site's scope in front of the callee's own, so a function called 28 times costs 28 times; in a call
  graph that fans out, a call folds into an earlier call's rows instead (:mod:`.callgraph`), so the table
  stays O(functions x ops) with every count exact;
* ``while`` multiplies its body by the trip count proven from the loop condition (:mod:`.trips`), or
  counts one iteration and marks its rows ``trip_count_unknown``;
* ``case`` / ``if`` (and ``scf.if``, ``affine.if``, ``scf.index_switch``) replay their most expensive branch (rows
  marked ``branch i/N``) and a ``branch_max`` row adds what other branches have above it, so every metric is its
  maximum over the branches;
* a shard_map body (``sdy.manual_computation``) is walked once, its rows noted ``per device``, with a warning;
  ``stablehlo.composite`` replays the rows of its decomposition function, as a call; an async start replays the
  computation it names, as a call (update and done add nothing);
* loops and launches of other dialects multiply their body by their trip or launch count where it is static:
  ``scf.for`` (constant bounds), ``chlo.scan`` (the scanned dimension), ``affine.for`` and ``affine.parallel``
  (constant bound maps: the product over dimensions of ceil((upper - lower) / step), a bound group taking its
  max / min), ``scf.parallel`` and ``scf.forall`` (constant bounds, static or ``arith.constant``), ``gpu.launch``
  (its body once per thread: grid x block sizes, all constants). Where a count cannot be proven the body counts
  once, with a warning and the note ``trip_count_unknown``; so does ``scf.while``, whose condition is not analysed;
* ``scf.execute_region`` and ``sdy.named_computation`` run their body once, inline;
* ``func.return`` / ``sdy.return`` are the walk's return; the other terminators (``scf.yield``, ``affine.yield``,
  ``scf.condition``, ``gpu.terminator``, an ``scf.reduce`` without operands, ...) do nothing; ``arith.constant``
  is a constant, as StableHLO's.

An op of ``scf``, ``affine``, ``gpu`` or ``sdy`` not named here has no rule: it is an ``unknown`` row.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter

from jaxlib.mlir import ir

from .costvalue import Cost
from .row import Row
from .trips import (affine_for_trips, affine_parallel_trips, for_trip_count, gpu_launch_count, scf_forall_trips,
                    scf_parallel_trips, trip_count)

#: The warning of a walk that counts a shard_map body (once, however many there are).
MANUAL_WARNING = "ops inside shard_map (sdy.manual_computation) are counted per device"


def region_ops(region: ir.Region):
    """The ops of ``region``, block after block, as one iterable (for :meth:`IRVisitor.visit_ops`): C iterators
    only, no Python frame is left on the stack while they are visited."""
    return chain.from_iterable(map(_OPERATIONS, region.blocks))


_OPERATIONS = attrgetter("operations")


class ControlFlow:
    """The walk's visit methods of the control-flow ops of the module docstring."""

    def visit_call(self, op: ir.Operation) -> None:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        rows = self._function_rows(callee)
        if callee in self.external:  # declared, not defined here: its work is unknown, never zero
            self.emit(op, "unknown", target=f"@{callee} (no body)")
            return
        scope = self.loc(op).scope
        at = self._calls.target(self._sets, callee, scope, self._func_name, len(self._out))
        if at is None:
            self.replay(rows, 1, scope)
        else:
            self.fold(rows, 1, at)

    def visit_while(self, op: ir.Operation) -> None:
        cond, body = op.regions[0], op.regions[1]
        trips = trip_count(op)
        scope = self.loc(op).scope
        if trips is None:
            note = "trip_count_unknown"
            self.warnings.append(f"while loop at {self.loc(op).describe()}: trip count not provable, counted once")
            self.replay(self.collect(self.visit_ops, region_ops(cond)), 1, scope, note)
            self.replay(self.collect(self.visit_ops, region_ops(body)), 1, scope, note)
            return
        self.replay(self.collect(self.visit_ops, region_ops(cond)), trips + 1, scope, f"while x{trips}")
        self.replay(self.collect(self.visit_ops, region_ops(body)), trips, scope, f"while x{trips}")

    def _visit_branches(self, op: ir.Operation, regions) -> None:
        """The branch with the most compute (then bytes) is replayed; where another branch is above it in a
        metric (comm bytes, transcendentals, ...), a ``branch_max`` row after the op adds the difference,
        so every metric is its maximum over the branches."""
        branches = [self.collect(self.visit_ops, region_ops(r)) for r in regions]
        if not branches:
            return
        n = len(branches)
        totals = [sum((r.cost for r in rows), Cost()) for rows in branches]
        best = max(range(n), key=lambda i: (totals[i].compute, totals[i].nbytes))
        loc = self.loc(op)
        self.replay(branches[best], 1, loc.scope, f"branch {best}/{n} (max)")
        extra = Cost.max(*totals) - totals[best]
        if any(extra):
            self._after_op.append(Row(op=op.name, kind="branch_max", loc=loc, scope=loc.scope, result=(), cost=extra,
                                      multiplicity=0, func=self._func_name, values=((), ()),
                                      note=f"per-metric maximum over {n} branches, above branch {best}"))

    # Async pairs: the start op names the computation (a function) that holds the collective; its rows are
    # replayed there, as a call's; update and done add nothing.
    def visit_async_start(self, op: ir.Operation) -> None:
        if "called_computation" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["called_computation"]).value
            self.replay(self._function_rows(callee), 1, self.loc(op).scope)
        else:
            self.generic_visit(op)

    def visit_async_update(self, op: ir.Operation) -> None:
        pass

    visit_async_done = visit_async_update

    # Region ops that are the walk's too: a shard_map body, and a composite's decomposition function.
    def visit_manual_computation(self, op: ir.Operation) -> None:
        """A shard_map body (``sdy.manual_computation``): its shapes are one device's, and so are its counts (as
        comm_bytes always are); its rows are noted ``per device``, with one warning per walk."""
        if MANUAL_WARNING not in self.warnings:
            self.warnings.append(MANUAL_WARNING)
        self.replay(self.collect(self.walk_regions, op), 1, "", "per device")

    def visit_composite(self, op: ir.Operation) -> None:
        """``stablehlo.composite`` carries its meaning in a decomposition function: its rows, as a call's."""
        callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        self.replay(self._function_rows(callee), 1, self.loc(op).scope)

    def visit_case(self, op: ir.Operation) -> None:
        self._visit_branches(op, list(op.regions))

    def visit_if(self, op: ir.Operation) -> None:
        self._visit_branches(op, list(op.regions))

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
            self.replay(self.collect(self.visit_ops, region_ops(body)), 1, scope, "trip_count_unknown")
            return
        self.replay(self.collect(self.visit_ops, region_ops(body)), trips, scope, f"{what} x{trips}")

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
            self.visit_ops(region_ops(region))

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
            self.replay(self.collect(self.visit_ops, region_ops(region)), 1, scope, "trip_count_unknown")
