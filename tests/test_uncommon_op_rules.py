"""Rules for fft, triangular_solve, top_k, mulhi, ragged_dot and the dynamic_* ops (issue 12)."""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from mhlo_cost import analyze

FIX = Path(__file__).parent / "fixtures" / "reliability"


def _by_op():
    a = analyze(FIX / "new_rules.mlir")
    assert a.summary["unknown_ops"] == 0
    return {r.op: r for r in a.rows}


def test_fft_matches_xla_cost_analysis():
    for fn, shape, dtype in ((jnp.fft.fft2, (4, 8, 16), jnp.complex64), (jnp.fft.rfft, (4, 16), jnp.float32),
                             (jnp.fft.irfft, (4, 9), jnp.complex64)):
        lowered = jax.jit(fn).lower(jax.ShapeDtypeStruct(shape, dtype))
        a = analyze(lowered.as_text())
        assert a.summary["vector_flops"] == int(lowered.cost_analysis()["flops"]), fn.__name__


def test_fft_closed_form():
    # 4x8x16 complex, lengths [8, 16]: 8 x (3 x 4) x 512 elements.
    assert _by_op()["stablehlo.fft"].vector_flops == 8 * 3 * 4 * 512


def test_triangular_solve_is_n_squared_per_right_hand_side():
    # 3 batches of an 8x8 triangle against 5 right-hand sides: 3 x 8^2 x 5.
    assert _by_op()["stablehlo.triangular_solve"].vector_flops == 3 * 8 * 8 * 5


def test_top_k_is_a_sort_of_the_last_dimension():
    # 4 rows of 100: 400 elements x ceil(log2(100)) = 7 comparisons.
    assert _by_op()["chlo.top_k"].vector_flops == 400 * 7


def test_mulhi_is_one_multiply_per_element():
    assert _by_op()["chlo.mulhi"].vector_flops == 6


def test_ragged_dot_is_a_gemm():
    # lhs 12x8 split into 3 groups of rows, each against its own 8x5: 2 x 12 x 8 x 5 in all.
    row = _by_op()["chlo.ragged_dot"]
    assert row.kind == "dot" and row.gemm_flops == 2 * 12 * 8 * 5


def test_dynamic_ops_with_static_shapes_are_data_movement(tmp_path):
    p = tmp_path / "dyn.mlir"
    p.write_text("""func.func @main(%x: tensor<4xf32>) -> tensor<2x4xf32> {
  %s = stablehlo.constant dense<[2, 4]> : tensor<2xi64>
  %0 = stablehlo.dynamic_broadcast_in_dim %x, %s, dims = [1] : (tensor<4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
""")
    a = analyze(p)
    assert a.summary["unknown_ops"] == 0
    assert a.summary["bytes_written"] == 2 * 4 * 4 + 2 * 8  # the result, and the constant shape
