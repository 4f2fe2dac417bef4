"""Custom calls: the rule of :data:`CUSTOM_CALL`. A custom call's work is its target's, which the IR does not
say: a target that only carries sharding or placement (:data:`~mhlo_cost.walk.opsets.KNOWN_CUSTOM_CALLS`) moves
data; any other is a row of kind ``unknown`` named by its target, with its bytes, never a zero."""
from __future__ import annotations

from jaxlib.mlir import ir

from .costvalue import Counted
from .opsets import KNOWN_CUSTOM_CALLS
from .optable import OpContext, RuleTable

CUSTOM_CALL = RuleTable("custom_call")


@CUSTOM_CALL.rule("custom_call", kind="unknown")
def custom_call(ctx: OpContext) -> Counted:
    """A sharding or placement target moves data; any other target's work is unknown, named by its target."""
    attrs = ctx.attrs
    target = ir.StringAttr(attrs["call_target_name"]).value if "call_target_name" in attrs else ""
    if target in KNOWN_CUSTOM_CALLS:
        return Counted(ctx.io, kind="data", target=target)
    return Counted(ctx.io, target=target or ctx.name)
