"""``CostVisitor``: every metric in one walk (matrix, vector, memory, collectives, unknown ops)."""
from __future__ import annotations

from jaxlib.mlir import ir

from .base import shared_short_name
from .comm import CommIRVisitor
from .liveness import LivenessRecorder
from .more_rules import MoreRules
from .shardy import ShardyRules
from .tflops import TFlopsVisitor
from .vector import KNOWN_CUSTOM_CALLS, VectorVisitor


class CostRules(ShardyRules, CommIRVisitor, TFlopsVisitor, MoreRules, VectorVisitor):
    """One row per op occurrence. An op that no rule knows is a row of kind ``unknown``, never a zero."""

    def generic_rule(self, op: ir.Operation) -> None:
        if len(op.regions) and shared_short_name(op.name) is not None:
            # mhlo.fusion, ...: StableHLO / MHLO / CHLO containers whose body runs once.
            for region in op.regions:
                self.visit_region(region)
            return
        # No rule: a leaf op, or a region op of another dialect (gpu.all_reduce, scf.reduce, ...) whose
        # regions are not walked, as their meaning is not known.
        self.emit(op, "unknown", target=op.name)

    def visit_manual_computation(self, op: ir.Operation) -> None:
        # A shard_map body: its shapes are one device's, and so are its counts (as comm_bytes always are).
        if not self._manual_warned:
            self._manual_warned = True
            self.warnings.append("ops inside shard_map (sdy.manual_computation) are counted per device")
        rows = self.collect(self._inline, op)
        self.replay(rows, 1, "", "per device")

    _manual_warned = False

    def visit_custom_call(self, op: ir.Operation) -> None:
        target = ir.StringAttr(op.attributes["call_target_name"]).value if "call_target_name" in op.attributes else ""
        if target in KNOWN_CUSTOM_CALLS:
            self.emit(op, "data", target=target)
        else:
            self.emit(op, "unknown", target=target or op.name)

    def visit_composite(self, op: ir.Operation) -> None:
        # stablehlo.composite carries its meaning in a decomposition function: count that.
        callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        self.replay(self._function_rows(callee), 1, self.loc(op).scope)


class CostVisitor(CostRules):
    """:class:`CostRules` with the liveness recorder of :mod:`mhlo_cost.visitors.liveness` (one walk for both)."""

    def __init__(self, module, entry=None):
        self._liveness = LivenessRecorder()
        super().__init__(module, entry, recorders=(self._liveness,))

    def recording(self):
        """The liveness record (:class:`mhlo_cost.visitors.frames.Recording`)."""
        return self._liveness.recording()
