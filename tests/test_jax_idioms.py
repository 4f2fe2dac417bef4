"""Cases found in review: transforms around scopes, loop bounds JAX carries, scatter-add, odd IR."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mhlo_cost import analyze
from mhlo_cost.analysis.blocks import block_table
from mhlo_cost.analysis.collectors import assign_blocks

F32 = jnp.float32
S = jax.ShapeDtypeStruct


def model(x, w):
    for i in range(4):
        with jax.named_scope(f"blocks_{i}"):
            with jax.named_scope("attn"):
                x = jnp.tanh(x @ w)
            with jax.named_scope("mlp"):
                x = jnp.tanh(x @ w)
    return x.sum()


def test_grad_keeps_block_scopes_and_all_gemms_in_blocks():
    text = jax.jit(jax.grad(model, argnums=1)).lower(S((4, 4), F32), S((4, 4), F32)).as_text(debug_info=True)
    a = analyze(text)
    blocks = assign_blocks(a, method="auto")
    assert blocks.method == "scope" and blocks.count == 4
    df = block_table(a, blocks)
    in_blocks = df[df.kind != ""].gemm_flops.sum()
    # forward: 8 matmuls of 2*4*4*4; backward: for each, dx and dw matmuls (the first needs no dx... but JAX
    # still computes what the grad needs); all of them sit inside some block.
    assert in_blocks == a.summary["gemm_flops"]
    assert set(df.block[df.kind != ""]) == {f"blocks_{i}" for i in range(4)}


def test_trailing_ops_do_not_duplicate_a_block_row():
    text = jax.jit(model).lower(S((4, 4), F32), S((4, 4), F32)).as_text(debug_info=True)
    a = analyze(text)
    df = block_table(a, assign_blocks(a))
    assert df.block.is_unique


def test_fori_loop_with_traced_bound_counts_every_iteration():
    f = lambda x, w: lax.fori_loop(0, jnp.int32(7), lambda i, c: c @ w, x)  # noqa: E731
    s = analyze(jax.jit(f).lower(S((8, 8), F32), S((8, 8), F32)).as_text()).summary
    assert s["gemm_flops"] == 7 * 2 * 8 * 8 * 8


def test_while_loop_with_constant_array_bound():
    n = jnp.asarray(np.int32(10))

    def f(x, w):
        return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] @ w), (0, x))[1]

    s = analyze(jax.jit(f).lower(S((8, 8), F32), S((8, 8), F32)).as_text()).summary
    assert s["gemm_flops"] == 10 * 2 * 8 * 8 * 8


def test_scatter_add_counts_its_adds_like_xla():
    f = lambda a, i, u: a.at[i].add(u)  # noqa: E731
    lo = jax.jit(f).lower(S((10, 4), F32), S((6,), jnp.int32), S((6, 4), F32))
    s = analyze(lo.as_text()).summary
    assert s["vector_flops"] - s["transcendentals"] == int(lo.cost_analysis()["flops"])


def test_plain_scatter_is_data_movement():
    f = lambda a, i, u: a.at[i].set(u)  # noqa: E731
    lo = jax.jit(f).lower(S((10, 4), F32), S((6,), jnp.int32), S((6, 4), F32))
    a = analyze(lo.as_text())
    (scatter,) = [r for r in a.rows if r.op.endswith("scatter")]
    assert scatter.vector_flops == 0 and scatter.kind == "data"
    # What remains is JAX's index wrapping: compare, add and select over the 6 indices.
    assert a.summary["vector_flops"] == 3 * 6 == int(lo.cost_analysis()["flops"])


def test_self_pairs_of_collective_permute_move_nothing():
    text = """
func.func @main(%a: tensor<256xf32>) -> tensor<256xf32> {
  %0 = "stablehlo.collective_permute"(%a) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
       source_target_pairs = dense<[[0, 0], [1, 1]]> : tensor<2x2xi64>}> : (tensor<256xf32>) -> tensor<256xf32>
  return %0 : tensor<256xf32>
}
"""
    assert analyze(text).summary["comm_bytes"] == 0


def test_call_to_a_declared_function_is_unknown_not_a_crash():
    text = """
func.func private @ext(tensor<4xf32>) -> tensor<4xf32>
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @ext(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""
    a = analyze(text)
    assert a.summary["unknown_ops"] == 1
    assert "@ext (no body)" in a.unknown


def test_file_line_is_not_borrowed_from_another_location():
    text = """
#n = loc("jit(f)/fz/mul")
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32> loc(fused[#n, "f.py":1:1])
  %1 = stablehlo.multiply %0, %0 : tensor<4xf32> loc(#n)
  return %1 : tensor<4xf32>
}
"""
    rows = analyze(text).rows
    assert [r.location for r in rows] == ["f.py:1", ""]
    assert [r.scope for r in rows] == ["fz", "fz"]


def test_two_scans_give_distinct_block_names():
    def f(x, w1, w2):
        def body(c, w):
            with jax.named_scope("layers"):
                return jnp.tanh(c @ w), None
        with jax.named_scope("encoder"):
            x = lax.scan(body, x, w1)[0]
        with jax.named_scope("decoder"):
            x = lax.scan(body, x, w2)[0]
        return x

    text = jax.jit(f).lower(S((8, 64), F32), S((3, 64, 64), F32), S((2, 64, 64), F32)).as_text(debug_info=True)
    a = analyze(text)
    df = block_table(a, assign_blocks(a))
    layers = df.kind.isin(["encoder/layers", "decoder/layers"])  # the kind carries the tower
    blocks = list(df.block[layers])
    assert blocks == ["encoder/layers.0", "encoder/layers.1", "encoder/layers.2", "decoder/layers.0",
                      "decoder/layers.1"]
    assert list(df.kind[layers]) == ["encoder/layers"] * 3 + ["decoder/layers"] * 2
    assert set(df.gemm_flops[layers]) == {2 * 8 * 64 * 64}
