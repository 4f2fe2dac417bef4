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
from jaxlib.mlir.dialects import chlo

from .ruleset import RuleSet
from .tflops import int_list


def fft_flops(operand_elems: int, lengths: list[int]) -> int:
    stages = 1
    for n in lengths:
        stages *= max(0, n.bit_length() - 1)  # floor(log2(n)); 0 for n = 0
    return 8 * stages * operand_elems


class MoreRules(RuleSet):
    metric = "vector"

    def visit_fft(self, op: ir.Operation) -> None:
        row = self.emit(op, "fft")
        row.vector_flops = fft_flops(row.operands[0].nelems, int_list(op, "fft_length", []) or [])

    def visit_triangular_solve(self, op: ir.Operation) -> None:
        row = self.emit(op, "elementwise")
        a, b = row.operands[0], row.operands[1]
        n = a.shape[-1] if a.shape else 1
        row.vector_flops = n * b.nelems

    def visit_top_k(self, op: ir.Operation) -> None:
        row = self.emit(op, "sort")
        x = row.operands[0]
        size = x.shape[-1] if x.shape else 1
        row.vector_flops = x.nelems * max(0, (size - 1).bit_length())

    def visit_infeed(self, op: ir.Operation) -> None:
        self.emit(op, "data")

    visit_outfeed = visit_recv = visit_infeed

    def visit_send(self, op: ir.Operation) -> None:
        host = "is_host_transfer" in op.attributes and ir.BoolAttr(op.attributes["is_host_transfer"]).value
        row = self.emit(op, "data" if host else "collective")
        if not host:
            row.comm_bytes, row.comm_steps = row.bytes_read, 1
            row.comm_kind, row.group_size, row.num_groups = "collective_permute", 2, 1

    def visit_ragged_dot(self, op: ir.Operation) -> None:
        row = self.emit(op, "dot", weights=True)
        d = chlo.RaggedDotDimensionNumbers(op.attributes["ragged_dot_dimension_numbers"])
        lhs, rhs = row.operands[0], row.operands[1]
        k = 1
        for i in d.lhs_contracting_dimensions:
            k *= lhs.shape[i]
        out = row.result.nelems
        if set(d.lhs_ragged_dimensions) & set(d.lhs_contracting_dimensions):
            sizes = row.operands[2]  # group_sizes: [..., groups]
            out //= max(sizes.shape[-1] if sizes.shape else 1, 1)
        row.gemm_flops = 2 * out * k
