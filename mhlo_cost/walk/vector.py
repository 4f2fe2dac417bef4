"""Vector-unit work: the rules of :data:`VECTOR`: elementwise ops, reductions, sorts, and the zero-FLOP data
movement.

Conventions (op names without dialect; StableHLO, MHLO and CHLO share them):

* ``ELEMENTWISE``: 1 FLOP per result element.
* ``TRANSCENDENTAL``: 1 FLOP per result element, and 1 transcendental per element in its own column.
* ``CHLO_EQUIVALENTS``: CHLO ops count as the StableHLO op they stand for (``chlo.square`` is a
  ``multiply``, ``chlo.erf`` an ``erf``, ``chlo.broadcast_add`` an ``add``, ...).
* ``reduce``: (input elements - output elements) x (FLOPs of the reducer body), i.e. n-1 combines per
  output. ``reduce_window`` follows XLA: output elements x (window elements - 1) x reducer FLOPs, which is
  the same number for non-overlapping windows and the right one for overlapping ones.
* ``sort``: elements x ceil(log2(sorted dimension)) x comparator FLOPs (a comparison sort's depth);
  ``chlo.top_k`` as a sort of the last dimension: elements x ceil(log2(last dim)).
* ``scatter``: update elements x FLOPs of its update body, as XLA counts it: 0 for a plain overwrite, one
  per element for a scatter-add.
* ``DATA_MOVEMENT``: 0 FLOPs; their bytes still count. ``slice``, ``dynamic_slice`` and ``gather`` read
  only what they return (and their indices); ``dynamic_update_slice`` reads and writes only its update.
"""
from __future__ import annotations

from .costvalue import Cost, Counted, vector_cost
from .optable import OpContext, OpRule, RuleTable, qualified
from .opsets import DATA_MOVEMENT, ELEMENTWISE, TRANSCENDENTAL
from .attrs import int_attr, int_list
from .bodies import CHLO_EQUIVALENTS, body_summary


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


def answer(ctx: OpContext, cost: Cost, kind: str = "") -> Cost | Counted:
    """``cost`` (with ``kind``, where given); an op in a body that no rule knows makes the row ``unknown`` (its
    FLOPs are then a lower bound), never a silent zero."""
    unknown = [names for _, _, names in ctx.bodies if names]
    if unknown:
        return Counted(cost, "unknown", f"{ctx.name} body: {', '.join(unknown[-1])}")
    return Counted(cost, kind) if kind else cost


def _first_result(ctx: OpContext):
    return ctx.result[0] if isinstance(ctx.result, tuple) else ctx.result


def _window(ctx: OpContext) -> int:
    w = 1
    for d in int_list(ctx.attrs, "window_dimensions", []):
        w *= d
    return w


# -- the rules ----------------------------------------------------------------------------------------------------
VECTOR = RuleTable("vector")


def elementwise(ctx: OpContext) -> Cost:
    """One FLOP per result element."""
    return vector_cost(ctx.out_elems, 0, ctx.bytes_read, ctx.bytes_written)


def transcendental(ctx: OpContext) -> Cost:
    """One FLOP and one transcendental per result element."""
    n = ctx.out_elems
    return vector_cost(n, n, ctx.bytes_read, ctx.bytes_written)


def data(ctx: OpContext) -> Cost:
    """No FLOP: the bytes of the operands and results."""
    return ctx.io


VECTOR.rule("constant", kind="data", reads="none")(data)  # a constant reads nothing: it has no operands
VECTOR.rule("rng", "rng_bit_generator", kind="elementwise")(elementwise)


@VECTOR.rule("reduce", kind="reduce", body=body_summary)
def reduce(ctx: OpContext) -> Cost | Counted:
    """(input elements - output elements) combines x the reducer body's FLOPs."""
    f, t, _ = ctx.bodies[0]
    combines = max(0, ctx.operands[0].nelems - _first_result(ctx).nelems)
    return answer(ctx, ctx.io + Cost(vector_flops=combines * f, transcendentals=combines * t))


@VECTOR.rule("reduce_window", kind="reduce", body=body_summary)
def reduce_window(ctx: OpContext) -> Cost | Counted:
    """Output elements x (window elements - 1) combines x the reducer body's FLOPs, as XLA counts it."""
    f, t, _ = ctx.bodies[0]
    combines = _first_result(ctx).nelems * max(0, _window(ctx) - 1)
    return answer(ctx, ctx.io + Cost(vector_flops=combines * f, transcendentals=combines * t))


@VECTOR.rule("select_and_scatter", kind="reduce", body=body_summary)
def select_and_scatter(ctx: OpContext) -> Cost | Counted:
    """Selection over each window of the operand, then a scatter-combine per source element."""
    (sel, _, _), (comb, t, _) = ctx.bodies[0], ctx.bodies[1]
    src_n = ctx.operands[1].nelems
    flops = src_n * (max(0, _window(ctx) - 1) * sel + comb)
    return answer(ctx, ctx.io + Cost(vector_flops=flops, transcendentals=src_n * t))


@VECTOR.rule("sort", kind="sort", body=body_summary)
def sort(ctx: OpContext) -> Cost | Counted:
    """Elements x ceil(log2(sorted dimension)) x the comparator's FLOPs."""
    ti = ctx.operands[0]
    dim = int_attr(ctx.attrs, "dimension", len(ti.shape) - 1)
    if dim < 0:
        dim += len(ti.shape)
    size = ti.shape[dim] if ti.shape else 1
    depth = max(0, (size - 1).bit_length())  # ceil(log2(size))
    f, t, _ = ctx.bodies[0]
    return answer(ctx, ctx.io + Cost(vector_flops=ti.nelems * depth * f, transcendentals=ti.nelems * depth * t))


@VECTOR.rule("top_k", kind="sort")
def top_k(ctx: OpContext) -> Cost:
    """A comparison sort of the last dimension: elements x ceil(log2(last dimension))."""
    x = ctx.operands[0]
    size = x.shape[-1] if x.shape else 1
    return ctx.io + Cost(vector_flops=x.nelems * max(0, (size - 1).bit_length()))


@VECTOR.rule("slice", "dynamic_slice", "gather", "real_dynamic_slice", kind="data")
def window_read(ctx: OpContext) -> Cost:
    """Read only the elements they return (plus any indices), as XLA counts them; a scanned layer's weight slice
    is then one layer's weights, not the whole stack."""
    return Cost(bytes_read=ctx.bytes_written + sum(t.nbytes for t in ctx.operands[1:]), bytes_written=ctx.bytes_written)


@VECTOR.rule("dynamic_update_slice", kind="data")
def dynamic_update_slice(ctx: OpContext) -> Cost:
    """In place: reads the update and the indices, writes the update."""
    return Cost(bytes_read=sum(t.nbytes for t in ctx.operands[1:]), bytes_written=ctx.operands[1].nbytes)


@VECTOR.rule("scatter", kind="data", body=body_summary)
def scatter(ctx: OpContext) -> Cost | Counted:
    """Update elements x FLOPs of the update body (0 for an overwrite: then a data row)."""
    f, t, names = ctx.bodies[0]
    if names or not f:
        return answer(ctx, ctx.io)
    updates = sum(t.nelems for t in ctx.operands[len(ctx.results) + 1:])  # inputs, indices, updates
    return Counted(ctx.io + Cost(vector_flops=updates * f, transcendentals=updates * t), "elementwise")


@VECTOR.rule("map", kind="elementwise", body=body_summary)
def map_(ctx: OpContext) -> Cost | Counted:
    """Result elements x the body's FLOPs."""
    f, t, _ = ctx.bodies[0]
    n = ctx.out_elems
    return answer(ctx, ctx.io + Cost(vector_flops=n * f, transcendentals=n * t))


#: The ops of the tables, by the kind of their rule (a later table's entry wins); their rules are
#: :func:`elementwise`, :func:`transcendental` and :func:`data` where the rules above do not name them.
TABLE_KINDS = {
    **{name: "elementwise" for name in ELEMENTWISE},
    **{name: "transcendental" for name in TRANSCENDENTAL},
    **{name: "transcendental" if eq in TRANSCENDENTAL else "elementwise" for name, eq in CHLO_EQUIVALENTS.items()},
    **{name: "data" for name in DATA_MOVEMENT},
}


def _declare_tables() -> None:
    by_kind = {"elementwise": elementwise, "transcendental": transcendental, "data": data}
    for name in VECTOR.missing(sorted(TABLE_KINDS)):
        kind = TABLE_KINDS[name]
        for op in qualified(name):
            VECTOR.add((op,), OpRule(by_kind[kind], kind, reads="same_type" if op in _SAME_TYPE_OPS else "operands"))


_declare_tables()

