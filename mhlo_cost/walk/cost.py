"""Every metric in one walk (matrix, vector, memory, collectives, unknown ops): :data:`COST_RULES`, the rule
sets :func:`mhlo_cost.analysis.analyze` composes, and :class:`CountingRules`: custom calls (:data:`ROW`), and
what makes an op no rule knows a row of kind ``unknown``, never a zero."""
from __future__ import annotations

from jaxlib.mlir import ir

from .base import IRVisitor, shared_short_name
from .collective import CommIRVisitor
from .costvalue import Counted
from .liveness import LivenessRecorder
from .more_rules import MoreRules
from .optable import OpContext, RuleTable
from .ruleset import RuleSet
from .shardy import ShardyRules
from .matrix import TFlopsVisitor
from .opsets import KNOWN_CUSTOM_CALLS
from .vector import VectorVisitor


#: The rules of :class:`CountingRules`: ops counted as a row and their bytes, without FLOPs.
ROW = RuleTable("row")


@ROW.rule("custom_call", kind="unknown")
def custom_call(ctx: OpContext) -> Counted:
    """A custom call's work is its target's: a target that only carries sharding or placement
    (:data:`~mhlo_cost.walk.opsets.KNOWN_CUSTOM_CALLS`) moves data; any other is unknown, named by its target."""
    attrs = ctx.attrs
    target = ir.StringAttr(attrs["call_target_name"]).value if "call_target_name" in attrs else ""
    if target in KNOWN_CUSTOM_CALLS:
        return Counted(ctx.io, kind="data", target=target)
    return Counted(ctx.io, target=target or ctx.name)


class CountingRules(RuleSet):
    """One row per op occurrence: what the other rule sets leave (:data:`ROW`: custom calls; and ``generic_rule``:
    an op no rule knows)."""

    metric = "row"
    table = ROW

    def generic_rule(self, op: ir.Operation) -> None:
        if len(op.regions) and shared_short_name(op.name) is not None:
            # mhlo.fusion, ...: StableHLO / MHLO / CHLO containers whose body runs once.
            self.walk.walk_regions(op)
            return
        # No rule: a leaf op, or a region op of another dialect (gpu.all_reduce, scf.reduce, ...) whose
        # regions are not walked, as their meaning is not known.
        self.emit(op, "unknown", target=op.name)


#: The rule sets of a full count, in the order the walk asks them for an op's rule (the first that has one).
COST_RULES = (ShardyRules, CommIRVisitor, TFlopsVisitor, MoreRules, VectorVisitor, CountingRules)


class CostRules(IRVisitor):
    """The walk with :data:`COST_RULES` composed (and whatever ``recorders`` are given)."""

    def __init__(self, module, entry=None, recorders=(), options=None):
        super().__init__(module, entry, recorders=recorders, rules=COST_RULES, options=options)


class CostVisitor(CostRules):
    """:class:`CostRules` with the liveness recorder of :mod:`mhlo_cost.walk.liveness` (one walk for both)."""

    def __init__(self, module, entry=None):
        self._liveness = LivenessRecorder()
        super().__init__(module, entry, recorders=(self._liveness,))

    def recording(self):
        """The liveness record (:class:`mhlo_cost.walk.frames.Recording`)."""
        return self._liveness.recording()
