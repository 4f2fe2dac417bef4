"""torchao's tensorwise float8 matmul under torch.compile (issue 38, torchtitan's fp8 rows): one ``torch._scaled_mm``
call with both inverse scales and ``out_dtype`` (torchao eab345c torchao/float8/float8_python_api.py
``addmm_float8_unwrapped``), so the GEMM's library kernel holds the two scale multiplies and the output cast; a
row-wise scale (not 0-d) is multiplied in after the call, a kernel of its own. Kernels and bytes worked out by hand."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax

from helpers import lowered
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.inductor import inductor

H100 = dataclasses.replace(get_profile("h100"), gemm=None)
M, K, N = 512, 256, 384
F8, BF16, F32 = 1, 2, 4


def _scaled(xq, wq, xs, ws):
    """The fp8 dot accumulating in f32, the activation's and the weight's scales multiplied in, cast to bf16."""
    y = lax.dot_general(xq, wq, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return (y * xs * ws).astype(jnp.bfloat16)


def _kernels(scale_shape):
    f8 = jnp.float8_e4m3fn
    a = analyze(lowered(_scaled, ((M, K), f8), ((K, N), f8), (scale_shape, jnp.float32), ((), jnp.float32)),
                AnalysisOptions(dataflow=True))
    return a, inductor(a, H100).kernels


def test_tensorwise_scales_and_the_cast_are_the_scaled_mm_call():
    a, kernels = _kernels(())
    gemm = [k for k in kernels if k.has_dot]
    assert len(gemm) == 1 and gemm[0].extern
    ops = [a.rows[i].op.split(".")[-1] for i in gemm[0].members]
    assert ops.count("multiply") == 2 and ops[-1] == "convert"
    assert not [k for k in kernels if not k.has_dot and k.bytes_written]  # nothing after the call
    # reads both fp8 operands and the two 0-d scales, writes the bf16 output only (not the f32 accumulator)
    assert gemm[0].bytes_written == M * N * BF16
    assert 0 <= gemm[0].bytes_read - (M * K + K * N) * F8 <= 4 * F32


def test_rowwise_scales_are_multiplied_after_the_call():
    a, kernels = _kernels((M, 1))
    gemm = [k for k in kernels if k.has_dot]
    assert len(gemm) == 1 and "multiply" not in [a.rows[i].op.split(".")[-1] for i in gemm[0].members]
    after = [k for k in kernels if not k.has_dot and k.bytes_written]
    assert len(after) == 1 and after[0].bytes_written == M * N * BF16  # a Triton kernel: reads f32, writes bf16
    assert gemm[0].bytes_written == M * N * F32
