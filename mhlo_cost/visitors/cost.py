"""Every metric in one walk (matrix, vector, memory, collectives, unknown ops): :data:`COST_RULES`, the rule
sets :func:`mhlo_cost.analysis.analyze` composes, and :class:`CountingRules`, what makes an op no rule knows a
row of kind ``unknown``, never a zero."""
from __future__ import annotations

from jaxlib.mlir import ir

from .base import IRVisitor, shared_short_name
from .comm import CommIRVisitor
from .liveness import LivenessRecorder
from .more_rules import MoreRules
from .ruleset import RuleSet
from .shardy import ShardyRules
from .tflops import TFlopsVisitor
from .vector import KNOWN_CUSTOM_CALLS, VectorVisitor


class CountingRules(RuleSet):
    """One row per op occurrence: what the other rule sets leave (custom calls, composites, shard_map bodies,
    and ``generic_rule``: an op no rule knows)."""

    metric = "row"
    _manual_warned = False

    def generic_rule(self, op: ir.Operation) -> None:
        if len(op.regions) and shared_short_name(op.name) is not None:
            # mhlo.fusion, ...: StableHLO / MHLO / CHLO containers whose body runs once.
            self.walk.walk_regions(op)
            return
        # No rule: a leaf op, or a region op of another dialect (gpu.all_reduce, scf.reduce, ...) whose
        # regions are not walked, as their meaning is not known.
        self.emit(op, "unknown", target=op.name)

    def visit_manual_computation(self, op: ir.Operation) -> None:
        # A shard_map body: its shapes are one device's, and so are its counts (as comm_bytes always are).
        if not self._manual_warned:
            self._manual_warned = True
            self.warnings.append("ops inside shard_map (sdy.manual_computation) are counted per device")
        rows = self.collect(self.walk.walk_regions, op)
        self.replay(rows, 1, "", "per device")

    def visit_custom_call(self, op: ir.Operation) -> None:
        target = ir.StringAttr(op.attributes["call_target_name"]).value if "call_target_name" in op.attributes else ""
        if target in KNOWN_CUSTOM_CALLS:
            self.emit(op, "data", target=target)
        else:
            self.emit(op, "unknown", target=target or op.name)

    def visit_composite(self, op: ir.Operation) -> None:
        # stablehlo.composite carries its meaning in a decomposition function: count that.
        callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        self.replay(self.walk.function_rows(callee), 1, self.loc(op).scope)


#: The rule sets of a full count, in the order the walk asks them for an op's rule (the first that has one).
COST_RULES = (ShardyRules, CommIRVisitor, TFlopsVisitor, MoreRules, VectorVisitor, CountingRules)


class CostRules(IRVisitor):
    """The walk with :data:`COST_RULES` composed (and whatever ``recorders`` are given)."""

    def __init__(self, module, entry=None, recorders=(), options=None):
        super().__init__(module, entry, recorders=recorders, rules=COST_RULES, options=options)


class CostVisitor(CostRules):
    """:class:`CostRules` with the liveness recorder of :mod:`mhlo_cost.visitors.liveness` (one walk for both)."""

    def __init__(self, module, entry=None):
        self._liveness = LivenessRecorder()
        super().__init__(module, entry, recorders=(self._liveness,))

    def recording(self):
        """The liveness record (:class:`mhlo_cost.visitors.frames.Recording`)."""
        return self._liveness.recording()
