"""FlashAttention-2 computes on its compiled head dim: a head dim of 72 (STDiT3) runs the 96 kernel, 64 runs as is
(HEADDIM_SWITCH of flash-attention's static_switch.h); the program's FLOPs stay what the IR says."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.machines.kernels import AttentionLibrary, AttentionModel  # noqa: E402
from mhlo_cost.roofline import Roofline  # noqa: E402
from mhlo_cost.roofline.attention_compute import padded_head_dim  # noqa: E402

B, H, S = 2, 4, 512
FRACTION = 0.5


def _attention(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(8.0)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


def _kernel(d: int, library: str = "fa2"):
    x = jax.ShapeDtypeStruct((B, H, S, d), jnp.bfloat16)
    text = jax.jit(_attention).lower(x, x, x).as_text(debug_info=True)
    hw = get_profile("a100")
    model = AttentionModel(library, ((library, AttentionLibrary(FRACTION, FRACTION, 0.0)),), 128)
    hw = dataclasses.replace(hw, attention=model, transcendental_rate=1e30)
    rf = Roofline(analyze(text, AnalysisOptions(dataflow=True)), hw, fuse_mode="elementwise")
    (k,) = [k for k in rf.fusion.kernels if k.attention]
    return k, hw


@pytest.mark.parametrize("d, padded", [(72, 96), (64, 64), (96, 96), (100, 128), (32, 32), (20, 32)])
def test_fa2_kernel_computes_on_its_padded_head_dim(d, padded):
    k, hw = _kernel(d)
    flops = 2 * 2 * B * H * S * S * d  # Q K^T and P V, each 2 x B H S S d
    assert k.flops - flops >= 0 and padded_head_dim(d, (32, 64, 96, 128, 160, 192, 256)) == padded
    expected = flops * padded / d / (hw.matrix_peak("bf16") * FRACTION)
    assert k.compute_s == pytest.approx(expected, rel=1e-9)


def test_a_library_without_a_ladder_computes_on_the_head_dim_itself():
    k, hw = _kernel(72, "fa3")
    assert k.compute_s == pytest.approx(4 * B * H * S * S * 72 / (hw.matrix_peak("bf16") * FRACTION), rel=1e-9)


def test_cudnn_runs_head_dim_72_on_its_128_kernel():
    # measured on an H200 (benchmarks/data/measured_h200.toml): head dim 72 ran cuDNN's ..._64x128x128 kernel
    k, hw = _kernel(72, "cudnn")
    assert k.compute_s == pytest.approx(4 * B * H * S * S * 128 / (hw.matrix_peak("bf16") * FRACTION), rel=1e-9)
