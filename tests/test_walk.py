"""The walk: calls, loops and branches counted right; MHLO and StableHLO give the same numbers."""
import jax
import jax.numpy as jnp
import pytest
from jax import lax

from mhlo_cost import AnalysisError, analyze

F32 = jnp.float32


def text_of(f, *shapes):
    return jax.jit(f).lower(*[jax.ShapeDtypeStruct(s, F32) for s in shapes]).as_text(debug_info=True)


def step(c, w):
    return jnp.tanh(c @ w)


# One step on (8, 16) @ (16, 16): 2*8*16*16 GEMM FLOPs and 8*16 tanh.
STEP_GEMM = 2 * 8 * 16 * 16
STEP_TANH = 8 * 16


def test_scan_of_10_steps_counts_10_steps():
    def f(x, w):
        return lax.scan(lambda c, _: (step(c, w), None), x, None, length=10)[0]

    s = analyze(text_of(f, (8, 16), (16, 16))).summary
    assert s["gemm_flops"] == 10 * STEP_GEMM
    assert s["transcendentals"] == 10 * STEP_TANH


def test_fori_loop_counts_every_iteration():
    def f(x, w):
        return lax.fori_loop(0, 7, lambda i, c: step(c, w), x)

    s = analyze(text_of(f, (8, 16), (16, 16))).summary
    assert s["gemm_flops"] == 7 * STEP_GEMM


def test_fori_loop_with_offset_and_stride():
    # lax.fori_loop(3, 12) runs 9 times whatever JAX lowers it to.
    def f(x, w):
        return lax.fori_loop(3, 12, lambda i, c: step(c, w), x)

    assert analyze(text_of(f, (8, 16), (16, 16))).summary["gemm_flops"] == 9 * STEP_GEMM


def test_inner_jit_called_4_times_counts_4_times():
    inner = jax.jit(step)

    def f(x, w):
        for _ in range(4):
            x = inner(x, w)
        return x

    text = text_of(f, (8, 16), (16, 16))
    assert text.count("call @") >= 4  # really calls, not inlined
    a = analyze(text)
    assert a.summary["gemm_flops"] == 4 * STEP_GEMM
    assert a.summary["transcendentals"] == 4 * STEP_TANH


def test_nested_calls_multiply_transitively():
    inner = jax.jit(step)

    @jax.jit
    def middle(x, w):
        return inner(inner(x, w), w)

    def f(x, w):
        def body(c, _):
            return middle(c, w), None
        return lax.scan(body, x, None, length=3)[0]

    assert analyze(text_of(f, (8, 16), (16, 16))).summary["gemm_flops"] == 3 * 2 * STEP_GEMM


def test_scopes_of_callees_carry_the_call_site():
    inner = jax.jit(step)

    def f(x, w):
        for i in range(2):
            with jax.named_scope(f"layers.{i}"):
                x = inner(x, w)
        return x

    ops = analyze(text_of(f, (8, 16), (16, 16))).ops
    dots = ops[ops.op == "stablehlo.dot_general"]
    assert list(dots.scope) == ["layers.0", "layers.1"]


def test_unknown_trip_count_is_marked_and_counted_once():
    def f(x, w, n):
        return lax.while_loop(lambda c: c[1] < n[0, 0], lambda c: (step(c[0], w), c[1] + 1), (x, 0.0))[0]

    a = analyze(text_of(f, (8, 16), (16, 16), (1, 1)))
    assert a.summary["gemm_flops"] == STEP_GEMM
    assert any("trip_count_unknown" in r.note for r in a.rows)
    assert a.warnings


def test_cond_counts_the_most_expensive_branch():
    def f(p, x, w):
        return lax.cond(p[0] > 0, lambda: step(step(x, w), w), lambda: x * 2.0)

    a = analyze(text_of(f, (1,), (8, 16), (16, 16)))
    assert a.summary["gemm_flops"] == 2 * STEP_GEMM
    assert any("branch" in r.note for r in a.rows if r.gemm_flops)


# -- MHLO fixtures and their StableHLO twin ------------------------------------------------------------------------
# x(4x8) @ w(8x8) then tanh, called twice; a fori_loop of 3 steps of c + exp(c) * b; a sum over axis 1 and a
# max over axis 0 of the (4, 8) result.
SMALL = {
    "gemm_flops": 2 * (2 * 4 * 8 * 8),
    "vector_flops": 2 * 32 + 3 * (3 * 32) + 3 * 1 + 4 * 1 + (32 - 4) + (32 - 8),
    "transcendentals": 2 * 32 + 3 * 32,
    "conv_flops": 0,
}


@pytest.mark.parametrize("name", ["small_stablehlo.mlir", "small_mhlo_pretty.mlir", "small_mhlo_generic.mlir"])
def test_mhlo_and_stablehlo_twins_agree(fixtures, name):
    s = analyze(fixtures / name).summary
    assert {k: s[k] for k in SMALL} == SMALL


def test_twins_agree_on_bytes_too(fixtures):
    sums = [analyze(fixtures / n).summary for n in ("small_stablehlo.mlir", "small_mhlo_pretty.mlir",
                                                      "small_mhlo_generic.mlir")]
    assert sums[0] == sums[1] == sums[2]


def test_entry_choice(fixtures):
    a = analyze(fixtures / "small_stablehlo.mlir", entry="layer")
    assert a.summary["gemm_flops"] == 2 * 4 * 8 * 8
    with pytest.raises(AnalysisError, match="no function named"):
        analyze(fixtures / "small_stablehlo.mlir", entry="nope")
