"""An ``optimization_barrier`` (JAX's remat fence) joins no fused kernel (:mod:`mhlo_cost.roofline.fusion`) and a
kernel reading one of its results reads that operand only (:mod:`mhlo_cost.roofline.kernel_io`): XLA emits no kernel
for it and its results alias its operands, so no kernel is charged a read of the operands it only fences."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax

from mhlo_cost import analyze
from mhlo_cost.analysis import AnalysisOptions
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline import fuse
from mhlo_cost.walk.row import short_name
from helpers import lowered

H100 = dataclasses.replace(get_profile("h100"), gemm=None)
N, BIG = 1024, 1 << 20


def test_a_fenced_value_read_by_one_op_costs_only_its_own_bytes():
    """sin(a), fenced with two large arrays b and c that nothing after the fence reads, then doubled: one kernel
    (sin and the doubling, through the fence) that reads a (N float32) and the scalar 2.0 its broadcast reads (4
    bytes) and writes the result (N float32); b and c (2 x 2^20 float32) are read by no kernel."""

    def f(a, b, c):
        a2, _, _ = lax.optimization_barrier((jnp.sin(a), b, c))
        return a2 * 2.0

    d = analyze(lowered(f, ((N,), jnp.float32), ((BIG,), jnp.float32), ((BIG,), jnp.float32)),
                AnalysisOptions(dataflow=True))
    fu = fuse(d, H100)
    barrier = [i for i, r in enumerate(d.rows) if short_name(r.op) == "optimization_barrier"]
    assert len(barrier) == 1 and fu.row_kernel[barrier[0]] is None
    assert sum(k.bytes_read for k in fu.kernels) == 4 * N + 4
    assert sum(k.bytes_written for k in fu.kernels) == 4 * N
