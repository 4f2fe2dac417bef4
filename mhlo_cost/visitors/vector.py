"""Vector-unit work: elementwise ops, reductions, and the zero-FLOP data movement.

Conventions (op names without dialect; StableHLO, MHLO and CHLO share them):

* ``ELEMENTWISE``: 1 FLOP per result element.
* ``TRANSCENDENTAL``: 1 FLOP per result element, and 1 transcendental per element in its own column.
* ``CHLO_EQUIVALENTS``: CHLO ops count as the StableHLO op they stand for (``chlo.square`` is a
  ``multiply``, ``chlo.erf`` an ``erf``, ``chlo.broadcast_add`` an ``add``, ...).
* ``reduce``: (input elements - output elements) x (FLOPs of the reducer body), i.e. n-1 combines per
  output. ``reduce_window`` follows XLA: output elements x (window elements - 1) x reducer FLOPs, which is
  the same number for non-overlapping windows and the right one for overlapping ones.
* ``sort``: elements x ceil(log2(sorted dimension)) x comparator FLOPs (a comparison sort's depth).
* ``scatter``: update elements x FLOPs of its update body, as XLA counts it: 0 for a plain overwrite, one
  per element for a scatter-add.
* ``DATA_MOVEMENT``: 0 FLOPs; their bytes still count. ``slice``, ``dynamic_slice`` and ``gather`` read
  only what they return (and their indices); ``dynamic_update_slice`` reads and writes only its update.
"""
from __future__ import annotations

from jaxlib.mlir import ir

from ..types import TensorInfo
from .base import shared_short_name
from .ruleset import RuleSet, claim
from .opsets import DATA_MOVEMENT, ELEMENTWISE, KNOWN_CUSTOM_CALLS, TRANSCENDENTAL  # noqa: F401 (imported from here too)
from .tflops import int_attr, int_list


#: CHLO ops whose names differ from the StableHLO op they compute.
CHLO_EQUIVALENTS = {
    "square": "multiply",
    "mulhi": "multiply",  # the high half of a full product: one multiply per element
    **{f"broadcast_{n}": n for n in (
        "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and",
        "or", "xor", "compare", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical",
        "next_after", "polygamma", "zeta", "complex")},
}

#: StableHLO / MHLO ops whose operands and result share one type (the spec's SameOperandsAndResultType;
#: not abs, whose complex operand gives a real result, nor compare, select, clamp, complex, real, imag).
SAME_TYPE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "max", "min", "negate", "sign",
    "and", "or", "xor", "not", "floor", "ceil", "round_nearest_afz", "round_nearest_even", "shift_left",
    "shift_right_arithmetic", "shift_right_logical", "popcnt", "count_leading_zeros", "exponential", "log",
    "rsqrt", "sqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "exponential_minus_one",
    "log_plus_one", "atan2", "power",
})
_SAME_TYPE_OPS = frozenset(f"{d}.{n}" for d in ("stablehlo", "mhlo") for n in SAME_TYPE)


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


class VectorVisitor(RuleSet):
    metric = "vector"

    def body(self, row, region: ir.Region) -> tuple[int, int]:
        """:func:`body_flops` of ``region`` with calls followed; an op there that no rule knows makes the
        row ``unknown`` (its FLOPs are then a lower bound), never a silent zero."""
        unknown: list = []
        f, t = body_flops(region, self.functions, unknown)
        if unknown:
            row.kind = "unknown"
            row.target = f"{row.op} body: {', '.join(unknown)}"
        return f, t

    def _elementwise(self, op: ir.Operation) -> None:
        if op.name in _SAME_TYPE_OPS:
            row = self.emit_same_type(op, "elementwise")
        else:
            row = self.emit(op, "elementwise")
        row.vector_flops = row.out_elems

    def _transcendental(self, op: ir.Operation) -> None:
        if op.name in _SAME_TYPE_OPS:
            row = self.emit_same_type(op, "transcendental")
        else:
            row = self.emit(op, "transcendental")
        row.vector_flops = row.transcendentals = row.out_elems

    def _data(self, op: ir.Operation) -> None:
        self.emit(op, "data")

    def visit_constant(self, op: ir.Operation) -> None:
        self.emit_no_operands(op, "data")  # a constant reads nothing: it has no operands

    def visit_reduce(self, op: ir.Operation) -> None:
        row = self.emit(op, "reduce")
        in_n = row.operands[0].nelems
        out_n = row.result.nelems if isinstance(row.result, TensorInfo) else row.result[0].nelems
        f, t = self.body(row, op.regions[0])
        combines = max(0, in_n - out_n)
        row.vector_flops, row.transcendentals = combines * f, combines * t

    def visit_reduce_window(self, op: ir.Operation) -> None:
        row = self.emit(op, "reduce")
        out_n = row.result.nelems if isinstance(row.result, TensorInfo) else row.result[0].nelems
        w = 1
        for d in int_list(op, "window_dimensions", []):
            w *= d
        f, t = self.body(row, op.regions[0])
        combines = out_n * max(0, w - 1)
        row.vector_flops, row.transcendentals = combines * f, combines * t

    def visit_select_and_scatter(self, op: ir.Operation) -> None:
        # Selection over each window of the operand, then a scatter-combine per source element.
        row = self.emit(op, "reduce")
        src_n = row.operands[1].nelems
        w = 1
        for d in int_list(op, "window_dimensions", []):
            w *= d
        sel, _ = self.body(row, op.regions[0])
        comb, t = self.body(row, op.regions[1])
        row.vector_flops, row.transcendentals = src_n * (max(0, w - 1) * sel + comb), src_n * t

    def visit_sort(self, op: ir.Operation) -> None:
        row = self.emit(op, "sort")
        ti = row.operands[0]
        dim = int_attr(op, "dimension", len(ti.shape) - 1)
        if dim < 0:
            dim += len(ti.shape)
        size = ti.shape[dim] if ti.shape else 1
        depth = max(0, (size - 1).bit_length())  # ceil(log2(size))
        f, t = self.body(row, op.regions[0])
        row.vector_flops, row.transcendentals = ti.nelems * depth * f, ti.nelems * depth * t

    def _window_read(self, op: ir.Operation) -> None:
        # slice, dynamic_slice, gather: read only the elements they return (plus any indices), as XLA
        # counts them; a scanned layer's weight slice is then one layer's weights, not the whole stack.
        row = self.emit(op, "data")
        row.bytes_read = row.bytes_written + sum(t.nbytes for t in row.operands[1:])

    visit_slice = visit_dynamic_slice = visit_gather = visit_real_dynamic_slice = _window_read

    def visit_dynamic_update_slice(self, op: ir.Operation) -> None:
        # In place: reads the update and the indices, writes the update.
        row = self.emit(op, "data")
        update = row.operands[1].nbytes
        row.bytes_read = sum(t.nbytes for t in row.operands[1:])
        row.bytes_written = update

    def visit_scatter(self, op: ir.Operation) -> None:
        row = self.emit(op, "data")
        n_inputs = len(op.results)
        updates = sum(t.nelems for t in row.operands[n_inputs + 1:])  # inputs, indices, updates
        f, t = self.body(row, op.regions[0])
        if f and row.kind != "unknown":
            row.kind = "elementwise"
            row.vector_flops, row.transcendentals = updates * f, updates * t

    def visit_map(self, op: ir.Operation) -> None:
        row = self.emit(op, "elementwise")
        f, t = self.body(row, op.regions[0])
        row.vector_flops, row.transcendentals = row.out_elems * f, row.out_elems * t

    def visit_rng(self, op: ir.Operation) -> None:
        self._elementwise(op)

    def visit_rng_bit_generator(self, op: ir.Operation) -> None:
        self._elementwise(op)


def _install() -> None:
    """``visit_<name>`` for every op of the tables, where the class does not define its own rule."""
    own = set(vars(VectorVisitor))

    def put(name, method):
        if "visit_" + name not in own:
            setattr(VectorVisitor, "visit_" + name, method)
            claim(VectorVisitor, "visit_" + name)

    for name in ELEMENTWISE:
        put(name, VectorVisitor._elementwise)
    for name in TRANSCENDENTAL:
        put(name, VectorVisitor._transcendental)
    for chlo_name, equivalent in CHLO_EQUIVALENTS.items():
        put(chlo_name, VectorVisitor._transcendental if equivalent in TRANSCENDENTAL else VectorVisitor._elementwise)
    for name in DATA_MOVEMENT:
        put(name, VectorVisitor._data)


_install()
