"""Matrix FLOPs against two independent references: XLA's cost analysis and a closed form."""
import jax
import jax.numpy as jnp
import pytest
from jax import lax

from mhlo_cost import analyze

F32 = jnp.float32


def lowered(f, *shapes, dtype=jnp.float32):
    return jax.jit(f).lower(*[jax.ShapeDtypeStruct(s, dtype) for s in shapes])


def mhlo_cost_flops(lo):
    s = analyze(lo.as_text(debug_info=True)).summary
    return s["gemm_flops"] + s["conv_flops"], s


def xla_flops(lo) -> int:
    return int(lo.cost_analysis()["flops"])


def test_dot_general_batch_and_two_contracting_dims():
    # out[b, i, k] = sum_{j, l} x[b, i, j, l] * w[b, j, l, k]
    f = lambda x, w: lax.dot_general(x, w, (((2, 3), (1, 2)), ((0,), (0,))))  # noqa: E731
    lo = lowered(f, (3, 5, 7, 2), (3, 7, 2, 11))
    ours, s = mhlo_cost_flops(lo)
    closed_form = 2 * (3 * 5 * 11) * (7 * 2)
    assert s["gemm_flops"] == closed_form == 4620
    assert s["conv_flops"] == 0
    assert ours == xla_flops(lo)


def test_matmul_and_einsum():
    lo = lowered(lambda a, b: jnp.einsum("bhqd,bhkd->bhqk", a, b), (2, 4, 16, 8), (2, 4, 32, 8))
    ours, _ = mhlo_cost_flops(lo)
    assert ours == 2 * (2 * 4 * 16 * 32) * 8 == xla_flops(lo)


def test_legacy_dot_in_mhlo_fixture(fixtures):
    a = analyze(fixtures / "dot_mhlo_generic.mlir")
    assert a.summary["gemm_flops"] == 2 * 4 * 6 * 5


CONVS = [
    # (lhs NCHW..., rhs OIHW..., strides, padding, lhs_dilation, rhs_dilation, feature_group_count)
    ((2, 4, 16, 16), (8, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1),
    ((2, 4, 17, 15), (8, 4, 3, 3), (2, 2), ((1, 0), (2, 1)), (1, 1), (1, 1), 1),
    ((1, 6, 12, 12), (6, 2, 3, 3), (1, 2), ((0, 0), (1, 1)), (1, 1), (2, 1), 3),
    ((1, 3, 7, 9), (5, 3, 3, 2), (1, 1), ((2, 2), (1, 1)), (2, 1), (1, 2), 1),
]


@pytest.mark.parametrize("lhs,rhs,strides,padding,lhs_dil,rhs_dil,groups", CONVS)
def test_conv2d_matches_xla(lhs, rhs, strides, padding, lhs_dil, rhs_dil, groups):
    f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, strides, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil, feature_group_count=groups)
    lo = lowered(f, lhs, rhs)
    ours, s = mhlo_cost_flops(lo)
    assert s["gemm_flops"] == 0
    assert ours == xla_flops(lo)


def test_conv2d_closed_form_no_padding_effects():
    # Stride 1, 'SAME' 3x3 on 16x16: every output position sees 3x3 taps except at the border,
    # where the taps that fall on padding are not counted (XLA's convention).
    lo = lowered(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1))), (2, 4, 16, 16), (8, 4, 3, 3))
    _, s = mhlo_cost_flops(lo)
    valid_1d = 3 * 16 - 2  # per spatial dim: 16 outputs x 3 taps, minus the 2 taps on padding
    assert s["conv_flops"] == 2 * 2 * 8 * 4 * valid_1d * valid_1d


def test_conv3d_video_patch_embedding():
    # OpenSora's PatchEmbed3D: Conv3d 4 -> 1152, kernel = stride = (1, 2, 2), on a (2, 4, 60, 46, 80) latent.
    B, C, T, H, W, O = 2, 4, 6, 10, 16, 32
    f = lambda x, w: lax.conv_general_dilated(x, w, (1, 2, 2), "VALID")  # noqa: E731
    lo = lowered(f, (B, C, T, H, W), (O, C, 1, 2, 2))
    ours, s = mhlo_cost_flops(lo)
    closed_form = 2 * B * O * (T * (H // 2) * (W // 2)) * (C * 1 * 2 * 2)
    assert s["conv_flops"] == closed_form
    assert ours == xla_flops(lo)


def test_conv3d_strided_padded_grouped():
    f = lambda x, w: lax.conv_general_dilated(x, w, (2, 1, 2), ((1, 1), (0, 2), (1, 0)),  # noqa: E731
                                              rhs_dilation=(1, 2, 1), feature_group_count=2)
    lo = lowered(f, (1, 4, 7, 6, 9), (6, 2, 3, 2, 3))
    ours, _ = mhlo_cost_flops(lo)
    assert ours == xla_flops(lo)


def test_batch_group_count_matches_xla():
    f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", batch_group_count=2)  # noqa: E731
    lo = lowered(f, (4, 3, 8, 8), (6, 3, 3, 3))
    ours, _ = mhlo_cost_flops(lo)
    assert ours == xla_flops(lo)


def test_elementwise_and_reductions_match_xla():
    # XLA counts a transcendental op only as a transcendental; mhlo-cost counts it in both columns, so
    # XLA's flops are our vector_flops minus our transcendentals.
    def f(x, y):
        a = x * y + x
        b = jnp.exp(a) + jnp.tanh(y)
        c = lax.rsqrt(b * b + 1.0)
        return jnp.sum(c, axis=1), jnp.max(a, axis=0)

    lo = lowered(f, (64, 32), (64, 32))
    s = analyze(lo.as_text()).summary
    xla = lo.cost_analysis()
    n = 64 * 32
    closed_form_vector = 5 * n + 3 * n + (n - 64) + (n - 32)  # 5 arithmetic + exp, tanh, rsqrt + 2 reduces
    assert s["vector_flops"] == closed_form_vector
    assert s["transcendentals"] == 3 * n == int(xla["transcendentals"])
    assert s["vector_flops"] - s["transcendentals"] == int(xla["flops"])
    # Bytes: every op's operands and results; XLA also charges a few bytes for the tuple of results.
    ours = s["bytes_read"] + s["bytes_written"]
    assert abs(ours - int(xla["bytes accessed"])) <= 16


@pytest.mark.parametrize("name", ["dynamic_slice", "slice", "gather", "dynamic_update_slice"])
def test_windowed_data_movement_reads_only_its_window_like_xla(name):
    i32 = jnp.int32
    cases = {
        "dynamic_slice": (lambda a, i: lax.dynamic_slice_in_dim(a, i, 1, 0), [((3, 64, 64), F32), ((), i32)],
                          2 * 64 * 64 * 4),
        "slice": (lambda a: a[1:2, :, :32], [((3, 64, 64), F32)], 2 * 64 * 32 * 4),
        "gather": (lambda a, i: a[i], [((10, 64), F32), ((4,), i32)], 2 * 4 * 64 * 4),
        "dynamic_update_slice": (lambda a, u, i: lax.dynamic_update_slice_in_dim(a, u, i, 0),
                                 [((10, 64), F32), ((2, 64), F32), ((), i32)], 2 * 2 * 64 * 4),
    }
    f, shapes, window_bytes = cases[name]
    lo = jax.jit(f).lower(*[jax.ShapeDtypeStruct(s, d) for s, d in shapes])
    a = analyze(lo.as_text())
    (row,) = [r for r in a.rows if r.op == f"stablehlo.{name}"]
    indices = sum(t.nbytes for t in row.operands[2 if name == "dynamic_update_slice" else 1:])
    assert row.bytes_read + row.bytes_written == window_bytes + indices
    s = a.summary
    assert abs(s["bytes_read"] + s["bytes_written"] - int(lo.cost_analysis()["bytes accessed"])) <= 32
