"""What an op does to buffers, by its name: re-labels its operand, is recomputed by a fusing compiler,
updates in place, reads a weight, or carries one along. One small table, cached per op name."""
from __future__ import annotations

from ..ir.tensorinfo import TensorInfo
from ..walk.row import short_name

#: Ops whose result is their operand's buffer, re-labelled: no bytes of their own.
ALIAS_OPS = frozenset({"reshape", "bitcast", "optimization_barrier", "sharding_constraint", "get_tuple_element"})
#: custom_call targets that only annotate their operand (the same buffer, or its per-device part).
ALIAS_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "LayoutConstraint",
                           "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape", "local_sharding_constraint",
                           "annotate_device_placement"})
#: Recomputed by a fusing compiler inside each consumer (as :mod:`mhlo_cost.roofline.fusion` duplicates them).
DUPLICATED = frozenset({"broadcast_in_dim", "broadcast", "iota"})
#: Data ops through which an argument still counts as the weight a dot reads (moved, cast, gathered).
CARRIES_WEIGHT = frozenset({"transpose", "convert", "copy", "slice", "dynamic_slice", "reduce_precision",
                            "bitcast_convert", "all_gather", "collective_permute"})

#: Classes. Below ALIAS: a row making one value of its own. ALIAS and above: re-labellings, rows making
#: several values (or none), rows without value keys, in-place updates (the sweep's slow path).
PLAIN, CARRY, DUP, DUP_CARRY, DOT, MAYBE = range(6)
ALIAS, MULTI, NOVAL, DUS = 8, 9, 10, 11


def op_class(name: str) -> int:
    """The class of an op by its full name; MAYBE where the row decides (custom_call, convert, bitcast_convert)."""
    s = short_name(name)
    if s in ALIAS_OPS:
        return ALIAS
    if s in ("custom_call", "convert", "bitcast_convert"):
        return MAYBE
    if s in DUPLICATED:
        return DUP_CARRY if s in CARRIES_WEIGHT else DUP
    if s in CARRIES_WEIGHT:
        return CARRY
    if s == "dynamic_update_slice":
        return DUS
    if s in ("dot_general", "dot", "convolution"):
        return DOT
    return PLAIN


def row_class(r) -> int:
    """:func:`op_class` for one row, deciding the MAYBE ones from the row."""
    s = short_name(r.op)
    if s == "custom_call":
        return ALIAS if r.target in ALIAS_TARGETS and r.operands else PLAIN
    res, ops = r.result, r.operands
    same = isinstance(res, TensorInfo) and ops and res.nbytes == ops[0].nbytes
    if s == "bitcast_convert":
        return ALIAS if same else CARRY
    wider = isinstance(res, TensorInfo) and ops and res.nbytes > ops[0].nbytes
    return DUP_CARRY if wider else CARRY  # convert: a widening one is recomputed in its consumers

