"""Linear transforms the vector unit runs as a whole: the rules of :data:`LINALG`, ``fft`` and ``triangular_solve``,
each counted by its textbook convention (in ``vector_flops``).

* ``fft``: XLA's HloCostAnalysis convention, 8 x prod(floor(log2(length))) x elements of the operand
  (4 real multiply-adds per complex multiply, over log2 stages).
* ``triangular_solve``: a triangle of n x n against b: n x elements of b (LAPACK's trsm count, n^2 m
  for m right-hand sides).
"""
from __future__ import annotations

from .attrs import int_list
from .costvalue import Cost
from .optable import OpContext, RuleTable


def fft_flops(operand_elems: int, lengths: list[int]) -> int:
    """8 x prod(floor(log2(length))) x ``operand_elems`` (a length of 0 or 1: no stage)."""
    stages = 1
    for n in lengths:
        stages *= max(0, n.bit_length() - 1)  # floor(log2(n)); 0 for n = 0
    return 8 * stages * operand_elems


LINALG = RuleTable("linalg")


@LINALG.rule("fft", kind="fft")
def fft(ctx: OpContext) -> Cost:
    """8 x prod(floor(log2(fft_length))) x operand elements, as XLA's HloCostAnalysis counts it."""
    return ctx.io + Cost(vector_flops=fft_flops(ctx.operands[0].nelems, int_list(ctx.attrs, "fft_length", []) or []))


@LINALG.rule("triangular_solve", kind="elementwise")
def triangular_solve(ctx: OpContext) -> Cost:
    """n x elements of b for an n x n triangle (LAPACK's trsm count, n^2 m for m right-hand sides)."""
    a, b = ctx.operands[0], ctx.operands[1]
    n = a.shape[-1] if a.shape else 1
    return ctx.io + Cost(vector_flops=n * b.nelems)
