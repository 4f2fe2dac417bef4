"""Rules for ops real programs use beyond the common ones: fft, triangular_solve, top_k, ragged_dot.

* ``fft``: XLA's HloCostAnalysis convention, 8 x prod(floor(log2(length))) x elements of the operand
  (4 real multiply-adds per complex multiply, over log2 stages), in ``vector_flops``.
* ``triangular_solve``: a triangle of n x n against b: n x elements of b (LAPACK's trsm count, n^2 m
  for m right-hand sides), in ``vector_flops``.
* ``chlo.top_k``: a comparison sort of the last dimension, as ``sort``: elements x ceil(log2(last dim)).
* ``chlo.ragged_dot``: a GEMM in ``gemm_flops``: 2 x result elements x product of the lhs contracting
  dimensions; where the ragged dimension is contracted (the result has a group dimension) each group
  sums over its own part of it, so the result elements count once per group: divided by the groups.
* ``infeed`` / ``outfeed``: data movement: the bytes they write (infeed) or read (outfeed), 0 FLOPs.
* ``send``: a point-to-point transfer of its data operands: communication of S = their bytes, as a
  ``collective_permute`` (S per device, one step); ``recv``: the bytes it writes, no communication of its
  own, since each transfer is counted once, at its send (in an SPMD program every device runs both, as a
  collective_permute's device sends and receives S and is counted S). With ``is_host_transfer`` both are
  host transfers: bytes, no device-to-device communication.
"""
from __future__ import annotations

from jaxlib.mlir import ir

from ..ir.bindings import chlo
from .costvalue import Cost, Counted
from .optable import OpContext, RuleTable
from .ruleset import RuleSet
from .attrs import int_list


def fft_flops(operand_elems: int, lengths: list[int]) -> int:
    stages = 1
    for n in lengths:
        stages *= max(0, n.bit_length() - 1)  # floor(log2(n)); 0 for n = 0
    return 8 * stages * operand_elems


MORE = RuleTable("vector")


@MORE.rule("fft", kind="fft")
def fft(ctx: OpContext) -> Cost:
    return ctx.io + Cost(vector_flops=fft_flops(ctx.operands[0].nelems, int_list(ctx.attrs, "fft_length", []) or []))


@MORE.rule("triangular_solve", kind="elementwise")
def triangular_solve(ctx: OpContext) -> Cost:
    a, b = ctx.operands[0], ctx.operands[1]
    n = a.shape[-1] if a.shape else 1
    return ctx.io + Cost(vector_flops=n * b.nelems)


@MORE.rule("top_k", kind="sort")
def top_k(ctx: OpContext) -> Cost:
    x = ctx.operands[0]
    size = x.shape[-1] if x.shape else 1
    return ctx.io + Cost(vector_flops=x.nelems * max(0, (size - 1).bit_length()))


@MORE.rule("infeed", "outfeed", "recv", kind="data")
def transfer(ctx: OpContext) -> Cost:
    return ctx.io


@MORE.rule("send", kind="collective")
def send(ctx: OpContext) -> Counted:
    if "is_host_transfer" in ctx.attrs and ir.BoolAttr(ctx.attrs["is_host_transfer"]).value:
        return Counted(ctx.io, "data")
    return Counted(ctx.io + Cost(comm_bytes=ctx.bytes_read), comm=("collective_permute", 2, 1, 1))


@MORE.rule("ragged_dot", kind="dot", weights=True)
def ragged_dot(ctx: OpContext) -> Cost:
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


class MoreRules(RuleSet):
    """:data:`MORE`."""

    metric = "vector"
    table = MORE
