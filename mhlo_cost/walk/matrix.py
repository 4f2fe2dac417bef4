"""Matrix-unit FLOPs: the rules of :data:`MATRIX`: ``dot``, ``dot_general``, ``chlo.ragged_dot`` (column
``gemm_flops``), ``convolution`` and ``dynamic_conv`` (``conv_flops``).

A contraction costs 2 x (elements of the result) x (product of the contracting dimensions): one multiply
and one add per term. Batch dimensions are part of the result, so they are counted once through it.
``chlo.ragged_dot`` is such a contraction of the lhs contracting dimensions; where its ragged dimension is
contracted (the result has a group dimension) each group sums over its own part of it, so the result
elements count once per group: divided by the groups.

A convolution is counted as XLA's HloCostAnalysis counts it: for every spatial dimension, the number of
(output position, kernel position) pairs that land on a real input element (not padding, not a hole
made by lhs dilation); times input features per group, output features and batch per batch group; x2.
With ``conv_padding="dense"`` padded positions count too, as PyTorch's FlopCounterMode, fvcore and most
papers count (ResNet-18: 1.814 GMAC); the rule reads it from :class:`mhlo_cost.walk.options.AnalysisOptions`.
A convolution with lhs dilation
(a transposed convolution, and the dgrad of a strided one) is counted as PyTorch counts a transposed
convolution: every (input element, kernel element) pair, wherever it lands (so a strided convolution's
dgrad costs its forward, not the padding of the transposed form around it).
"""
from __future__ import annotations

from jaxlib.mlir import ir

from ..ir.bindings import chlo, mhlo, stablehlo
from ..ir.types import isa
from .costvalue import Cost, Counted
from .optable import OpContext, RuleTable
from .attrs import int_attr, int_list


# -- pure rules -------------------------------------------------------------------------------------------------
def contraction_flops(lhs_shape: tuple[int, ...], result_nelems: int, lhs_contracting: list[int]) -> int:
    k = 1
    for d in lhs_contracting:
        k *= lhs_shape[d]
    return 2 * result_nelems * k


#: Loop steps one spatial dimension of a convolution may take (bounded work on hostile shapes).
MAX_CONV_STEPS = 20_000_000


def valid_positions(in_size: int, out_size: int, kernel_size: int, stride: int, pad_low: int,
                    lhs_dilation: int, rhs_dilation: int, dense: bool = False) -> int:
    """Pairs (output index, kernel index) of one spatial dimension that read a real input element; with
    ``dense``, every output index x kernel index, or with lhs dilation every (input index, kernel index)
    pair that meets the window's stride (PyTorch's count of a transposed convolution)."""
    span = max(out_size, in_size) if lhs_dilation != 1 else (out_size if dense else 1)
    if kernel_size * span > MAX_CONV_STEPS:
        raise ValueError(f"a convolution window of {kernel_size} x {span} positions is too large to count")
    if dense:
        return _dense_positions(in_size, out_size, kernel_size, stride, pad_low, lhs_dilation, rhs_dilation)
    count = 0
    for k in range(kernel_size):
        base = k * rhs_dilation - pad_low  # dilated-input index read by output 0 at kernel index k
        if lhs_dilation == 1:
            # input index o*stride + base must lie in [0, in_size)
            lo = (-base + stride - 1) // stride if base < 0 else 0
            last = in_size - 1 - base
            hi = min(out_size - 1, last // stride) if last >= 0 else -1
            if hi >= lo:
                count += hi - lo + 1
            continue
        for o in range(out_size):
            u = o * stride + base
            if u < 0 or u % lhs_dilation:
                continue
            if u // lhs_dilation < in_size:
                count += 1
    return count


def _dense_positions(in_size, out_size, kernel_size, stride, pad_low, lhs_dilation, rhs_dilation) -> int:
    if lhs_dilation == 1:
        return out_size * kernel_size
    if stride == 1:
        return in_size * kernel_size
    count = 0  # input i and kernel k meet output (i * lhs_dilation + pad_low - k * rhs_dilation) / stride
    for k in range(kernel_size):
        for i in range(in_size):
            if (i * lhs_dilation + pad_low - k * rhs_dilation) % stride == 0:
                count += 1
    return count


def convolution_flops(lhs_shape, rhs_shape, out_shape, dnums: dict, strides, padding, lhs_dilation,
                      rhs_dilation, feature_group_count: int, batch_group_count: int, dense: bool = False) -> int:
    n_spatial = len(dnums["input_spatial"])
    positions = 1
    for i in range(n_spatial):
        positions *= valid_positions(
            lhs_shape[dnums["input_spatial"][i]],
            out_shape[dnums["output_spatial"][i]],
            rhs_shape[dnums["kernel_spatial"][i]],
            strides[i], padding[i][0], lhs_dilation[i], rhs_dilation[i], dense,
        )
    in_features = lhs_shape[dnums["input_feature"]]
    out_features = out_shape[dnums["output_feature"]]
    batch = lhs_shape[dnums["input_batch"]]
    fmas = (in_features // feature_group_count) * out_features * (batch // batch_group_count) * positions
    return 2 * fmas


# -- attribute access (StableHLO and MHLO spell the same attributes with their own classes) --------------------
def dot_contracting(attr: ir.Attribute) -> list[int]:
    """The lhs contracting dimensions of ``dot_dimension_numbers``."""
    for cls in (stablehlo.DotDimensionNumbers, mhlo.DotDimensionNumbers):
        if cls.isinstance(attr):
            return list(cls(attr).lhs_contracting_dimensions)
    raise ValueError(f"unrecognised dot dimension numbers {attr}")


def _conv_dims(attr: ir.Attribute) -> dict:
    for cls in (stablehlo.ConvDimensionNumbers, mhlo.ConvDimensionNumbers):
        if cls.isinstance(attr):
            d = cls(attr)
            return {
                "input_batch": d.input_batch_dimension,
                "input_feature": d.input_feature_dimension,
                "input_spatial": list(d.input_spatial_dimensions),
                "kernel_spatial": list(d.kernel_spatial_dimensions),
                "output_feature": d.output_feature_dimension,
                "output_spatial": list(d.output_spatial_dimensions),
            }
    raise ValueError(f"unrecognised convolution dimension numbers {attr}")


# -- the rules ----------------------------------------------------------------------------------------------------
MATRIX = RuleTable("matrix")


@MATRIX.rule("dot_general", kind="dot", weights=True)
def dot_general(ctx: OpContext) -> Cost:
    """2 x result elements x the product of the lhs contracting dimensions."""
    contracting = dot_contracting(ctx.attrs["dot_dimension_numbers"])
    return ctx.io + Cost(gemm_flops=contraction_flops(ctx.operands[0].shape, ctx.result.nelems, contracting))


@MATRIX.rule("dot", kind="dot", weights=True)
def dot(ctx: OpContext) -> Cost:
    """Legacy dot: vector.vector, matrix.vector or matrix.matrix; contracts the last dim of lhs."""
    lhs = ctx.operands[0]
    return ctx.io + Cost(gemm_flops=contraction_flops(lhs.shape, ctx.result.nelems, [len(lhs.shape) - 1]))


@MATRIX.rule("convolution", kind="conv", weights=True)
def convolution(ctx: OpContext) -> Cost:
    """2 x the (output, kernel tap) pairs on real input x input features per group (``conv_padding="dense"``: every
    pair). ``padding`` in ``ctx.attrs`` is the attribute or, for a dynamic_conv, the constant's integers."""
    lhs, rhs, out = ctx.operands[0], ctx.operands[1], ctx.result
    dn = _conv_dims(ctx.attrs["dimension_numbers"])
    n = len(dn["input_spatial"])
    pad = int_list(ctx.attrs, "padding", [0] * (2 * n))
    if len(pad) != 2 * n:
        raise ValueError(f"padding of {len(pad)} values for {n} spatial dimensions")
    flops = convolution_flops(
        lhs.shape, rhs.shape, out.shape, dn,
        int_list(ctx.attrs, "window_strides", [1] * n),
        [(pad[2 * i], pad[2 * i + 1]) for i in range(n)],
        int_list(ctx.attrs, "lhs_dilation", [1] * n),
        int_list(ctx.attrs, "rhs_dilation", [1] * n),
        int_attr(ctx.attrs, "feature_group_count", 1),
        int_attr(ctx.attrs, "batch_group_count", 1),
        ctx.options.conv_padding == "dense",
    )
    return ctx.io + Cost(conv_flops=flops)


def constant_padding(op: ir.Operation) -> dict:
    """A ``dynamic_conv``'s padding, its third operand: ``{"padding": its integers}`` where that operand is a
    constant, else ``{"padding": None}`` (the :class:`~mhlo_cost.walk.optable.OpRule` ``extra`` of its rule)."""
    return {"padding": _constant_ints(op.operands[2]) if len(op.operands) > 2 else None}


@MATRIX.rule("dynamic_conv", kind="conv", weights=True, extra=constant_padding)
def dynamic_conv(ctx: OpContext) -> Cost | Counted:
    """A convolution whose padding is its third operand (``[spatial dims x 2]``): counted as one where that
    operand is a constant; otherwise the row is unknown (the valid positions depend on it)."""
    if ctx.attrs["padding"] is None:
        return Counted(ctx.io, kind="unknown", target=f"{ctx.name} (padding not a constant)")
    return convolution(ctx)


@MATRIX.rule("ragged_dot", kind="dot", weights=True)
def ragged_dot(ctx: OpContext) -> Cost:
    """A grouped GEMM: 2 x result elements x the lhs contracting dimensions, over the groups where the ragged
    dimension is contracted."""
    d = chlo.RaggedDotDimensionNumbers(ctx.attrs["ragged_dot_dimension_numbers"])
    lhs = ctx.operands[0]
    k = 1
    for i in d.lhs_contracting_dimensions:
        k *= lhs.shape[i]
    out = ctx.result.nelems
    if set(d.lhs_ragged_dimensions) & set(d.lhs_contracting_dimensions):
        sizes = ctx.operands[2]  # group_sizes: [..., groups]
        out //= max(sizes.shape[-1] if sizes.shape else 1, 1)
    return ctx.io + Cost(gemm_flops=2 * out * k)


def _constant_ints(v: ir.Value) -> list[int] | None:
    """The integers of a constant (``stablehlo`` / ``mhlo`` / ``arith``) value, in row-major order; None otherwise."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or "value" not in owner.operation.attributes:
        return None
    if owner.operation.name not in ("stablehlo.constant", "mhlo.constant", "arith.constant"):
        return None
    attr = owner.operation.attributes["value"]
    if not isa(attr, ir.DenseIntElementsAttr):
        return None
    return [int(x) for x in ir.DenseIntElementsAttr(attr)]
